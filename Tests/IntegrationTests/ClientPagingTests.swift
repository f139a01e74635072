import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// Typed pages of a list, and a call without a timeout (issue 13).
@Suite("RPCClient pages and timeouts", .ownExecutor)
struct ClientPagingTests {
    @Test("250 users in pages of 100: 3 pages, 100, 100, 50; only the last has no next")
    func pagesOfUsers() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            let ids = (0..<250).map { String(format: "u%03d", $0) }
            let created = await client.batch(ids.map { CreateUser(id: $0, name: "N", email: "n@x") })
            #expect(created.allSatisfy { (try? $0.get()) != nil })

            var pages: [UserPage] = []
            for try await page in client.pages(ListUsers(limit: 100)) { pages.append(page) }
            #expect(pages.map(\.users.count) == [100, 100, 50])
            #expect(pages.map(\.next) == ["u099", "u199", nil])
            #expect(pages.flatMap(\.users).map(\.id) == ids)

            // One page, with its next; the plain call still gives the users alone.
            let first = try await client.page(ListUsers(limit: 100))
            #expect(first.users.count == 100 && first.next == "u099")
            let last = try await client.page(ListUsers(after: "u199", limit: 100), timeout: .seconds(5))
            #expect(last.users.count == 50 && last.next == nil)
            let users: [User] = try await client.call(ListUsers(limit: 100))
            #expect(users == first.users)

            // From an `after`, with no limit: one page holding the rest.
            var rest: [UserPage] = []
            for try await page in client.pages(ListUsers(after: "u239")) { rest.append(page) }
            #expect(rest.map(\.users.count) == [10] && rest[0].next == nil)
        }
    }

    @Test("buildings page the same way; an empty list is one empty page; an error ends the pages")
    func pagesOfBuildingsAndEdges() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            var empty: [BuildingPage] = []
            for try await page in client.pages(ListBuildings(limit: 2)) { empty.append(page) }
            #expect(empty == [BuildingPage(buildings: [], next: nil)])

            for id in ["b1", "b2", "b3"] { _ = try await client.call(AddBuilding(id: id, name: "H", address: "A")) }
            var pages: [BuildingPage] = []
            for try await page in client.pages(ListBuildings(limit: 2), timeout: .none) { pages.append(page) }
            #expect(pages.map { $0.buildings.map(\.id) } == [["b1", "b2"], ["b3"]])

            var iterator = client.pages(ListUsers(limit: 0)).makeAsyncIterator()
            await #expect(throws: RPCClientError.self) { try await iterator.next() }
            #expect(try await iterator.next() == nil)
        }
    }

    @Test("timeout: .none waits past the default timeout; .default and a Duration do not")
    func noTimeout() async throws {
        let peer = try FakePeer()
        let options = RPCClientOptions(defaultTimeout: .milliseconds(300))
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: options)
        defer { client.close() }
        try await offPool { try peer.accept() }

        let started = Date()
        await #expect(throws: RPCClientError.timedOut(method: GetUser.method, id: "1", after: .milliseconds(300))) {
            try await client.call(GetUser(userId: "u1"))
        }
        await #expect(throws: RPCClientError.timedOut(method: GetUser.method, id: "2", after: .milliseconds(100))) {
            try await client.call(GetUser(userId: "u1"), timeout: .milliseconds(100))
        }
        let patient = spawn { try await client.call(GetUser(userId: "u1"), timeout: .none) }
        let lines = try await offPool { try (0..<3).map { _ in try peer.readLine() } }
        #expect(lines.last == #"{"id":"3","method":"user.getUser","param":{"userId":"u1"}}"#)
        try await Task.sleep(for: .milliseconds(700))  // well past the default timeout
        try peer.send(#"{"id":"3","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"# + "\n")
        #expect(try await patient.value.name == "Ada")
        #expect(Date().timeIntervalSince(started) >= 0.7)

        // Through the test double too: the timeout reaches `perform` as given.
        let seen = Locked<[CallTimeout]>([])
        let service = RPCService { call, timeout in
            seen.withLock { $0.append(timeout) }
            return User(id: "u1", name: "Ada", email: "a@x")
        }
        _ = try await service.call(GetUser(userId: "u1"), timeout: .none)
        _ = try await service.call(GetUser(userId: "u1"))
        _ = try await service.call(GetUser(userId: "u1"), timeout: .seconds(2))
        #expect(seen.current == [.none, .default, .after(.seconds(2))])
    }
}
