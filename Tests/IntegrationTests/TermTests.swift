import Foundation
import Testing

/// Terms without a coordinator (issue 53): a promotion by hand starts a new term, so an old leader
/// pointed at the new one rewinds its records the new leader never had instead of diverging, and
/// two histories of which neither is newer are refused with a message that says what to do.
@Suite("terms: promotion starts a term, an old leader rewinds, equal terms are refused", .serialized)
struct TermTests {
    /// Files named `rewound-…` in `dir`.
    static func rewound(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []).filter { $0.hasPrefix("rewound-") }.sorted()
    }

    @Test("manual failover made safe: the old leader, pointed at the promoted follower, saves and cuts the records it alone had, and converges")
    func oldLeaderRewinds() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        var old = try Replicas.leader(dirs[0])
        var promoted = try Replicas.follower(of: old, dirs[1])
        try JournalSupport.createUsers(port: old.port, prefix: "both", range: 0..<10)
        try Replicas.waitForConvergence(leader: old, followers: [promoted])
        #expect(try Replicas.replication(old)["term"] == nil, "a daemon never promoted is in the implicit term 0")

        // The follower goes away; the old leader takes five writes it never sees, then stops.
        promoted.terminate()
        #expect(promoted.waitForExit(timeout: 10) == 0)
        try JournalSupport.createUsers(port: old.port, prefix: "lost", range: 0..<5)
        old.terminate()
        #expect(old.waitForExit(timeout: 10) == 0)

        // Promotion by hand: the follower's data directory served without --follow starts term 1.
        promoted = try Replicas.leader(dirs[1])
        defer { promoted.stop() }
        #expect(promoted.stderrEventually(contains: "term 1 (id "), "\(promoted.stderrTail())")
        #expect(try Replicas.replication(promoted)["term"] as? Int == 1)
        try JournalSupport.createUsers(port: promoted.port, prefix: "new", range: 0..<3)
        #expect(try Replicas.sequence(promoted) == 14, "10 records, the term's, 3 more")

        // The old leader, pointed at the new one, rewinds: records 11...15 were never taken there.
        old = try Replicas.follower(of: promoted, dirs[0])
        defer { old.stop() }
        #expect(old.stderrEventually(contains: "rewound:", timeout: 20), "\(old.stderrTail())")
        #expect(old.stderrText.contains("never had records 11...15"), "\(old.stderrTail())")
        #expect(old.stderrText.contains("cut 5 records"), "\(old.stderrTail())")
        try Replicas.waitForConvergence(leader: promoted, followers: [old], timeout: 20)
        try Replicas.expectSameLists(promoted, [old])
        let ids = try JournalSupport.userIDs(port: old.port)
        #expect(!ids.contains { $0.hasPrefix("lost") } && ids.contains("new2"), "\(ids)")
        #expect(try Replicas.replication(old)["term"] as? Int == 1)
        let (equal, sizes) = Replicas.journalsEqual(dirs[1], dirs[0])
        #expect(equal, "the rewound daemon's journal differs from its new leader's (\(sizes))")

        // The cut records are saved beside the journal, never just deleted.
        let saved = Self.rewound(dirs[0])
        #expect(saved.count == 1 && saved.first?.hasSuffix("-after-10.jsonl") == true, "\(saved)")
        if let name = saved.first {
            let text = try String(contentsOf: dirs[0].appendingPathComponent(name), encoding: .utf8)
            let lines = text.split(separator: "\n")
            #expect(lines.count == 5 && lines.allSatisfy { $0.contains("\"id\":\"lost") }, "\(text)")
            #expect(old.stderrText.contains(name), "the log names the file: \(old.stderrTail())")
        }
    }

    @Test("two daemons promoted by hand to the same term number: the one pointed at the other stops, keeps its records, and says what to do")
    func equalTermsRefused() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        var a = try Replicas.follower(of: leader, dirs[1])
        var b = try Replicas.follower(of: leader, dirs[2])
        try JournalSupport.createUsers(port: leader.port, prefix: "both", range: 0..<5)
        try Replicas.waitForConvergence(leader: leader, followers: [a, b])
        leader.stop()
        for daemon in [a, b] {
            daemon.terminate()
            #expect(daemon.waitForExit(timeout: 10) == 0)
        }
        a = try Replicas.leader(dirs[1])
        defer { a.stop() }
        b = try Replicas.leader(dirs[2])
        try JournalSupport.createUsers(port: a.port, prefix: "anna", range: 0..<2)
        try JournalSupport.createUsers(port: b.port, prefix: "bob", range: 0..<3)
        #expect(try Replicas.replication(a)["term"] as? Int == 1 && Replicas.replication(b)["term"] as? Int == 1)
        b.terminate()
        #expect(b.waitForExit(timeout: 10) == 0)
        b = try Replicas.follower(of: a, dirs[2])
        defer { b.stop() }
        #expect(b.stderrEventually(contains: "neither history is newer", timeout: 20), "\(b.stderrTail())")
        #expect(b.stderrText.contains("the leader's term 1 is not above this daemon's term 1"), "\(b.stderrTail())")
        let replication = try Replicas.replication(b)
        #expect(replication["state"] as? String == "stopped", "\(replication)")
        #expect(try JournalSupport.userIDs(port: b.port).filter { $0.hasPrefix("bob") }.count == 3, "it keeps its own records")
        #expect(Self.rewound(dirs[2]).isEmpty, "nothing is cut")
    }

    @Test("two daemons never promoted that began apart: the one pointed at the other stops and keeps its records (their origins differ); a follower started empty takes its leader's origin")
    func originsTellHistoriesApart() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let a = try Replicas.leader(dirs[0])
        defer { a.stop() }
        var b = try Replicas.leader(dirs[1])
        try JournalSupport.createUsers(port: a.port, prefix: "anna", range: 0..<3)
        try JournalSupport.createUsers(port: b.port, prefix: "bob", range: 0..<2)
        b.terminate()
        #expect(b.waitForExit(timeout: 10) == 0)
        // Both in term 0 with 2 or more records: without origins, b would take a's records from 3 on.
        b = try Replicas.follower(of: a, dirs[1])
        defer { b.stop() }
        #expect(b.stderrEventually(contains: "history began apart from the leader's", timeout: 20), "\(b.stderrTail())")
        #expect(try Replicas.replication(b)["state"] as? String == "stopped")
        #expect(try JournalSupport.userIDs(port: b.port).sorted() == ["bob0", "bob1"], "it keeps its own records, and takes none of a's")
        #expect(Self.rewound(dirs[1]).isEmpty, "nothing is cut")

        let c = try Replicas.follower(of: a, dirs[2])
        defer { c.stop() }
        try Replicas.waitForConvergence(leader: a, followers: [c])
        let origin = { (dir: URL) in (try? String(contentsOf: dir.appendingPathComponent("ORIGIN"), encoding: .utf8)) ?? "none" }
        #expect(origin(dirs[2]) == origin(dirs[0]) && origin(dirs[0]).count == 33, "\(origin(dirs[2])) \(origin(dirs[0]))")
    }

    @Test("the term survives a compaction and a restart, and reaches a new follower through the snapshot; a leader restarted on its own data keeps its term")
    func termThroughSnapshot() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let first = try Replicas.leader(dirs[0])
        var promoted = try Replicas.follower(of: first, dirs[1])
        try JournalSupport.createUsers(port: first.port, prefix: "early", range: 0..<3)
        try Replicas.waitForConvergence(leader: first, followers: [promoted])
        first.stop()
        promoted.terminate()
        #expect(promoted.waitForExit(timeout: 10) == 0)
        promoted = try Replicas.leader(dirs[1], ["--compact-after-bytes", "64KiB"])
        try JournalSupport.createUsers(port: promoted.port, prefix: "late", range: 0..<1500)
        let compacted = try eventually(timeout: 20) {
            let reply = try Reply(LineClient(port: promoted.port).request(#"{"id":"s","method":"replication.subscribe"}"#))
            return (reply.param?["snapshotSequence"] as? Int ?? 0) > 4
        }
        #expect(compacted, "no compaction: \(promoted.stderrTail())")
        // Restarted on its own data: the same term, no new term record.
        let before = try Replicas.sequence(promoted)
        promoted.terminate()
        #expect(promoted.waitForExit(timeout: 10) == 0)
        promoted = try Replicas.leader(dirs[1])
        defer { promoted.stop() }
        #expect(try Replicas.replication(promoted)["term"] as? Int == 1)
        #expect(try Replicas.sequence(promoted) == before)
        // A new follower gets the term with the snapshot.
        let late = try Replicas.follower(of: promoted, dirs[2])
        defer { late.stop() }
        #expect(late.stderrEventually(contains: "caught up through a snapshot", timeout: 20), "\(late.stderrTail())")
        try Replicas.waitForConvergence(leader: promoted, followers: [late])
        #expect(try Replicas.replication(late)["term"] as? Int == 1)
    }

    @Test("a leader from before terms (it refuses the unknown field) is followed as before")
    func leaderBeforeTerms() throws {
        let leader = try FakePeer()
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let follower = try DaemonProcess(extraArguments: ["--follow", "127.0.0.1:\(leader.port)"], dataDir: dir)
        defer { follower.stop() }
        try leader.accept(timeout: 10)
        let first = try Reply(leader.readLine())
        #expect(first.method == "replication.subscribe" && first.line.contains("\"terms\""), "\(first.line)")
        try leader.send(
            #"{"id":"\#(first.id ?? "")","method":"error.error","param":{"code":"invalidParams","#
                + #""errorMessage":"unknown field \"terms\" in param of replication.subscribe; expected {fromSequence?: int, snapshot?: bool}"}}"# + "\n")
        let second = try Reply(leader.readLine(timeout: 10))
        #expect(second.method == "replication.subscribe" && !second.line.contains("\"terms\""), "\(second.line)")
        try leader.send(#"{"id":"\#(second.id ?? "")","method":"replication.subscribeResult","param":{"sequence":0,"snapshotSequence":0}}"# + "\n")
        #expect(follower.stderrEventually(contains: "following 127.0.0.1:\(leader.port) from sequence 0"), "\(follower.stderrTail())")
    }
}
