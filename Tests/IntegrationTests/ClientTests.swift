import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// The typed client against the real daemon.
@Suite("RPCClient against rpcd", .serialized, .ownExecutor)
struct ClientTests {
    @Test("every user and building method through the typed client, with its rules")
    func everyMethod() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let ada = User(id: "u1", name: "Ada", email: "ada@example.com")
            #expect(try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com")) == ada)
            _ = try await client.call(CreateUser(id: "u2", name: "Bob", email: "bob@example.com"))
            _ = try await client.call(CreateUser(id: "u3", name: "Cy", email: "cy@example.com"))
            #expect(try await client.call(GetUser(userId: "u1")) == ada)
            let renamed = try await client.call(UpdateUser(userId: "u1", newName: "Ada L", newEmail: "al@example.org"))
            #expect(renamed == User(id: "u1", name: "Ada L", email: "al@example.org"))
            #expect(try await client.call(ListUsers()).map(\.id) == ["u1", "u2", "u3"])
            #expect(try await client.call(ListUsers(after: "u1", limit: 1)).map(\.id) == ["u2"])

            let hall = Building(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1", "u2"])
            #expect(try await client.call(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1", "u2"])) == hall)
            _ = try await client.call(AddBuilding(id: "b2", name: "Annex", address: "2 Main St"))
            #expect(try await client.call(GetBuilding(buildingId: "b1")) == hall)
            let moved = try await client.call(UpdateBuilding(buildingId: "b2", newName: "Annex B", newResidents: ["u3"]))
            #expect(moved == Building(id: "b2", name: "Annex B", address: "2 Main St", residents: ["u3"]))
            #expect(try await client.call(ListBuildings()).map(\.id) == ["b1", "b2"])
            #expect(try await client.call(ListBuildings(limit: 1)).map(\.id) == ["b1"])

            // Deleting a user removes it from every building's residents.
            #expect(try await client.call(DeleteUser(userId: "u2")) == Deleted(deleted: "u2"))
            #expect(try await client.call(GetBuilding(buildingId: "b1")).residents == ["u1"])
            #expect(try await client.call(DeleteBuilding(buildingId: "b2")) == Deleted(deleted: "b2"))
            #expect(try await client.call(ListBuildings()).map(\.id) == ["b1"])

            // Rules come back as typed errors with code, message, method and id.
            try await expectServerError(.conflict, CreateUser.method) {
                try await client.call(CreateUser(id: "u1", name: "Dup", email: "d@example.com"))
            }
            try await expectServerError(.notFound, GetUser.method) { try await client.call(GetUser(userId: "u2")) }
            try await expectServerError(.invalidParams, UpdateUser.method) {
                try await client.call(UpdateUser(userId: "u1", newEmail: "no-at-sign"))
            }
            try await expectServerError(.invalidParams, AddBuilding.method) {
                try await client.call(AddBuilding(id: "b3", name: "X", address: "Y", residents: ["ghost"]))
            }
            try await expectServerError(.notFound, DeleteBuilding.method) { try await client.call(DeleteBuilding(buildingId: "b9")) }
            try await expectServerError(.invalidParams, ListUsers.method) { try await client.call(ListUsers(limit: 0)) }
        }
    }

    @Test("10,000 calls pipelined on one connection complete with correct results")
    func pipelined() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let count = 10_000
            let started = Date()
            // Every call is in flight at once, from many tasks, on one connection.
            let created = try await withThrowingTaskGroup(of: Bool.self) { group in
                for i in 0..<count {
                    group.addTask {
                        let id = String(format: "u%05d", i)
                        let user = try await client.call(CreateUser(id: id, name: "N\(i)", email: "\(i)@example.com"), timeout: .seconds(60))
                        return user == User(id: id, name: "N\(i)", email: "\(i)@example.com")
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(created == count)
            // And 10,000 reads in one batch (one write), answered in order.
            let reads = (0..<count).map { GetUser(userId: String(format: "u%05d", $0)) }
            let results = await client.batch(reads, timeout: .seconds(60))
            let names = results.compactMap { try? $0.get().name }
            #expect(names == (0..<count).map { "N\($0)" })
            #expect(try await client.call(ListUsers()).count == count)
            print("20,000 pipelined calls in \(String(format: "%.2f", Date().timeIntervalSince(started))) s")
        }
    }

    @Test("a batch of mixed successes and failures: one result each, in order")
    func mixedBatch() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let (created, duplicate, missing, building, list) = await client.batch(
                CreateUser(id: "u1", name: "Ada", email: "ada@example.com"),
                CreateUser(id: "u1", name: "Ada again", email: "ada@example.com"),
                GetUser(userId: "nobody"),
                AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]),
                ListUsers())
            #expect(try created.get() == User(id: "u1", name: "Ada", email: "ada@example.com"))
            #expect(failureCode(duplicate) == .conflict)
            #expect(failureCode(missing) == .notFound)
            #expect(try building.get().residents == ["u1"])
            #expect(try list.get().map(\.id) == ["u1"])
            if case .failure(let error) = missing {
                #expect(error.method == GetUser.method)
                #expect(error.id != nil && error.id != "")
                #expect(error.errorMessage.contains("nobody"))
            }
            // Homogeneous batch: same type, mixed outcomes.
            let gets = await client.batch([GetUser(userId: "u1"), GetUser(userId: "u9"), GetUser(userId: "u1")])
            #expect(gets.map { failureCode($0) } == [nil, .notFound, nil])
        }
    }

    @Test("a daemon killed mid-flight: the call fails fast with .outcomeUnknown; later calls fail at once with .notSent")
    func killedMidFlight() async throws {
        let daemon = try DaemonProcess()
        defer { daemon.stop() }
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
        defer { client.close() }
        _ = try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
        try daemon.pause()  // the call below is surely in flight when the daemon dies
        let started = Date()
        let inFlight = spawn { try await client.call(GetUser(userId: "u1"), timeout: .seconds(60)) }
        try await daemon.waitForUnreadRequest()
        daemon.kill()
        let result = await inFlight.result
        let elapsed = Date().timeIntervalSince(started)
        guard case .failure(let error as RPCClientError) = result, case .outcomeUnknown(_, _, _, let key, _) = error else {
            Issue.record("expected .outcomeUnknown, got \(result)")
            return
        }
        #expect(error.method == GetUser.method)
        #expect(key == nil)  // a read carries no key
        #expect(elapsed < 5, "took \(elapsed) s to fail")
        let after = Date()
        do {
            _ = try await client.call(ListUsers())
            Issue.record("expected .notSent")
        } catch let error as RPCClientError {
            guard case .notSent = error else {
                Issue.record("expected .notSent, got \(error)")
                return
            }
        }
        #expect(Date().timeIntervalSince(after) < 1)
    }

    @Test("timeout: a server that accepts and never answers")
    func timeout() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let started = Date()
        do {
            _ = try await client.call(GetUser(userId: "u1"), timeout: .milliseconds(300))
            Issue.record("expected a timeout")
        } catch let error as RPCClientError {
            guard case .timedOut(let method, let id, _) = error else {
                Issue.record("expected .timedOut, got \(error)")
                return
            }
            #expect(method == GetUser.method && id == "1")
        }
        let elapsed = Date().timeIntervalSince(started)
        #expect(elapsed >= 0.25 && elapsed < 3, "timed out after \(elapsed) s")
        // The request did go out, in canonical form.
        #expect(try await offPool { try peer.readLine() } == #"{"id":"1","method":"user.getUser","param":{"userId":"u1"}}"#)
    }

    @Test("a reply after its call timed out reaches the handlers; later calls still work")
    func lateReply() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let late = Locked<[Request]>([])
            client.handlers.onAnyOther { message in late.withLock { $0.append(message) } }
            try daemon.pause()
            await #expect(throws: RPCClientError.self) { try await client.call(ListUsers(), timeout: .milliseconds(200)) }
            daemon.signal(SIGCONT)
            #expect(try await client.call(ListUsers()).isEmpty)
            try await Task.sleep(for: .milliseconds(200))
            #expect(late.current.map(\.method) == [RPCMethod("user", "listUsersResult")])
        }
    }

    @Test("requests the server sends reach the handlers; unhandled ones are dropped and nothing is ever answered")
    func serverRequests() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let seen = Locked<[String]>([])
        client.handlers.on(RPCMethod("peer", "ping")) { request in seen.withLock { $0.append("ping \(request.id)") } }
        client.handlers.on(GetUser.self) { call, id in seen.withLock { $0.append("getUser \(call.userId) \(id)") } }
        client.handlers.on(RPCMethod("peer", "pingResult")) { request in seen.withLock { $0.append("pingResult \(request.id)") } }
        try peer.send(#"{"id":"s1","method":"peer.ping","param":{}}"# + "\n")
        try peer.send(#"{"id":"s2","method":"user.getUser","param":{"userId":"u7"}}"# + "\n")
        try peer.send(#"{"id":"s3","method":"peer.pingResult","param":{"ok":true}}"# + "\n")
        try peer.send(#"{"id":"s4","method":"peer.unhandled","param":{}}"# + "\n")
        try peer.send(#"{"id":"s5","method":"error.error","param":{"errorMessage":"x","code":"internal"}}"# + "\n")
        try peer.send("not json\n")
        // A call after them still works on the same connection.
        let call = spawn { try await client.call(GetUser(userId: "u1"), timeout: .seconds(5)) }
        let line = try await offPool { try peer.readLine() }
        #expect(line == #"{"id":"1","method":"user.getUser","param":{"userId":"u1"}}"#)
        try peer.send(#"{"id":"1","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@b"}}"# + "\n")
        #expect(try await call.value == User(id: "u1", name: "Ada", email: "a@b"))
        // Nothing else was ever written to the server: no answers, not even errors.
        #expect(try await offPool { peer.received(within: 0.3) } == "")
        #expect(seen.current == ["ping s1", "getUser u7 s2", "pingResult s3"])
    }

    @Test("reconnect with backoff: a later call reconnects to a restarted daemon; without a policy it fails")
    func reconnect() async throws {
        let first = try DaemonProcess()
        let port = first.port
        let policy = ReconnectPolicy(maxAttempts: 20, initialDelay: .milliseconds(50), maxDelay: .milliseconds(200))
        let client = try await RPCClient.connect(host: "127.0.0.1", port: port, options: RPCClientOptions(reconnect: policy))
        defer { client.close() }
        let plain = try await RPCClient.connect(host: "127.0.0.1", port: port)
        defer { plain.close() }
        _ = try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
        first.stop()
        try await Task.sleep(for: .milliseconds(100))
        await #expect(throws: RPCClientError.self) { try await plain.call(ListUsers()) }
        let second = try DaemonProcess(listen: ["127.0.0.1:\(port)"])
        defer { second.stop() }
        // A fresh daemon (fresh data dir): the reconnected client sees its empty state.
        #expect(try await client.call(ListUsers(), timeout: .seconds(10)).isEmpty)
        #expect(try await client.call(CreateUser(id: "u2", name: "Bo", email: "bo@example.com")).id == "u2")
        await #expect(throws: RPCClientError.self) { try await plain.call(ListUsers()) }
    }

    @Test("reconnect gives up after its tries with .notSent, well within the call's timeout")
    func reconnectGivesUp() async throws {
        let daemon = try DaemonProcess()
        let policy = ReconnectPolicy(maxAttempts: 3, initialDelay: .milliseconds(20), maxDelay: .milliseconds(40))
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: RPCClientOptions(reconnect: policy))
        defer { client.close() }
        daemon.stop()
        let hold = try PortHold(port: daemon.port)
        defer { withExtendedLifetime(hold) {} }
        try await Task.sleep(for: .milliseconds(100))
        let started = Date()
        do {
            _ = try await client.call(ListUsers(), timeout: .seconds(30))
            Issue.record("expected a failure")
        } catch let error as RPCClientError {
            guard case .notSent(_, _, _, let reason) = error else {
                Issue.record("expected .notSent, got \(error)")
                return
            }
            #expect(reason.hasPrefix("could not reconnect: ") && reason.hasSuffix("(after 3 tries)"), "\(reason)")
        }
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test("connect to a port nobody listens on fails with .connectFailed")
    func refused() async throws {
        let peer = try FakePeer()
        let port = peer.port
        _ = consume peer  // closes the listener: the port refuses
        await #expect(throws: RPCClientError.self) { try await RPCClient.connect(host: "127.0.0.1", port: port) }
    }

    @Test("close() fails the calls in flight at once")
    func closeFailsPending() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        try await offPool { try peer.accept() }
        let call = spawn { try await client.call(ListUsers(), timeout: .seconds(60)) }
        _ = try await offPool { try peer.readLine() }
        client.close()
        let result = await call.result
        guard case .failure(let error as RPCClientError) = result, case .connectionClosed = error else {
            Issue.record("expected .connectionClosed, got \(result)")
            return
        }
    }

    @Test("a custom id generator names the requests on the wire, a custom key generator keys the mutations")
    func customIDs() async throws {
        let peer = try FakePeer()
        let options = RPCClientOptions(idGenerator: .sequential(startingAt: 100, prefix: "app-"), keyGenerator: RPCKeyGenerator { "k-1" })
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: options)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let call = spawn { try await client.call(DeleteUser(userId: "u1"), timeout: .seconds(5)) }
        #expect(try await offPool { try peer.readLine() } == #"{"id":"app-100","method":"user.deleteUser","param":{"userId":"u1"},"key":"k-1"}"#)
        try peer.send(#"{"id":"app-100","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        #expect(try await call.value == Deleted(deleted: "u1"))
    }
}

func failureCode<T>(_ result: Result<T, RPCClientError>) -> RPCErrorCode? {
    if case .failure(let error) = result { return error.code ?? RPCErrorCode("client: \(error)") }
    return nil
}

func expectServerError<T>(
    _ code: RPCErrorCode, _ method: RPCMethod, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> T
) async throws {
    do {
        let value = try await body()
        Issue.record("expected \(code) from \(method), got \(value)", sourceLocation: sourceLocation)
    } catch let error as RPCClientError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        #expect(error.method == method, sourceLocation: sourceLocation)
        #expect(!(error.id ?? "").isEmpty, sourceLocation: sourceLocation)
    }
}
