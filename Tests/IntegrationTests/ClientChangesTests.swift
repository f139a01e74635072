import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// `RPCClient.changes(from:)` against the real daemon's change feed: typed changes, their
/// acknowledgements in `system.stats`, and a Swift mirror rebuilt through a snapshot.
@Suite("RPCClient.changes against rpcd", .serialized, .ownExecutor)
struct ClientChangesTests {
    @Test("every mutation kind comes typed, in order, with its sequence and key; failed mutations do not; acks show in system.stats")
    func typedChanges() async throws {
        try await withDaemonAsync { daemon in
            let writer = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { writer.close() }
            _ = try await writer.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"), key: "k-u1")
            _ = try await writer.call(CreateUser(id: "u2", name: "Bob", email: "bob@example.com"))
            await #expect(throws: RPCClientError.self) { try await writer.call(CreateUser(id: "u1", name: "Dup", email: "d@example.com")) }
            _ = try await writer.call(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]))
            _ = try await writer.call(UpdateUser(userId: "u1", newName: "Ada L"))
            _ = try await writer.call(UpdateBuilding(buildingId: "b1", newResidents: ["u1", "u2"]))
            _ = try await writer.call(DeleteBuilding(buildingId: "b1"))
            _ = try await writer.call(DeleteUser(userId: "u2"))
            let want: [RPCChange] = [
                RPCChange(CreateUser(id: "u1", name: "Ada", email: "ada@example.com")),
                RPCChange(CreateUser(id: "u2", name: "Bob", email: "bob@example.com")),
                RPCChange(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"])),
                RPCChange(UpdateUser(userId: "u1", newName: "Ada L")),
                RPCChange(UpdateBuilding(buildingId: "b1", newResidents: ["u1", "u2"])),
                RPCChange(DeleteBuilding(buildingId: "b1")),
                RPCChange(DeleteUser(userId: "u2")),
            ]

            let feed = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            var events: [RPCChangeEvent] = []
            for try await event in feed.changes(from: 0) {
                events.append(event)
                guard events.count == want.count else { continue }
                // Changes 1 to 6 are acknowledged (each when the loop asked for the next one).
                let acked = try await eventually { try await Self.subscribers(writer).first?.ackedSequence == want.count - 1 }
                let stats = try await Self.subscribers(writer)
                #expect(acked, "stats: \(stats)")
                break
            }
            #expect(events.map(\.change) == want)
            #expect(events.map(\.sequence) == Array(1...want.count))
            // Each with its idempotency key: the one given, else the client's own.
            #expect(events.first?.key == "k-u1" && events.allSatisfy { $0.key != nil })
            #expect(events.allSatisfy { !$0.isSnapshotRecord })
            // Ending the loop closed the feed's client: the daemon drops the subscriber.
            #expect(try await eventually { try await Self.subscribers(writer).isEmpty })

            // Without fromSequence: only what comes after subscribing.
            let live = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            let next = spawn { () -> RPCChangeEvent? in
                for try await event in live.changes() { return event }
                return nil
            }
            #expect(try await eventually { try await Self.subscribers(writer).count == 1 })
            _ = try await writer.call(CreateUser(id: "u3", name: "Cy", email: "cy@example.com"))
            let event = try await next.value
            #expect(event?.sequence == 8 && event?.change == RPCChange(CreateUser(id: "u3", name: "Cy", email: "cy@example.com")))
        }
    }

    @Test("after compaction: snapshotRequired without a snapshot; with one, a Swift mirror equals the daemon's lists")
    func mirrorThroughSnapshot() async throws {
        let daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"])
        defer { daemon.stop() }
        let writer = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
        defer { writer.close() }
        for i in 0..<400 {
            _ = try await writer.call(CreateUser(id: "u\(i)", name: "User \(i)", email: "u\(i)@example.com"))
            if i % 40 == 39 { _ = try await writer.call(AddBuilding(id: "b\(i)", name: "B", address: "\(i) Main St", residents: ["u\(i)", "u\(i - 1)"])) }
        }
        #expect(daemon.stderrEventually(contains: "compacted", timeout: 10), "no compaction: \(daemon.stderrTail())")
        // The tail after the snapshot: updates and deletes too.
        _ = try await writer.call(UpdateUser(userId: "u5", newEmail: "five@example.org"))
        _ = try await writer.call(DeleteUser(userId: "u39"))
        _ = try await writer.call(UpdateBuilding(buildingId: "b79", newName: "Tower"))
        _ = try await writer.call(DeleteBuilding(buildingId: "b119"))
        let last = try await writer.call(SystemStats()).replication?.sequence ?? -1

        let refused = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
        let error = await #expect(throws: RPCClientError.self) {
            for try await _ in refused.changes(from: 0) {}
        }
        #expect(error?.code == .snapshotRequired)

        let feed = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
        var mirror = LaneModel(prefix: "", seed: 0)
        var markers: [RPCChange] = []
        var keys: [RPCChangeEvent] = []
        for try await event in feed.changes(from: 0, snapshot: true) {
            if let op = ChaosOp(event.change) {
                mirror.apply(op)
            } else if event.change.snapshotKey != nil {
                keys.append(event)  // every call of the writer carried its client's key
            } else {
                markers.append(event.change)
            }
            if !event.isSnapshotRecord && event.sequence == last { break }
        }
        guard markers.count == 2, let begin = markers[0].snapshotBegin, let ended = markers[1].snapshotEnd?.sequence else {
            Issue.record("not one snapshot's markers: \(markers)")
            return
        }
        let begun = begin.sequence
        #expect(begun == ended && begun < last && begin.records > 100, "\(markers)")
        #expect(!keys.isEmpty && keys.allSatisfy { $0.isSnapshotRecord && $0.sequence == begun })
        var users: [User] = []
        for try await page in writer.pages(ListUsers(limit: 100)) { users += page.users }
        var buildings: [Building] = []
        for try await page in writer.pages(ListBuildings(limit: 100)) { buildings += page.buildings }
        #expect(users.count == 399 && mirror.users.values.sorted { $0.id < $1.id } == users)
        #expect(mirror.buildings.values.sorted { $0.id < $1.id } == buildings)
    }

    private static func subscribers(_ client: RPCClient) async throws -> [SubscriberStats] {
        try await client.call(SystemStats()).replication?.subscribers ?? []
    }

    /// Whether `condition` holds within `seconds` (tried every 20 ms).
    private func eventually(within seconds: Double = 5, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return try await condition()
    }
}

extension ChaosOp {
    /// The mutation a feed's change is (nil for a snapshot's markers and unknown methods), so a
    /// `LaneModel` applies the daemon's rules to it: a peer's mirror, in small.
    init?(_ change: RPCChange) {
        if let call = change.as(CreateUser.self) {
            self = .createUser(call)
        } else if let call = change.as(UpdateUser.self) {
            self = .updateUser(call)
        } else if let call = change.as(DeleteUser.self) {
            self = .deleteUser(call)
        } else if let call = change.as(AddBuilding.self) {
            self = .addBuilding(call)
        } else if let call = change.as(UpdateBuilding.self) {
            self = .updateBuilding(call)
        } else if let call = change.as(DeleteBuilding.self) {
            self = .deleteBuilding(call)
        } else {
            return nil
        }
    }
}
