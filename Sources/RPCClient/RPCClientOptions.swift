import Foundation

/// Makes the id of each request. Ids must not repeat while a call with that id is in flight.
public struct RPCIDGenerator: Sendable {
    public var next: @Sendable () -> String

    public init(next: @escaping @Sendable () -> String) { self.next = next }

    /// "1", "2", "3", … (the default); with a prefix, "a-1", "a-2", …
    public static func sequential(startingAt first: Int = 1, prefix: String = "") -> RPCIDGenerator {
        let counter = Counter(first)
        return RPCIDGenerator { prefix + String(counter.take()) }
    }

    /// A random UUID per request.
    public static let uuid = RPCIDGenerator { UUID().uuidString }
}

/// A counter shared by every caller of one id generator.
final class Counter: @unchecked Sendable {
    // @unchecked: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value: Int
    init(_ first: Int) { value = first }
    func take() -> Int {
        lock.withLock {
            defer { value &+= 1 }
            return value
        }
    }
}

/// Whether and how the client connects again after its connection dropped, and how the first
/// `connect` waits for a daemon that is not up yet.
///
/// Tries: up to `maxAttempts`, waiting `initialDelay`, then `multiplier` times longer each time up
/// to `maxDelay`; each try is bounded by `RPCClientOptions.connectTimeout`.
///
/// - The first `RPCClient.connect` tries this way too (a peer that starts before rpcd waits for
///   it), until the tries run out or `connectTimeout` has passed since `connect` began, whichever
///   comes first; then it throws `.connectFailed`.
/// - After a drop, the client reconnects as soon as a call waits for a connection: a call made
///   meanwhile, or (with `RPCClientOptions.retry`) a call that was in flight. Calls wait within
///   their own timeout; if every try fails they fail with `.notSent` (never sent, safe to retry)
///   or `.outcomeUnknown` (sent before the drop).
/// - Without a `RetryPolicy`, a call that was in flight when the connection dropped is not sent
///   again: it fails at once with `.outcomeUnknown`.
public struct ReconnectPolicy: Sendable, Equatable {
    public var maxAttempts: Int
    public var initialDelay: Duration
    public var maxDelay: Duration
    public var multiplier: Double

    public init(maxAttempts: Int = 5, initialDelay: Duration = .milliseconds(100), maxDelay: Duration = .seconds(5), multiplier: Double = 2) {
        self.maxAttempts = max(1, maxAttempts)
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.multiplier = multiplier
    }

    /// The wait before try number `attempt` (0 = the first try, no wait): never above `maxDelay`,
    /// never negative, whatever the policy's numbers (a NaN or huge multiplier gives `maxDelay`).
    public func delay(beforeAttempt attempt: Int) -> Duration {
        guard attempt > 0 else { return .zero }
        let seconds = initialDelay.seconds * pow(multiplier, Double(attempt - 1))
        guard seconds < maxDelay.seconds else { return maxDelay }  // also NaN and infinity
        guard seconds > 0 else { return .zero }
        let nanoseconds = seconds * 1e9
        return nanoseconds < 9.2e18 ? .nanoseconds(Int64(nanoseconds)) : maxDelay
    }

    /// Tries for as long as a call waits (each call's timeout bounds its wait), from 20 ms apart
    /// doubling to 1 s apart: what a `RetryPolicy` uses when `RPCClientOptions.reconnect` is nil.
    /// The first `connect` is then bounded by `connectTimeout` alone.
    public static let whileCallsWait = ReconnectPolicy(
        maxAttempts: .max, initialDelay: .milliseconds(20), maxDelay: .seconds(1), multiplier: 2)
}

/// Who the client is to a daemon that asks (an auth file, a Unix socket without a role for this user).
public enum RPCCredentials: Sendable, Equatable {
    /// A principal's name and token (`rpcd auth add NAME ROLE` prints it): sent as `system.auth`
    /// first on every connection, before any call, so calls never race it.
    case token(name: String, secret: String)
}

/// How a client connects and calls.
public struct RPCClientOptions: Sendable {
    /// Request ids (sequential by default).
    public var idGenerator: RPCIDGenerator
    /// The idempotency key of each mutation (`C.isMutation`) called without one of its own: a
    /// random prefix per generator and a counter by default. nil: mutations carry no key (for a
    /// daemon older than keys, which refuses the `"key"` field), so one whose connection drops
    /// after it was sent is never sent again, even with `retry`. Reads never carry a key.
    public var keyGenerator: RPCKeyGenerator?
    /// Timeout of a call made with `timeout: .default`; nil = wait until the reply or the
    /// connection closes.
    public var defaultTimeout: Duration?
    /// How long one connect try may take; also how long the first `connect` may take in all.
    public var connectTimeout: Duration
    /// nil (the default): one connect try, and after the connection dropped every later call fails
    /// with `.notSent`; with `retry` set, `ReconnectPolicy.whileCallsWait`.
    public var reconnect: ReconnectPolicy?
    /// nil (the default): a call in flight when the connection drops fails with `.outcomeUnknown`.
    /// Set: it is sent again after the reconnect (reads as they are, mutations with their key).
    public var retry: RetryPolicy?
    /// Longest reply line read (a long `listUsers` can be large); a longer one is dropped.
    public var maxFrameBytes: Int
    /// Requests buffered while the daemon does not read, before the connection is given up.
    public var maxOutputBytes: Int
    /// Sent on connect and after every reconnect; nil: none (a daemon without an auth file).
    public var credentials: RPCCredentials?
    /// TLS to the daemon; nil: plain TCP, unless the address is `tls:HOST:PORT` (then the
    /// defaults: the system's trust store, the host as the name).
    public var tls: RPCTLSOptions?
    /// Reads may be answered by a member that is not the leader holding its lease (a follower of
    /// a coordinated cluster), whose data may lag: `system.staleReads` is sent on every connection.
    public var allowStaleReads = false
    /// The connection's event loop waits on a thread of its own instead of a libdispatch read
    /// source: one wake-up per read instead of two (the manager thread's, then a worker's). For a
    /// daemon's follower, which reads its leader's feed all the time; the library starts no
    /// thread unless its caller asks.
    package var readsOnOwnThread = false

    public init(
        idGenerator: RPCIDGenerator = .sequential(),
        keyGenerator: RPCKeyGenerator? = .random(),
        defaultTimeout: Duration? = .seconds(30),
        connectTimeout: Duration = .seconds(10),
        reconnect: ReconnectPolicy? = nil,
        retry: RetryPolicy? = nil,
        maxFrameBytes: Int = 64 << 20,
        maxOutputBytes: Int = 64 << 20,
        credentials: RPCCredentials? = nil,
        tls: RPCTLSOptions? = nil
    ) {
        self.credentials = credentials
        self.tls = tls
        self.idGenerator = idGenerator
        self.keyGenerator = keyGenerator
        self.defaultTimeout = defaultTimeout
        self.connectTimeout = connectTimeout
        self.reconnect = reconnect
        self.retry = retry
        self.maxFrameBytes = maxFrameBytes
        self.maxOutputBytes = maxOutputBytes
    }

    /// The reconnect policy in force: `reconnect`, else `.whileCallsWait` when `retry` is set.
    var reconnectPolicy: ReconnectPolicy? {
        reconnect ?? (retry == nil ? nil : .whileCallsWait)
    }
}
