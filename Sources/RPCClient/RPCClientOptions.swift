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

/// When the connection dropped, whether and how a later call reconnects first.
///
/// Calls in flight when it dropped fail with `.connectionClosed` (they may or may not have been
/// applied; the client does not resend them). The next call starts a reconnect: up to
/// `maxAttempts` tries, waiting `initialDelay`, then `multiplier` times longer each time up to
/// `maxDelay`. Calls made meanwhile wait for it (within their own timeout); if every try fails
/// they fail with `.connectFailed`.
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
    /// Timeout of a call made without one; nil = wait until the reply or the connection closes.
    public var defaultTimeout: Duration?
    /// How long one connect try may take.
    public var connectTimeout: Duration
    /// nil (the default): after the connection dropped, every later call fails with `.connectionClosed`.
    public var reconnect: ReconnectPolicy?
    /// Longest reply line read (a long `listUsers` can be large); a longer one is dropped.
    public var maxFrameBytes: Int
    /// Requests buffered while the daemon does not read, before the connection is given up.
    public var maxOutputBytes: Int
    /// Sent on connect and after every reconnect; nil: none (a daemon without an auth file).
    public var credentials: RPCCredentials?

    public init(
        idGenerator: RPCIDGenerator = .sequential(),
        defaultTimeout: Duration? = .seconds(30),
        connectTimeout: Duration = .seconds(10),
        reconnect: ReconnectPolicy? = nil,
        maxFrameBytes: Int = 64 << 20,
        maxOutputBytes: Int = 64 << 20,
        credentials: RPCCredentials? = nil
    ) {
        self.credentials = credentials
        self.idGenerator = idGenerator
        self.defaultTimeout = defaultTimeout
        self.connectTimeout = connectTimeout
        self.reconnect = reconnect
        self.maxFrameBytes = maxFrameBytes
        self.maxOutputBytes = maxOutputBytes
    }
}
