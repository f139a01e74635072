import RPCClient
import RPCSchema
import Testing

/// The test double: no daemon, no sockets.
@Suite("RPCService test double")
struct RPCServiceTests {
    let ada = User(id: "u1", name: "Ada", email: "ada@example.com")

    @Test("unimplemented throws .unimplemented with the method")
    func unimplemented() async {
        let rpc = RPCService.unimplemented
        await #expect(throws: RPCClientError.unimplemented(method: RPCMethod("user", "getUser"))) {
            try await rpc.call(GetUser(userId: "u1"))
        }
    }

    @Test("override answers one method type; the others stay unimplemented")
    func overrideOne() async throws {
        var rpc = RPCService.unimplemented
        rpc.override(GetUser.self) { call in User(id: call.userId, name: "Ada", email: "ada@example.com") }
        #expect(try await rpc.call(GetUser(userId: "u7")).id == "u7")
        await #expect(throws: RPCClientError.unimplemented(method: ListUsers.method)) {
            try await rpc.call(ListUsers())
        }
    }

    @Test("override returning a fixed Output; Output differs from Reply for lists")
    func overrideReturning() async throws {
        var rpc = RPCService.unimplemented
        rpc.override(ListUsers.self, returning: [ada])
        let users: [User] = try await rpc.call(ListUsers(limit: 5))
        #expect(users == [ada])
    }

    @Test("override throwing a server error keeps code, message, method and id")
    func overrideThrowing() async {
        var rpc = RPCService.unimplemented
        let error = RPCClientError.server(code: .conflict, errorMessage: "exists", method: CreateUser.method, id: "9")
        rpc.override(CreateUser.self, throwing: error)
        do {
            _ = try await rpc.call(CreateUser(id: "u1", name: "Ada", email: "a@b"))
            Issue.record("expected a throw")
        } catch let caught as RPCClientError {
            #expect(caught.code == .conflict)
            #expect(caught.errorMessage == "exists")
            #expect(caught.method == CreateUser.method)
            #expect(caught.id == "9")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("a later override of the same type wins; overriding() leaves the original alone")
    func layering() async throws {
        var rpc = RPCService.unimplemented
        rpc.override(GetUser.self, returning: ada)
        let other = rpc.overriding(GetUser.self) { _ in User(id: "u2", name: "Bob", email: "bob@example.com") }
        #expect(try await rpc.call(GetUser(userId: "x")).name == "Ada")
        #expect(try await other.call(GetUser(userId: "x")).name == "Bob")
    }

    @Test("the double sees the typed param it was called with")
    func seesParams() async throws {
        var rpc = RPCService.unimplemented
        rpc.override(UpdateUser.self) { call in
            User(id: call.userId, name: call.newName ?? "?", email: call.newEmail ?? "?")
        }
        let user = try await rpc.call(UpdateUser(userId: "u1", newName: "Ada L"))
        #expect(user == User(id: "u1", name: "Ada L", email: "?"))
    }
}

@Suite("client pieces without a daemon")
struct ClientPieceTests {
    @Test("sequential ids: 1, 2, 3; with a prefix; unique across threads")
    func sequentialIDs() async {
        let ids = RPCIDGenerator.sequential()
        #expect([ids.next(), ids.next(), ids.next()] == ["1", "2", "3"])
        let prefixed = RPCIDGenerator.sequential(startingAt: 10, prefix: "a-")
        #expect(prefixed.next() == "a-10")
        let shared = RPCIDGenerator.sequential()
        let all = await withTaskGroup(of: [String].self) { group in
            for _ in 0..<8 { group.addTask { (0..<500).map { _ in shared.next() } } }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(Set(all).count == 4000)
    }

    @Test("reconnect backoff: no wait first, then doubling up to the cap")
    func backoff() {
        let policy = ReconnectPolicy(maxAttempts: 6, initialDelay: .milliseconds(100), maxDelay: .milliseconds(500))
        #expect(policy.delay(beforeAttempt: 0) == .zero)
        #expect(policy.delay(beforeAttempt: 1) == .milliseconds(100))
        #expect(policy.delay(beforeAttempt: 2) == .milliseconds(200))
        #expect(policy.delay(beforeAttempt: 3) == .milliseconds(400))
        #expect(policy.delay(beforeAttempt: 4) == .milliseconds(500))
    }

    @Test("errors say which call failed and why")
    func messages() {
        let timedOut = RPCClientError.timedOut(method: GetUser.method, id: "7", after: .milliseconds(1500))
        #expect(timedOut.description == "user.getUser (id 7) got no reply within 1.5 s")
        #expect(timedOut.code == nil && timedOut.id == "7" && timedOut.method == GetUser.method)
        let closed = RPCClientError.connectionClosed(address: "127.0.0.1:1", method: GetUser.method, id: "3", reason: "connection reset by peer")
        #expect(closed.description.contains("closed before the reply to user.getUser (id 3)"))
    }

    @Test("connect to an address that is not HOST:PORT fails at once")
    func badAddress() async {
        await #expect(throws: RPCClientError.self) { try await RPCClient.connect(to: "example.com") }
    }
}
