import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// Idempotency keys as the client writes them (issue 13): every mutation carries one, reads none.
@Suite("RPCClient idempotency keys", .ownExecutor)
struct ClientKeyTests {
    /// The request the client wrote, decoded (so its key can be read).
    static func request(_ line: String) throws -> Request {
        let decoded = Array(line.utf8).withUnsafeBytes { RequestCodec.decode($0) }
        guard case .request(let request) = decoded else { throw HarnessError("not a request line: \(line)") }
        return request
    }

    @Test("on the wire: mutations carry a generated key, reads none; a caller's key goes as given")
    func keysOnTheWire() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }

        let create = spawn { try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(30)) }
        let createLine = try await offPool { try peer.readLine() }
        let created = try Self.request(createLine)
        let key = try #require(created.key)
        #expect(key.wholeMatch(of: /[0-9a-f]{24}\.[0-9]+/) != nil, "\(key)")
        #expect(createLine == #"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"key":"\#(key)"}"#)
        try peer.send(#"{"id":"1","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"# + "\n")
        #expect(try await create.value.id == "u1")

        let get = spawn { try await client.call(GetUser(userId: "u1"), timeout: .seconds(30)) }
        #expect(try await offPool { try peer.readLine() } == #"{"id":"2","method":"user.getUser","param":{"userId":"u1"}}"#)
        try peer.send(#"{"id":"2","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"# + "\n")
        _ = try await get.value

        // A batch: each mutation its own key, the read none.
        let batch = spawn {
            await client.batch(
                UpdateUser(userId: "u1", newName: "Ada L"), ListUsers(), DeleteUser(userId: "u1"), timeout: .seconds(30))
        }
        let lines = try await offPool { try (0..<3).map { _ in try peer.readLine() } }
        let requests = try lines.map(Self.request)
        #expect(requests.map(\.id) == ["3", "4", "5"])
        #expect(requests[1].key == nil)
        let batchKeys = [requests[0].key, requests[2].key].compactMap { $0 }
        #expect(batchKeys.count == 2 && Set(batchKeys + [key]).count == 3, "\(batchKeys)")
        // The generator's prefix is the client's; only the counter moves.
        #expect(Set((batchKeys + [key]).map { $0.split(separator: ".")[0] }).count == 1)
        try peer.send(#"{"id":"3","method":"user.updateUserResult","param":{"id":"u1","name":"Ada L","email":"a@x"}}"# + "\n")
        try peer.send(#"{"id":"4","method":"user.listUsersResult","param":{"users":[]}}"# + "\n")
        try peer.send(#"{"id":"5","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        let (updated, listed, deleted) = await batch.value
        #expect(try updated.get().name == "Ada L" && (try listed.get()).isEmpty && (try deleted.get()).deleted == "u1")

        // The caller's own key, on a mutation.
        let own = spawn { try await client.call(DeleteUser(userId: "u1"), key: "order-42", timeout: .seconds(30)) }
        #expect(try await offPool { try peer.readLine() } == #"{"id":"6","method":"user.deleteUser","param":{"userId":"u1"},"key":"order-42"}"#)
        try peer.send(#"{"id":"6","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        _ = try await own.value
    }

    @Test("keyGenerator nil: mutations go without a key")
    func noKeys() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: RPCClientOptions(keyGenerator: nil))
        defer { client.close() }
        try await offPool { try peer.accept() }
        let call = spawn { try await client.call(DeleteUser(userId: "u1"), timeout: .seconds(30)) }
        #expect(try await offPool { try peer.readLine() } == #"{"id":"1","method":"user.deleteUser","param":{"userId":"u1"}}"#)
        try peer.send(#"{"id":"1","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        _ = try await call.value
    }

    @Test("a key of 0 or more than 128 bytes is .invalidCall and nothing is sent; 128 bytes go")
    func keyLength() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }
        for bad in ["", String(repeating: "é", count: 65)] {
            do {
                _ = try await client.call(DeleteUser(userId: "u1"), key: bad, timeout: .seconds(30))
                Issue.record("expected .invalidCall for a \(bad.utf8.count)-byte key")
            } catch let error as RPCClientError {
                guard case .invalidCall(let method, let reason) = error else {
                    Issue.record("expected .invalidCall, got \(error)")
                    continue
                }
                #expect(method == DeleteUser.method && reason.contains("1 to 128 UTF-8 bytes"), "\(reason)")
            }
        }
        #expect(try await offPool { peer.received(within: 0.2) } == "")
        let longest = String(repeating: "k", count: 128)
        let call = spawn { try await client.call(DeleteUser(userId: "u1"), key: longest, timeout: .seconds(30)) }
        let line = try await offPool { try peer.readLine() }
        #expect(try Self.request(line).key == longest)
        try peer.send(#"{"id":"\#(try Self.request(line).id)","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        _ = try await call.value
    }

    @Test("the daemon takes keyed mutations: every user and building mutation with a key succeeds")
    func daemonTakesKeys() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            _ = try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"))
            _ = try await client.call(UpdateUser(userId: "u1", newName: "Ada L"), key: "update-1")
            _ = try await client.call(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]))
            _ = try await client.call(UpdateBuilding(buildingId: "b1", newName: "Hall B"))
            #expect(try await client.call(DeleteBuilding(buildingId: "b1")) == Deleted(deleted: "b1"))
            #expect(try await client.call(DeleteUser(userId: "u1")) == Deleted(deleted: "u1"))
            #expect(try await client.call(ListUsers()).isEmpty)
        }
    }

    @Test(
        "the same caller key twice: applied once, both calls get the first result; another param is keyReused")
    func sameKeyTwice() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let ada = User(id: "u1", name: "Ada", email: "a@x")
            #expect(try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), key: "order-42") == ada)
            #expect(try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), key: "order-42") == ada)
            // Another client (another connection), same key: the same first outcome.
            let other = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { other.close() }
            #expect(try await other.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), key: "order-42") == ada)
            try await expectServerError(.keyReused, CreateUser.method) {
                try await client.call(CreateUser(id: "u2", name: "Bo", email: "b@x"), key: "order-42")
            }
            #expect(try await client.call(ListUsers()) == [ada])
        }
    }
}
