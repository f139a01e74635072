import RPCSchema
import Testing

@testable import RPCClient

/// What becomes of calls in flight when their connection is lost: scripted, without sockets.
@Suite("pending calls on a lost connection")
struct PendingCallsTests {
    /// Calls r (a read), k (a keyed mutation), u (an unkeyed mutation), each a 10-byte line,
    /// handed to connection 1 in that order: their lines end at bytes 10, 20, 30.
    func handedThree() -> PendingCalls {
        var calls = PendingCalls()
        let specs: [(id: String, method: RPCMethod, key: String?, resendable: Bool)] = [
            ("r", GetUser.method, nil, true), ("k", CreateUser.method, "key-1", true), ("u", DeleteUser.method, nil, false),
        ]
        for (index, spec) in specs.enumerated() {
            calls.insert(PendingCall(
                id: spec.id, method: spec.method, key: spec.key, line: Array(repeating: 0, count: 10),
                resendable: spec.resendable, complete: { _ in }))
            calls.handed(spec.id, to: 1, end: UInt64(10 * (index + 1)))
        }
        return calls
    }

    func fates(_ lost: [(call: PendingCall, fate: PendingCalls.Fate)]) -> [String] {
        lost.map { "\($0.call.id):\($0.fate == .notSent ? "notSent" : "outcomeUnknown")" }
    }

    @Test("no retry, no reconnect: written calls are outcomeUnknown, the rest notSent, in call order")
    func noRetryNoReconnect() {
        var calls = handedThree()
        let lost = calls.connectionLost(1, written: 15, retry: nil, canReconnect: false)
        #expect(fates(lost) == ["r:outcomeUnknown", "k:notSent", "u:notSent"])
        #expect(calls.isEmpty)
    }

    @Test("no retry, with reconnect: written calls fail; calls never written wait for the next connection")
    func noRetryWithReconnect() {
        var calls = handedThree()
        let lost = calls.connectionLost(1, written: 20, retry: nil, canReconnect: true)
        #expect(fates(lost) == ["r:outcomeUnknown", "k:outcomeUnknown"])
        #expect(calls.waiting() == ["u"])
        #expect(calls.anyWaiting)
    }

    @Test("retry: reads and keyed mutations wait to be sent again; a written unkeyed mutation does not")
    func retry() {
        var calls = handedThree()
        let lost = calls.connectionLost(1, written: 30, retry: RetryPolicy(), canReconnect: true)
        #expect(fates(lost) == ["u:outcomeUnknown"])
        #expect(calls.waiting() == ["r", "k"])
        #expect(calls["k"]?.sends == 1 && calls["k"]?.handedTo == nil)
    }

    @Test("retry: an unkeyed mutation never written waits; a call sent maxAttempts times fails")
    func retryLimits() {
        var calls = handedThree()
        let policy = RetryPolicy(maxAttempts: 2)
        #expect(fates(calls.connectionLost(1, written: 25, retry: policy, canReconnect: true)).isEmpty)
        #expect(calls.waiting() == ["r", "k", "u"])
        // Sent again on connection 2, all written, lost again: r and k were sent twice now.
        for (index, id) in ["r", "k", "u"].enumerated() { calls.handed(id, to: 2, end: UInt64(10 * (index + 1))) }
        #expect(calls.waiting().isEmpty)
        let lost = calls.connectionLost(2, written: 30, retry: policy, canReconnect: true)
        #expect(fates(lost) == ["r:outcomeUnknown", "k:outcomeUnknown", "u:outcomeUnknown"])
    }

    @Test("retry without a way to reconnect: nothing waits")
    func retryCannotReconnect() {
        var calls = handedThree()
        let lost = calls.connectionLost(1, written: 10, retry: RetryPolicy(), canReconnect: false)
        #expect(fates(lost) == ["r:outcomeUnknown", "k:notSent", "u:notSent"])
    }

    @Test("calls on another connection, and calls waiting, are left alone; system.auth is dropped")
    func otherConnections() {
        var calls = PendingCalls()
        calls.insert(PendingCall(id: "rpc.auth.1", method: SystemAuth.method, isAuth: true, complete: { _ in }))
        calls.handed("rpc.auth.1", to: 1, end: 40)
        calls.insert(PendingCall(id: "w", method: GetUser.method, resendable: true, complete: { _ in }))
        #expect(calls.waiting() == ["w"])
        #expect(calls.connectionLost(2, written: 0, retry: nil, canReconnect: false).isEmpty)
        #expect(calls.count == 2)
        #expect(calls.connectionLost(1, written: 40, retry: nil, canReconnect: false).isEmpty)
        #expect(calls["rpc.auth.1"] == nil && calls.waiting() == ["w"])
        // No connection will come: the waiting call was never sent.
        #expect(fates(calls.removeWaiting()) == ["w:notSent"])
    }
}

@Suite("keys, timeouts and the new errors, without a daemon")
struct ClientKeyPieceTests {
    @Test("random keys: 24 hex digits, a dot, a counter; a new prefix per generator; unique across tasks")
    func randomKeys() async {
        let keys = RPCKeyGenerator.random()
        let first = keys.next()
        let parts = first.split(separator: ".")
        #expect(parts.count == 2 && parts[0].count == 24 && parts[1] == "1", "\(first)")
        #expect(parts[0].allSatisfy { $0.isHexDigit && !$0.isUppercase })
        #expect(keys.next() == "\(parts[0]).2")
        let other = RPCKeyGenerator.random().next()
        #expect(other.split(separator: ".")[0] != parts[0])
        let all = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<8 { group.addTask { (0..<500).map { _ in keys.next() } } }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(Set(all).count == 4000)
        #expect(all.allSatisfy { $0.utf8.count <= Request.maxKeyBytes })
    }

    @Test("CallTimeout: .default is the options' default, .none is none, .after is its duration")
    func callTimeout() {
        let options = RPCClientOptions(defaultTimeout: .seconds(7))
        #expect(CallTimeout.default.resolved(options) == .seconds(7))
        #expect(CallTimeout.none.resolved(options) == nil)
        #expect(CallTimeout.after(.milliseconds(5)).resolved(options) == .milliseconds(5))
        #expect(CallTimeout.default.resolved(RPCClientOptions(defaultTimeout: nil)) == nil)
    }

    @Test("a retry policy implies reconnecting; an explicit reconnect policy wins")
    func retryImpliesReconnect() {
        #expect(RPCClientOptions().reconnectPolicy == nil)
        #expect(RPCClientOptions(retry: RetryPolicy()).reconnectPolicy == .whileCallsWait)
        let mine = ReconnectPolicy(maxAttempts: 3)
        #expect(RPCClientOptions(reconnect: mine, retry: RetryPolicy()).reconnectPolicy == mine)
        #expect(RetryPolicy(maxAttempts: 0).maxAttempts == 1)
    }

    @Test("notSent and outcomeUnknown say which call, whether it may have been applied, and its key")
    func errors() {
        let notSent = RPCClientError.notSent(address: "127.0.0.1:1", method: CreateUser.method, id: "4", reason: "not connected")
        #expect(notSent.description == "user.createUser (id 4) was not sent to 127.0.0.1:1, so it was not applied: not connected")
        #expect(notSent.method == CreateUser.method && notSent.id == "4" && notSent.key == nil && notSent.code == nil)
        let unknown = RPCClientError.outcomeUnknown(
            address: "127.0.0.1:1", method: CreateUser.method, id: "5", key: "k.1", reason: "connection reset by peer")
        #expect(unknown.key == "k.1" && unknown.id == "5" && unknown.method == CreateUser.method)
        #expect(unknown.description.contains("may or may not have been applied: connection reset by peer"))
        #expect(unknown.description.hasSuffix("sending it again with key \"k.1\" applies it at most once"))
    }
}
