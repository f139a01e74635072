import Dispatch
import RPCSchema

/// One call waiting for its reply: its line (to send again), and how far it got.
struct PendingCall {
    let id: String
    let method: RPCMethod
    let key: String?
    /// The request line, with its `\n`: sent again as it is (same id, same key).
    let line: [UInt8]
    /// Safe to send again after it was sent: a read, or a call with an idempotency key.
    let resendable: Bool
    /// The `system.auth` of one connection: not a caller's call, never sent again.
    let isAuth: Bool
    let complete: (Result<Request, RPCClientError>) -> Void
    var timer: DispatchWorkItem?
    /// When it was first submitted, among all calls: calls are sent again in this order.
    var order: UInt64 = 0
    /// How many times its whole line was written to a connection.
    var sends = 0
    /// The connection it was handed to and where its last byte lies in that connection's output
    /// stream; nil while it waits for a connection.
    var handedTo: (connection: UInt64, end: UInt64)?

    init(
        id: String, method: RPCMethod, key: String? = nil, line: [UInt8] = [], resendable: Bool = false,
        isAuth: Bool = false, complete: @escaping (Result<Request, RPCClientError>) -> Void
    ) {
        self.id = id
        self.method = method
        self.key = key
        self.line = line
        self.resendable = resendable
        self.isAuth = isAuth
        self.complete = complete
    }
}

/// The calls in flight by id (sourcekit-lsp `outstandingRequests`), and what becomes of them when
/// their connection is lost. A value: `ClientCore` owns it on its queue, and tests script it.
struct PendingCalls {
    /// What a call that cannot wait for another connection fails with.
    enum Fate: Equatable {
        /// Its line never left: the daemon never saw it.
        case notSent
        /// It was written at least once: it may have been applied.
        case outcomeUnknown
    }

    /// By id as exact UTF-8 bytes: a reply matches its call only byte for byte.
    private(set) var byID: [ExactID: PendingCall] = [:]
    private var nextOrder: UInt64 = 0

    var isEmpty: Bool { byID.isEmpty }
    var count: Int { byID.count }
    /// Whether a caller's call waits for a connection.
    var anyWaiting: Bool { byID.values.contains { $0.handedTo == nil && !$0.isAuth } }

    subscript(id: String) -> PendingCall? { byID[ExactID(id)] }

    mutating func insert(_ call: PendingCall) {
        var call = call
        call.order = nextOrder
        nextOrder &+= 1
        byID[ExactID(call.id)] = call
    }

    mutating func remove(_ id: String) -> PendingCall? {
        byID.removeValue(forKey: ExactID(id))
    }

    mutating func removeAll() -> [PendingCall] {
        defer { byID = [:] }
        return byID.values.sorted { $0.order < $1.order }
    }

    /// The ids of the calls waiting for a connection, in the order they were first made.
    func waiting() -> [String] {
        byID.values.filter { $0.handedTo == nil && !$0.isAuth }.sorted { $0.order < $1.order }.map(\.id)
    }

    /// Records that `id`'s line was handed to `connection`, ending at byte `end` of its stream.
    mutating func handed(_ id: String, to connection: UInt64, end: UInt64) {
        byID[ExactID(id)]?.handedTo = (connection, end)
    }

    /// Whether the call was ever written, counting a line handed to `connection` as written once
    /// `written` (that connection's bytes out) reached its end.
    static func wasSent(_ call: PendingCall, connection: UInt64, written: UInt64) -> Bool {
        if call.sends > 0 { return true }
        guard let handed = call.handedTo, handed.connection == connection else { return false }
        return handed.end <= written
    }

    /// `connection` was lost after `written` bytes of its stream left. Each call handed to it goes
    /// back to waiting for a connection if it may (never sent and `canReconnect`; or sent,
    /// resendable, tries left under `retry`, and `canReconnect`); the others are removed and
    /// returned with their fate, in the order they were made. `system.auth` calls are dropped.
    mutating func connectionLost(
        _ connection: UInt64, written: UInt64, retry: RetryPolicy?, canReconnect: Bool
    ) -> [(call: PendingCall, fate: Fate)] {
        var failed: [(call: PendingCall, fate: Fate)] = []
        for (key, var call) in byID {
            guard let handed = call.handedTo, handed.connection == connection else { continue }
            if call.isAuth {
                byID[key] = nil
                continue
            }
            if handed.end <= written { call.sends += 1 }
            call.handedTo = nil
            let mayWait: Bool
            if call.sends == 0 {
                mayWait = canReconnect
            } else if let retry {
                mayWait = canReconnect && call.resendable && call.sends < retry.maxAttempts
            } else {
                mayWait = false
            }
            if mayWait {
                byID[key] = call
            } else {
                byID[key] = nil
                failed.append((call, call.sends == 0 ? .notSent : .outcomeUnknown))
            }
        }
        return failed.sorted { $0.call.order < $1.call.order }
    }

    /// Removes every call waiting for a connection (no connection will come), with its fate.
    mutating func removeWaiting() -> [(call: PendingCall, fate: Fate)] {
        var removed: [(call: PendingCall, fate: Fate)] = []
        for id in waiting() {
            guard let call = remove(id) else { continue }
            removed.append((call, call.sends == 0 ? .notSent : .outcomeUnknown))
        }
        return removed
    }
}
