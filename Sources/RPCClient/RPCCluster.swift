import Foundation
import RPCSchema

/// The members of a replicated rpcd (a leader and its followers), as one: a call goes to the
/// member that answered last, and moves on, in the members' order, from one that cannot be
/// reached, that answers `readOnly` (a follower: it is not the leader, or no longer), or that was
/// lost before it answered, or that let a read or a keyed mutation time out (a stopped process:
/// it is tried last for a few seconds, since it still accepts connections). A mutation keeps one
/// idempotency key across the members it tries, so a retry after a lost connection or a failover
/// is applied at most once.
///
/// ```swift
/// let cluster = RPCCluster(members: ["10.0.0.1:7878", "10.0.0.2:7878", "10.0.0.3:7878"])
/// let user = try await cluster.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
/// ```
public final class RPCCluster: @unchecked Sendable {
    // @unchecked: `state` is guarded by `lock`.
    public let members: [String]
    private let options: RPCClientOptions
    private let lock = NSLock()
    private var state = State()

    private struct State {
        /// The member that answered last (tried first).
        var current = 0
        var clients: [Int: RPCClient] = [:]
        /// Members that let a call time out, and until when they are tried last.
        var suspect: [Int: ContinuousClock.Instant] = [:]
    }

    /// How long a member that let a call time out is tried last.
    static let suspicion: Duration = .seconds(5)

    /// `members`: `HOST:PORT`, `tls:HOST:PORT` or `unix:PATH`, in the order to try them.
    public init(members: [String], options: RPCClientOptions = RPCClientOptions()) {
        self.members = members
        self.options = options
    }

    deinit { close() }

    /// The member the next call goes to first.
    public var current: String { members.isEmpty ? "" : members[lock.withLock { state.current }] }

    /// `RPCClient.call` on the members in turn (see the type): the first member's answer that is
    /// neither `readOnly` nor a lost connection; else the error of the first member that may have
    /// applied the call (lost or timed out), or the last member's error.
    public func call<C: RPCCall>(_ call: C, key: String? = nil, timeout: CallTimeout = .default) async throws -> C.Output {
        guard !members.isEmpty else { throw RPCClientError.connectFailed(address: "", reason: "the cluster has no members; give at least one address") }
        let key = key ?? (C.isMutation ? options.keyGenerator?.next() : nil)
        let order: [Int] = lock.withLock {
            let now = ContinuousClock.now
            state.suspect = state.suspect.filter { $0.value > now }
            let all = (0..<members.count).map { (state.current + $0) % members.count }
            return all.filter { state.suspect[$0] == nil } + all.filter { state.suspect[$0] != nil }
        }
        var lastError: any Error = RPCClientError.connectFailed(address: members[order[0]], reason: "not tried")
        // A member that may have applied the call (lost or silent): if none after it takes the
        // call, that is its outcome, not a later follower's readOnly, which says nothing applied it.
        var unknown: RPCClientError?
        for index in order {
            // A connection kept from an earlier call may have died since: one fresh try, then on.
            for _ in 0..<2 {
                var kept = false
                do {
                    let (client, wasKept) = try await client(index)
                    kept = wasKept
                    let output = try await client.call(call, key: key, timeout: timeout)
                    lock.withLock { state.current = index }
                    return output
                } catch let error as RPCClientError where Self.movesOn(error, keyed: key != nil || !C.isMutation) {
                    lastError = error
                    if unknown == nil, Self.mayHaveApplied(error) { unknown = error }
                    guard error.code == nil else { break }  // readOnly: the member is up, and not the leader
                    drop(index)
                    if case .timedOut = error {
                        lock.withLock { state.suspect[index] = ContinuousClock.now + Self.suspicion }
                        break
                    }
                    if !kept { break }
                }
            }
        }
        throw unknown ?? lastError
    }

    /// Closes every member's connection.
    public func close() {
        let clients = lock.withLock {
            defer { state.clients = [:] }
            return Array(state.clients.values)
        }
        for client in clients { client.close() }
    }

    /// Whether a call that failed with `error` may go to the next member: it was not applied
    /// (unreachable, not sent, refused as `readOnly`), or a second try cannot apply it twice.
    static func movesOn(_ error: RPCClientError, keyed: Bool) -> Bool {
        if mayHaveApplied(error) { return keyed }
        switch error {
        case .connectFailed, .notSent: return true
        case .server(let code, _, _, _): return code == .readOnly
        default: return false
        }
    }

    /// Whether the member that failed with `error` may have applied the call (it was sent).
    static func mayHaveApplied(_ error: RPCClientError) -> Bool {
        switch error {
        case .outcomeUnknown, .connectionClosed, .timedOut: return true
        default: return false
        }
    }

    /// Member `index`'s client, and whether it was kept from an earlier call.
    private func client(_ index: Int) async throws -> (RPCClient, kept: Bool) {
        if let client = lock.withLock({ state.clients[index] }) { return (client, true) }
        let client = try await RPCClient.connect(to: members[index], options: options)
        let raced: RPCClient? = lock.withLock {
            if let other = state.clients[index] { return other }
            state.clients[index] = client
            return nil
        }
        if let raced {
            client.close()
            return (raced, true)
        }
        return (client, false)
    }

    private func drop(_ index: Int) {
        lock.withLock { state.clients.removeValue(forKey: index) }?.close()
    }
}
