import Foundation
@testable import RPCClient
import RPCSchema
import TestSupport
import Testing

/// `RPCClient.changes(from:)` against a leader played by hand (`FakeLeader`): golden lines in,
/// typed changes out, acknowledgements and subscribe lines checked byte for byte.
@Suite("RPCClient.changes against a fake leader", .serialized, .ownExecutor)
struct ChangeFeedTests {
    /// The feed as rpcd writes it: journal lines verbatim, `seq` and `crc` included.
    static let feed = [
        #"{"id":"r42","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"},"key":"k1","seq":42,"crc":"0badf00d"}"#,
        #"{"id":"r43","method":"user.updateUser","param":{"userId":"u1","newName":"Ada L"},"seq":43,"crc":"0badf00d"}"#,
        #"{"id":"r44","method":"building.addBuilding","param":{"id":"b1","name":"Hall","address":"1 Main St","residents":["u1"]},"seq":44,"crc":"0badf00d"}"#,
        #"{"id":"r45","method":"building.updateBuilding","param":{"buildingId":"b1","newResidents":[]},"seq":45,"crc":"0badf00d"}"#,
        #"{"id":"r46","method":"building.deleteBuilding","param":{"buildingId":"b1"},"seq":46,"crc":"0badf00d"}"#,
        #"{"id":"r47","method":"user.deleteUser","param":{"userId":"u1"},"seq":47,"crc":"0badf00d"}"#,
        #"{"id":"r48","method":"team.addTeam","param":{"id":"t1"},"seq":48,"crc":"0badf00d"}"#,
    ]

    @Test("typed changes in journal order with sequence and key; each acknowledged once the loop asks for the next; break closes")
    func typedChanges() async throws {
        let (leader, client, leaderSide) = try await Self.start { try $0.subscribe(sequence: 50, then: Self.feed) }
        var events: [RPCChangeEvent] = []
        for try await event in client.changes(from: 41) {
            events.append(event)
            if events.count == 1 {
                try await Task.sleep(for: .milliseconds(200))
                #expect(leader.received.count == 1, "r42 is acknowledged only after its loop body: \(leader.received)")
            }
            if events.count == Self.feed.count { break }
        }
        #expect(try await leaderSide.value == #"{"id":"1","method":"replication.subscribe","param":{"fromSequence":41}}"#)
        let other = Request(id: "r48", method: RPCMethod("team", "addTeam"), param: .object(JSONObject([("id", .string("t1"))])))
        #expect(events == [
            RPCChangeEvent(sequence: 42, change: RPCChange(CreateUser(id: "u1", name: "Ada", email: "ada@example.com")), key: "k1"),
            RPCChangeEvent(sequence: 43, change: RPCChange(UpdateUser(userId: "u1", newName: "Ada L"))),
            RPCChangeEvent(sequence: 44, change: RPCChange(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]))),
            RPCChangeEvent(sequence: 45, change: RPCChange(UpdateBuilding(buildingId: "b1", newResidents: []))),
            RPCChangeEvent(sequence: 46, change: RPCChange(DeleteBuilding(buildingId: "b1"))),
            RPCChangeEvent(sequence: 47, change: RPCChange(DeleteUser(userId: "u1"))),
            RPCChangeEvent(sequence: 48, change: RPCChange(method: other.method, param: other.param ?? .null)),
        ])
        // Ending the loop closed the client, after the acknowledgements it had sent: r48's body
        // ended the loop, so r48 is not acknowledged.
        #expect(try await offPool { leader.closedByClient() })
        #expect(Array(leader.received.dropFirst()) == [
            #"{"id":"r42","method":"user.createUserResult","param":{}}"#,
            #"{"id":"r43","method":"user.updateUserResult","param":{}}"#,
            #"{"id":"r44","method":"building.addBuildingResult","param":{}}"#,
            #"{"id":"r45","method":"building.updateBuildingResult","param":{}}"#,
            #"{"id":"r46","method":"building.deleteBuildingResult","param":{}}"#,
            #"{"id":"r47","method":"user.deleteUserResult","param":{}}"#,
        ])
    }

    @Test("a snapshot: its markers and records carry its sequence and are never acknowledged; the tail is")
    func snapshot() async throws {
        let (leader, client, leaderSide) = try await Self.start {
            try $0.subscribe(sequence: 12, snapshotSequence: 10, then: [
                #"{"id":"snapshot","method":"replication.snapshotBegin","param":{"sequence":10,"records":3}}"#,
                #"{"id":"s","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"},"crc":"0badf00d"}"#,
                #"{"id":"s","method":"replication.key","param":{"key":"k1","digest":"00ff","seq":1,"reply":{"id":"u1"}}}"#,
                #"{"id":"s","method":"building.addBuilding","param":{"id":"b1","name":"Hall","address":"1 Main St","residents":["u1"]},"crc":"0badf00d"}"#,
                #"{"id":"snapshot","method":"replication.snapshotEnd","param":{"sequence":10}}"#,
                #"{"id":"r11","method":"user.updateUser","param":{"userId":"u1","newEmail":"al@example.org"},"seq":11,"crc":"0badf00d"}"#,
                #"{"id":"r12","method":"building.deleteBuilding","param":{"buildingId":"b1"},"seq":12,"crc":"0badf00d"}"#,
            ])
        }
        var events: [RPCChangeEvent] = []
        for try await event in client.changes(from: 0, snapshot: true) {
            events.append(event)
            if events.count == 7 { break }
        }
        #expect(try await leaderSide.value == #"{"id":"1","method":"replication.subscribe","param":{"fromSequence":0,"snapshot":true}}"#)
        #expect(events == [
            RPCChangeEvent(sequence: 10, change: RPCChange(method: SnapshotBegin.method, param: ["sequence": 10, "records": 3])),
            RPCChangeEvent(sequence: 10, change: RPCChange(CreateUser(id: "u1", name: "Ada", email: "ada@example.com")), isSnapshotRecord: true),
            RPCChangeEvent(
                sequence: 10, change: RPCChange(method: SnapshotKey.method, param: ["key": "k1", "digest": "00ff", "seq": 1, "reply": ["id": "u1"]]),
                isSnapshotRecord: true),
            RPCChangeEvent(
                sequence: 10, change: RPCChange(AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"])), isSnapshotRecord: true),
            RPCChangeEvent(sequence: 10, change: RPCChange(method: SnapshotEnd.method, param: ["sequence": 10])),
            RPCChangeEvent(sequence: 11, change: RPCChange(UpdateUser(userId: "u1", newEmail: "al@example.org"))),
            RPCChangeEvent(sequence: 12, change: RPCChange(DeleteBuilding(buildingId: "b1"))),
        ])
        #expect(try await offPool { leader.closedByClient() })
        #expect(Array(leader.received.dropFirst()) == [#"{"id":"r11","method":"user.updateUserResult","param":{}}"#])
    }

    @Test("snapshotRequired is thrown as .server; the client stays usable and can subscribe again")
    func refused() async throws {
        let (leader, client, refusal) = try await Self.start { leader in
            try leader.accept()
            let subscribe = try leader.lines(1)[0]
            try leader.send(
                #"{"id":"\#(Self.id(of: subscribe))","method":"error.error","param":{"errorMessage":"sequence 3 is compacted; subscribe with snapshot:true","code":"snapshotRequired"}}"#
                    + "\n")
        }
        await #expect(
            throws: RPCClientError.server(
                code: .snapshotRequired, errorMessage: "sequence 3 is compacted; subscribe with snapshot:true", method: ReplicationSubscribe.method, id: "1")
        ) {
            for try await _ in client.changes(from: 3) { Issue.record("no change expected") }
        }
        try await refusal.value
        // The client still calls, and subscribes again (this time with a snapshot).
        let answer = spawn {
            try await offPool {
                try leader.answer(try leader.lines(2)[1], #""method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@b.c"}"#)
                _ = try leader.subscribe(sequence: 3, then: [Self.feed[0]], line: 3)
            }
        }
        #expect(try await client.call(GetUser(userId: "u1")) == User(id: "u1", name: "Ada", email: "a@b.c"))
        for try await event in client.changes(from: 3, snapshot: true) {
            #expect(event.sequence == 42)
            break
        }
        try await answer.value
    }

    @Test("connection lost: the changes already read are yielded, then .connectionClosed; the client is not closed")
    func lost() async throws {
        let (_, client, leaderSide) = try await Self.start { leader in
            _ = try leader.subscribe(sequence: 50, then: Array(Self.feed[0...2]))
            leader.hangUp()
        }
        var sequences: [Int] = []
        do {
            for try await event in client.changes(from: 41) {
                sequences.append(event.sequence)
                if sequences.count == 1 { try await Task.sleep(for: .milliseconds(100)) }  // the loss is known by now
            }
            Issue.record("the loop ended without an error")
        } catch let error as RPCClientError {
            guard case .connectionClosed(_, nil, nil, let reason) = error else { throw error }
            #expect(reason.hasPrefix("the change feed's connection was lost"))
        }
        #expect(sequences == [42, 43, 44])
        try await leaderSide.value
        // Not closed, just not connected (a reconnect policy would connect again): .notSent.
        let error = await #expect(throws: RPCClientError.self) { try await client.call(GetUser(userId: "u1")) }
        #expect(error?.description.contains("was not sent") == true, "\(String(describing: error))")
    }

    @Test("cancelling the task while the loop waits throws .cancelled and closes the connection")
    func cancelled() async throws {
        let leader = try FakeLeader()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        let consumer = spawn {
            var seen = 0
            do {
                for try await _ in client.changes() { seen += 1 }
                return "ended without an error after \(seen)"
            } catch {
                return "\(seen) then \(error)"
            }
        }
        let subscribe = try await offPool {
            let subscribe = try leader.subscribe(sequence: 41, then: [Self.feed[0]])
            // The first change is acknowledged once the loop waits for the second.
            _ = try leader.line { $0.contains(#""r42""#) }
            return subscribe
        }
        #expect(subscribe == #"{"id":"1","method":"replication.subscribe","param":{}}"#)
        consumer.cancel()
        #expect(await consumer.value == "1 then replication.subscribe (id 1) was cancelled")
        #expect(try await offPool { leader.closedByClient() })
    }

    @Test("a full buffer stops reading: the leader's sends wait; every change still comes once, in order, acknowledged")
    func backpressure() async throws {
        let count = 20_000
        let (leader, client, sender) = try await Self.start { leader in
            // ~2 MB: the send waits while the client does not read.
            _ = try leader.subscribe(sequence: 0, then: (1...count).map { n in
                #"{"id":"r\#(n)","method":"user.createUser","param":{"id":"u\#(n)","name":"N","email":"n@example.com"},"seq":\#(n),"crc":"0badf00d"}"#
            })
        }
        let iterator = client.changes(from: 0, bufferLimit: 8).makeAsyncIterator()
        #expect(try await iterator.next()?.sequence == 1)
        try await Task.sleep(for: .milliseconds(300))
        // Without the pause, the client would have read all 2 MB (loopback buffers take it).
        // With it: the limit, plus what one read had brought already.
        let buffered = iterator.subscription.buffer.count
        #expect(buffered >= 7 && buffered < 1000, "buffered \(buffered)")
        for n in 2...count {
            let event = try await iterator.next()
            guard event?.sequence == n else {
                Issue.record("change \(n): \(String(describing: event))")
                break
            }
        }
        try await sender.value
        // Each change but the last is acknowledged, in order (the last one's body has not ended).
        let acks = try await offPool { try leader.lines(count) }.dropFirst()
        #expect(acks.count == count - 1)
        #expect(acks.enumerated().allSatisfy { $1 == #"{"id":"r\#($0 + 1)","method":"user.createUserResult","param":{}}"# })
    }

    @Test("the loop body may call the daemon while the buffer is full: the reply is read")
    func callFromLoopBody() async throws {
        let (_, client, leaderSide) = try await Self.start { leader in
            _ = try leader.subscribe(sequence: 0, then: (1...50).map { n in
                #"{"id":"r\#(n)","method":"user.deleteUser","param":{"userId":"u\#(n)"},"seq":\#(n),"crc":"0badf00d"}"#
            })
            try leader.answer(try leader.line { $0.contains("user.getUser") }, #""method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@b.c"}"#)
        }
        var seen = 0
        for try await event in client.changes(from: 0, bufferLimit: 2) {
            seen += 1
            if event.sequence == 1 {
                #expect(try await client.call(GetUser(userId: "u1"), timeout: .seconds(10)).name == "Ada")
            }
            if seen == 50 { break }
        }
        #expect(seen == 50)
        try await leaderSide.value
    }

    // MARK: - The queue and the parts, without sockets

    @Test("FeedQueue: pause at the limit, resume at half, failure after the buffered requests, cancel at once")
    func queue() {
        func request(_ n: Int) -> Request { Request(id: "r\(n)", method: DeleteUser.method, param: nil) }
        var queue = FeedQueue(limit: 4)
        #expect(queue.take() == .wait)
        #expect((1...3).map { queue.offer(request($0)) } == [.continue, .continue, .continue])
        #expect(queue.offer(request(4)) == .pause)
        #expect(queue.offer(request(5)) == .pause)  // lines of the read in progress still come
        #expect(queue.take() == .deliver(request(1), resume: false))
        #expect(queue.take() == .deliver(request(2), resume: false))
        #expect(queue.take() == .deliver(request(3), resume: true))  // 2 left of 4
        #expect(queue.take() == .deliver(request(4), resume: false))
        let lost = RPCClientError.connectionClosed(address: "a", method: nil, id: nil, reason: "lost")
        queue.fail(lost)
        #expect(queue.offer(request(6)) == .continue)  // after the end: dropped
        #expect(queue.take() == .deliver(request(5), resume: false))
        #expect(queue.take() == .fail(lost))
        #expect(queue.take() == .fail(lost))

        var cancelled = FeedQueue(limit: 4)
        _ = cancelled.offer(request(1))
        cancelled.cancel(.cancelled(method: ReplicationSubscribe.method, id: "1"))
        #expect(cancelled.take() == .fail(.cancelled(method: ReplicationSubscribe.method, id: "1")))
    }

    @Test("feed ids: r<seq> only")
    func feedIDs() {
        #expect(FeedSubscription.sequence(ofFeedID: "r42") == 42)
        for id in ["s", "snapshot", "r", "r0", "r-1", "r+4", "42", "R42", "r4x"] {
            #expect(FeedSubscription.sequence(ofFeedID: id) == nil, "\(id)")
        }
    }

    @Test("a known method whose param does not decode is kept as it came, and reads as no call")
    func undecodable() {
        let request = Request(id: "r1", method: CreateUser.method, param: .object(JSONObject([("id", .number(7))])))
        let change = RPCChange(request)
        #expect(change.method == CreateUser.method && change.param == request.param)
        #expect(change.as(CreateUser.self) == nil && change.as(DeleteUser.self) == nil && change.snapshotKey == nil)
    }

    // MARK: - The leader's side

    /// A fake leader, a client connected to it, and `script` playing the leader on a thread of its own.
    static func start<T: Sendable>(
        _ script: @escaping @Sendable (FakeLeader) throws -> T
    ) async throws -> (FakeLeader, RPCClient, Task<T, any Error>) {
        let leader = try FakeLeader()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        return (leader, client, spawn { try await offPool { try script(leader) } })
    }

    static func id(of line: String) -> String {
        let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        return object?["id"] as? String ?? "?"
    }
}

extension FakeLeader {
    /// Accepts the client (when its subscribe is its first line), waits for its `line`th line (a
    /// subscribe), answers it with `replication.subscribeResult`, then sends `feed`; returns the
    /// subscribe line.
    func subscribe(sequence: Int, snapshotSequence: Int = 0, then feed: [String], line: Int = 1) throws -> String {
        if line == 1 { try accept() }
        let subscribe = try lines(line)[line - 1]
        try answer(subscribe, #""method":"replication.subscribeResult","param":{"sequence":\#(sequence),"snapshotSequence":\#(snapshotSequence)}"#)
        try send(feed.map { $0 + "\n" }.joined())
        return subscribe
    }

    /// Answers the request `line` with `{"id":<its id>,` + `rest` + `}`.
    func answer(_ line: String, _ rest: String) throws {
        try send(#"{"id":"\#(ChangeFeedTests.id(of: line))","# + rest + "}\n")
    }
}
