import RPCSchema

/// Why a client call failed. Every error says which call (method and id) when one is known.
///
/// `.server` is the daemon's own answer (an `error.error` counter-request); the other cases are
/// the client's: the connection, the clock, or a reply it could not read.
///
/// Whether a failed call may have been applied:
/// - never: `.notSent`, `.invalidCall`, `.connectFailed` (and `.server`: the daemon refused it);
/// - maybe: `.outcomeUnknown` (its `key` lets you send it again safely), `.timedOut`, and
///   `.cancelled` or `.connectionClosed` for a call that was in flight.
public enum RPCClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The daemon answered the call with `error.error`.
    case server(code: RPCErrorCode, errorMessage: String, method: RPCMethod, id: String)
    /// `RPCClient.connect` could not connect (refused, unreachable, connect timeout, unparsable
    /// address), after every try its `ReconnectPolicy` allows. Only `connect` throws it; a call
    /// that finds no connection fails with `.notSent`.
    case connectFailed(address: String, reason: String)
    /// The call never left this process: no connection (it dropped and no reconnect policy is
    /// set, every reconnect try failed, or none succeeded within the call's timeout), or the
    /// connection was lost before the call's last byte was written. The daemon never saw it:
    /// sending it again, read or mutation, is safe.
    case notSent(address: String, method: RPCMethod, id: String, reason: String)
    /// The call was sent, then the connection was lost before its reply, and it was not sent again
    /// (no `RetryPolicy`, a mutation without a key, the policy's tries used up, or no reconnect
    /// within its timeout): it may or may not have been applied. `key` is the idempotency key it
    /// carried (nil for a read or an unkeyed call): `call(sameCall, key: key)` applies it at most
    /// once and answers with the first outcome.
    case outcomeUnknown(address: String, method: RPCMethod, id: String, key: String?, reason: String)
    /// The client was closed by its owner (`close()`, or released) before the reply came, or
    /// before the call was made. A call in flight then may or may not have been applied. Also how
    /// a change feed (`RPCChanges`) ends when its connection is lost (method and id nil).
    case connectionClosed(address: String, method: RPCMethod?, id: String?, reason: String)
    /// The call was sent and no reply came within its timeout: it may or may not have been applied.
    /// (A call whose timeout ran out before it could be sent fails with `.notSent`.)
    case timedOut(method: RPCMethod, id: String, after: Duration)
    /// The call could not be sent: its param did not encode, or its id was already in flight.
    case invalidCall(method: RPCMethod, reason: String)
    /// The reply did not decode as the call's `Reply` type.
    case badReply(method: RPCMethod, id: String, reason: String)
    /// The task awaiting the call was cancelled.
    case cancelled(method: RPCMethod, id: String)
    /// A test double (`RPCService.unimplemented`) was called for a method it does not override.
    case unimplemented(method: RPCMethod)
    /// The call was refused because the client's `system.auth` as `name` failed on this
    /// connection; `errorMessage` is the daemon's answer to it (e.g. "unknown name or wrong token
    /// for \"app\""). Not applied; fix the credentials.
    case authenticationFailed(name: String, errorMessage: String, method: RPCMethod, id: String)

    /// The daemon's error code, for `.server` only.
    public var code: RPCErrorCode? {
        if case .server(let code, _, _, _) = self { return code }
        if case .authenticationFailed = self { return .unauthorized }
        return nil
    }

    /// The daemon's message for `.server`; for the others, the same one line as `description`.
    public var errorMessage: String {
        if case .server(_, let message, _, _) = self { return message }
        if case .authenticationFailed(_, let message, _, _) = self { return message }
        return description
    }

    /// The idempotency key of a call that failed with `.outcomeUnknown`, when it carried one.
    public var key: String? {
        if case .outcomeUnknown(_, _, _, let key, _) = self { return key }
        return nil
    }

    /// The method of the failed call, when the error belongs to one.
    public var method: RPCMethod? {
        switch self {
        case .server(_, _, let method, _), .timedOut(let method, _, _), .invalidCall(let method, _),
            .badReply(let method, _, _), .cancelled(let method, _), .unimplemented(let method),
            .notSent(_, let method, _, _), .outcomeUnknown(_, let method, _, _, _), .authenticationFailed(_, _, let method, _):
            return method
        case .connectionClosed(_, let method, _, _): return method
        case .connectFailed: return nil
        }
    }

    /// The id the call was sent with, when it got that far.
    public var id: String? {
        switch self {
        case .server(_, _, _, let id), .timedOut(_, let id, _), .badReply(_, let id, _), .cancelled(_, let id),
            .notSent(_, _, let id, _), .outcomeUnknown(_, _, let id, _, _), .authenticationFailed(_, _, _, let id):
            return id
        case .connectionClosed(_, _, let id, _): return id
        case .connectFailed, .invalidCall, .unimplemented: return nil
        }
    }

    public var description: String {
        switch self {
        case .server(let code, let message, let method, let id):
            return "\(method) (id \(id)) failed with \(code): \(message)"
        case .connectFailed(let address, let reason):
            return "could not connect to \(address): \(reason)"
        case .notSent(let address, let method, let id, let reason):
            return "\(method) (id \(id)) was not sent to \(address), so it was not applied: \(reason)"
        case .outcomeUnknown(let address, let method, let id, let key, let reason):
            let again = key.map { "; sending it again with key \"\($0)\" applies it at most once" } ?? ""
            return "\(method) (id \(id)) was sent to \(address) but its reply never came, so it may or may not have been applied: \(reason)\(again)"
        case .connectionClosed(let address, let method?, let id?, let reason):
            return "connection to \(address) closed before the reply to \(method) (id \(id)) arrived: \(reason)"
        case .connectionClosed(let address, _, _, let reason):
            return "connection to \(address) is closed: \(reason)"
        case .timedOut(let method, let id, let after):
            return "\(method) (id \(id)) got no reply within \(after.secondsText) s"
        case .invalidCall(let method, let reason):
            return "\(method) was not sent: \(reason)"
        case .badReply(let method, let id, let reason):
            return "the reply to \(method) (id \(id)) could not be read: \(reason)"
        case .cancelled(let method, let id):
            return "\(method) (id \(id)) was cancelled"
        case .authenticationFailed(let name, let message, let method, let id):
            return "\(method) (id \(id)) was not run: system.auth as \"\(name)\" failed: \(message)"
        case .unimplemented(let method):
            return "\(method) is not implemented by this RPCService; override it with .override(\(method.typeHint).self) { … }"
        }
    }
}

extension Duration {
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    var secondsText: String {
        let s = seconds
        return s == s.rounded() && abs(s) < 1e15 ? String(Int(s)) : String(s)
    }

    /// For Dispatch deadlines: whole nanoseconds, clamped to 0...Int.max.
    var nanoseconds: Int {
        let nanos = seconds * 1e9
        return nanos >= Double(Int.max) ? .max : Int(max(0, nanos))
    }
}

extension RPCMethod {
    /// `user.getUser` -> `GetUser`, for messages.
    var typeHint: String { name.prefix(1).uppercased() + name.dropFirst() }
}
