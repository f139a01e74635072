import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 14's acceptance: real leaders and followers (`rpcd serve --follow`) on 127.0.0.1:0,
/// killed with SIGKILL and restarted on their data directories. Serialized: each test runs up to
/// three daemons and tens of thousands of mutations.
@Suite("followers: mirror a leader, survive kill -9, catch up, fail over", .serialized)
struct FollowerTests {
    @Test("10,000 mixed mutations on the leader converge on two followers: the same lists, the same journal bytes")
    func twoFollowersConverge() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        let followers = try [Replicas.follower(of: leader, dirs[1]), Replicas.follower(of: leader, dirs[2])]
        defer { ([leader] + followers).forEach { $0.stop() } }

        var mutations = MixedMutations(seed: 14)
        let failures = try mutations.send(to: leader.port, count: 10_000)
        #expect(failures.isEmpty, "\(failures.count) mutations failed, the first: \(failures.first ?? "")")
        #expect(try Replicas.sequence(leader) == 10_000)
        let journal = try JournalSupport.lines(JournalSupport.journal(dirs[0]))
        for method in ["createUser", "updateUser", "deleteUser", "addBuilding", "updateBuilding", "deleteBuilding"] {
            let count = journal.filter { $0.contains(#""method":"user.\#(method)""#) || $0.contains(#""method":"building.\#(method)""#) }.count
            #expect(count > 300, "only \(count) \(method) in the leader's journal: the mix is not mixed")
        }
        #expect(journal.filter { $0.contains(#""key":"m-"#) }.count > 1_000, "keyed mutations are missing")

        try Replicas.waitForConvergence(leader: leader, followers: followers)
        try Replicas.expectSameLists(leader, followers)
        for dir in dirs.dropFirst() {
            let (equal, sizes) = Replicas.journalsEqual(dirs[0], dir)
            #expect(equal, "the follower's journal differs from the leader's (\(sizes))")
        }
        // Each follower acknowledged everything it journaled.
        let acked = try eventually {
            let subscribers = try Replicas.replication(leader)["subscribers"] as? [[String: Any]] ?? []
            return subscribers.count == 2 && subscribers.allSatisfy { $0["ackedSequence"] as? Int == 10_000 && $0["lagRecords"] as? Int == 0 }
        }
        #expect(acked, "leader stats: \(String(describing: try? Replicas.replication(leader)))")
        for follower in followers {
            #expect(follower.stderrText.contains("following \(Replicas.address(leader)) from sequence 0"), "\(follower.stderrTail())")
            #expect(follower.isRunning)
        }
    }

    @Test("a follower serves reads and system.*; every mutation from its own clients is readOnly naming the leader")
    func readsAndReadOnly() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { [leader, follower].forEach { $0.stop() } }

        let writer = try LineClient(port: leader.port)
        #expect(try writer.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
        #expect(try writer.request(Wire.addBuilding("2", "b1", "Hall", "1 Main St", ["u1"])).contains("addBuildingResult"))
        try Replicas.waitForConvergence(leader: leader, followers: [follower])

        let c = try LineClient(port: follower.port)
        #expect(try c.request(Wire.getUser("1", "u1")) == Wire.result("1", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
        #expect(try c.request(Wire.request("2", "building.getBuilding", #"{"buildingId":"b1"}"#))
            == Wire.result("2", "building.getBuilding", Wire.building("b1", "Hall", "1 Main St", ["u1"])))
        #expect(try c.request(Wire.request("3", "user.listUsers")).contains(#""users":[{"id":"u1""#))
        #expect(try c.request(Wire.request("4", "building.listBuildings")).contains(#""buildings":[{"id":"b1""#))
        expectError(try c.request(Wire.getUser("5", "nobody")), code: "notFound", id: "5")

        let leaderAddress = Replicas.address(leader)
        let mutations = [
            Wire.createUser("m1", "u2", "Bo", "bo@example.com"),
            Wire.request("m2", "user.updateUser", #"{"userId":"u1","newName":"Ada L."}"#),
            Wire.request("m3", "user.deleteUser", #"{"userId":"u1"}"#),
            Wire.addBuilding("m4", "b2", "Annex", "2 Main St", []),
            Wire.request("m5", "building.updateBuilding", #"{"buildingId":"b1","newName":"Big Hall"}"#),
            Wire.request("m6", "building.deleteBuilding", #"{"buildingId":"b1"}"#),
            ExactlyOnceTests.keyedCreate("m7", key: "k-1"),
        ]
        for (i, line) in mutations.enumerated() {
            let reply = expectError(try c.request(line), code: "readOnly", id: "m\(i + 1)")
            #expect(reply?.errorMessage?.contains(leaderAddress) == true, "the message names the leader: \(reply?.line ?? "")")
        }
        // The seed form gets readOnly in the seed form.
        let seed = try LineClient(port: follower.port)
        let seedCreate = #"{"id":"s1","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"u3","name":"C","email":"c@example.com"}}}}"#
        expectError(try seed.request(seedCreate), code: "readOnly", id: "s1", seedForm: true)

        // Nothing changed here or on the leader, and the connection still serves.
        #expect(try c.request(Wire.getUser("6", "u1")) == Wire.result("6", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
        #expect(try Replicas.sequence(follower) == 2 && Replicas.sequence(leader) == 2)
        #expect(try c.request(#"{"id":"7","method":"system.ping"}"#).contains("system.pingResult"))
        #expect(try c.request(#"{"id":"8","method":"system.describe"}"#).contains("system.describeResult"))
        let replication = try Replicas.replication(follower)
        #expect(replication["role"] as? String == "follower")
        #expect(replication["leader"] as? String == leaderAddress)
        #expect(replication["connected"] as? Bool == true)
        #expect(replication["leaderSequence"] as? Int == 2 && replication["lagRecords"] as? Int == 0, "\(replication)")
        let leaderReplication = try Replicas.replication(leader)
        #expect(leaderReplication["role"] as? String == "leader" && leaderReplication["sequence"] as? Int == 2, "\(leaderReplication)")
        let subscribers = leaderReplication["subscribers"] as? [[String: Any]] ?? []
        #expect(subscribers.count == 1 && (subscribers.first?["peer"] as? String)?.hasPrefix("127.0.0.1:") == true, "\(leaderReplication)")
    }

    @Test("a follower reads its leader's feed on a thread of its own (rpc.client), woken by the kernel, not through libdispatch's manager thread")
    func followerReadsOnItsOwnThread() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { [leader, follower].forEach { $0.stop() } }
        #expect(try LineClient(port: leader.port).request(Wire.createUser("1", "u1", "Ada", "ada@example.com")).contains("createUserResult"))
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        #expect(follower.threadNames().contains("rpc.client"), "the follower's threads: \(follower.threadNames())")
        #expect(!leader.threadNames().contains("rpc.client"), "the leader's threads: \(leader.threadNames())")
    }

    @Test("kill -9 a follower, 10,000 more on the leader, restart it: it catches up from its own journal, without a snapshot")
    func restartCatchesUpFromOwnJournal() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        defer { leader.stop() }
        var mutations = MixedMutations(seed: 3)
        var follower = try Replicas.follower(of: leader, dirs[1])
        #expect(try mutations.send(to: leader.port, count: 2_000).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.waitForAcknowledgements(leader)
        follower.kill()
        #expect(follower.waitForExit(timeout: 10) == 128 + SIGKILL)

        #expect(try mutations.send(to: leader.port, count: 10_000).isEmpty)
        #expect(try Replicas.sequence(leader) == 12_000)
        follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        let (equal, sizes) = Replicas.journalsEqual(dirs[0], dirs[1])
        #expect(equal, "journals differ after the catch-up (\(sizes))")

        // It resumed at its own last record: the leader fed it from 2,000, no snapshot on either side.
        #expect(Replicas.loggedNumber(follower.stderrText, after: "following \(Replicas.address(leader)) from sequence ") == 2_000, "\(follower.stderrTail())")
        #expect(!follower.stderrText.contains("snapshot"), "the follower mentions a snapshot: \(follower.stderrTail())")
        let subscribed = leader.stderrText.components(separatedBy: "\n").filter { $0.contains("subscribed from sequence") }
        #expect(subscribed.count == 2 && subscribed.last?.hasSuffix("subscribed from sequence 2000") == true, "\(subscribed)")
        #expect(!FileManager.default.fileExists(atPath: dirs[1].appendingPathComponent("snapshot.jsonl").path))
    }

    @Test("the leader compacts while a follower is down: on restart the follower catches up through a snapshot, then goes on")
    func catchUpThroughSnapshot() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "64KiB"])
        defer { leader.stop() }
        var mutations = MixedMutations(seed: 4)
        var follower = try Replicas.follower(of: leader, dirs[1])
        #expect(try mutations.send(to: leader.port, count: 300).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        let downAt = try Replicas.sequence(follower)
        follower.kill()
        _ = follower.waitForExit(timeout: 10)

        // Several compactions: the records after `downAt` are only in the leader's snapshot now
        // (not in the journal its last compaction kept either).
        #expect(try mutations.send(to: leader.port, count: 5_000).isEmpty)
        let compactedPast = try eventually { try Replicas.needsSnapshot(leader, from: downAt) }
        #expect(compactedPast, "the leader did not compact past \(downAt) twice: \(leader.stderrTail())")

        follower = try Replicas.follower(of: leader, dirs[1])
        #expect(follower.stderrEventually(contains: "caught up through a snapshot at sequence ", timeout: 30), "\(follower.stderrTail())")
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        let installedAt = Replicas.loggedNumber(follower.stderrText, after: "caught up through a snapshot at sequence ")
        #expect((installedAt ?? 0) > downAt, "\(follower.stderrTail())")

        // It goes on from there, and after another kill -9 it resumes from its own files (the
        // snapshot it installed and its journal since), with no second snapshot unless the leader
        // compacted past it again meanwhile.
        #expect(try mutations.send(to: leader.port, count: 1_000).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.waitForAcknowledgements(leader)
        let secondDownAt = try Replicas.sequence(follower)
        follower.kill()
        _ = follower.waitForExit(timeout: 10)
        #expect(try mutations.send(to: leader.port, count: 20).isEmpty)
        _ = try Replicas.settledSnapshotSequence(leader)
        let needsSnapshot = try Replicas.needsSnapshot(leader, from: secondDownAt)
        follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        #expect(Replicas.loggedNumber(follower.stderrText, after: "from sequence ") == secondDownAt, "\(follower.stderrTail())")
        #expect(follower.stderrText.contains("snapshot") == needsSnapshot,
            "the leader \(needsSnapshot ? "needs" : "does not need") its snapshot from \(secondDownAt): \(follower.stderrTail())")
    }

    @Test("the leader compacts once while a follower is down: the follower gets what it missed from the journal the compaction kept, not the snapshot")
    func catchUpThroughKeptJournal() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "256KiB"])
        defer { leader.stop() }
        var mutations = MixedMutations(seed: 5)
        var follower = try Replicas.follower(of: leader, dirs[1])
        #expect(try mutations.send(to: leader.port, count: 200).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.waitForAcknowledgements(leader)
        let downAt = try Replicas.sequence(follower)
        follower.kill()
        _ = follower.waitForExit(timeout: 10)

        // One compaction past where it stopped (a few hundred records at a time, until it happens).
        while Replicas.compactions(leader) == 0, try Replicas.sequence(leader) < 20_000 {
            #expect(try mutations.send(to: leader.port, count: 300).isEmpty)
        }
        let snapshot = try Replicas.settledSnapshotSequence(leader)
        #expect(Replicas.compactions(leader) == 1 && snapshot > downAt, "\(leader.stderrTail())")
        #expect(try !Replicas.needsSnapshot(leader, from: downAt))

        follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        #expect(!follower.stderrText.contains("snapshot"), "the follower took a snapshot: \(follower.stderrTail())")
        let subscribed = leader.stderrText.components(separatedBy: "\n").filter { $0.contains("subscribed from sequence") }
        #expect(subscribed.last?.hasSuffix("subscribed from sequence \(downAt)") == true, "\(subscribed)")
        // Its journal holds the leader's records as they were journaled, the kept ones included.
        let theirs = try JournalSupport.lines(dirs[0].appendingPathComponent("journal.prev.jsonl")) + JournalSupport.lines(JournalSupport.journal(dirs[0]))
        let records = { (lines: [String]) in lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty } }
        let ours = records(try JournalSupport.lines(JournalSupport.journal(dirs[1])))
        #expect(ours.count == (try Replicas.sequence(leader)) && ours == records(theirs), "the follower's journal differs from the leader's two")
    }

    /// TSan's allocator is not glibc's: there is nothing for malloc_trim to give back under it.
    @Test(
        "a follower that caught up through a snapshot of 300,000 users gives back what installing it freed",
        .enabled(if: ProcessInfo.processInfo.environment["TSAN_OPTIONS"] == nil))
    func snapshotInstallReleasesMemory() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        try JournalSupport.writeUUIDJournal(dirs[0], records: 300_000)
        var leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "1MiB"])
        defer { leader.stop() }
        // One more create: the journal is past 1 MiB and the snapshot empty, so it compacts.
        let c = try LineClient(port: leader.port, timeout: 30)
        #expect(try c.request(Wire.createUser("1", "last", "Last", "last@example.com")) == Wire.createUserResult("1", "last", "Last", "last@example.com"))
        #expect(try Replicas.settledSnapshotSequence(leader) == 300_001)
        // A restart drops the journal the compaction kept: the records are in the snapshot only.
        leader.stop()
        leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "1MiB"])
        #expect(try Replicas.needsSnapshot(leader, from: 0))

        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        #expect(follower.stderrEventually(contains: "caught up through a snapshot at sequence 300001", timeout: 30), "\(follower.stderrTail())")
        // The release runs off the follower's queue, right after it installed the snapshot.
        var figures = ""
        let gaveBack = try eventually(timeout: 5) {
            let (done, text) = try JournalSupport.gaveBackFreedMemory(follower)
            figures = text
            return done
        }
        #expect(gaveBack, "the follower: \(figures)")
    }

    @Test("a follower killed -9 five times at random moments while the leader writes and compacts converges at the end")
    func followerChaos() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "64KiB"])
        defer { leader.stop() }
        let port = leader.port
        let writing = Locked(true)
        let failures = Locked<[String]>([])
        let writerDone = DispatchSemaphore(value: 0)
        Thread {
            defer { writerDone.signal() }
            var mutations = MixedMutations(seed: 8)
            while writing.current {
                do {
                    let failed = try mutations.send(to: port, count: 200)
                    failures.withLock { $0 += failed }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                    return
                }
                usleep(20_000)
            }
        }.start()
        var random = SystemRandomNumberGenerator()
        for _ in 0..<5 {
            let follower = try Replicas.follower(of: leader, dirs[1])
            usleep(UInt32.random(in: 100_000...1_200_000, using: &random))
            follower.kill()
            _ = follower.waitForExit(timeout: 10)
        }
        writing.withLock { $0 = false }
        #expect(writerDone.wait(timeout: .now() + 60) == .success)
        #expect(failures.current.isEmpty, "\(failures.current.prefix(3))")
        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        #expect(try Replicas.sequence(leader) > 1_000, "the writer hardly wrote")
    }

    @Test("the leader is killed -9 in the middle of writes and restarted on its port: the follower reconnects and converges, never ahead of it")
    func leaderRestart() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        var leader = try Replicas.leader(dirs[0])
        let port = leader.port
        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        var mutations = MixedMutations(seed: 9)
        #expect(try mutations.send(to: port, count: 1_000).isEmpty)
        // Pipelined creates, and the kill while they are being written.
        let client = try LineClient(port: port)
        try client.send((0..<3_000).map { Wire.createUser("c\($0)", "late\($0)", "Late", "l@example.com") + "\n" }.joined())
        usleep(30_000)
        leader.kill()
        _ = leader.waitForExit(timeout: 10)
        #expect(follower.stderrEventually(contains: "lost the leader 127.0.0.1:\(port)"), "\(follower.stderrTail())")
        leader = try DaemonProcess(listen: ["127.0.0.1:\(port)"], dataDir: dirs[0])
        defer { leader.stop() }
        #expect(try JournalSupport.createUsers(port: port, prefix: "after", range: 0..<100).count == 100)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        try Replicas.expectSameLists(leader, [follower])
        let (equal, sizes) = Replicas.journalsEqual(dirs[0], dirs[1])
        #expect(equal, "journals differ after the leader's restart (\(sizes))")
        let follows = follower.stderrText.components(separatedBy: "\n").filter { $0.contains("following 127.0.0.1:\(port) from sequence") }
        #expect(follows.count == 2, "\(follows)")
    }

    @Test("kill -9 the leader: followers serve reads; promote one, point the other at it, write, converge")
    func failover() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        defer { leader.stop() }
        var a = try Replicas.follower(of: leader, dirs[1])
        var b = try Replicas.follower(of: leader, dirs[2])
        var mutations = MixedMutations(seed: 5)
        #expect(try mutations.send(to: leader.port, count: 3_000).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [a, b])
        let before = try Replicas.lists(leader)

        leader.kill()
        _ = leader.waitForExit(timeout: 10)
        for follower in [a, b] {
            #expect(follower.stderrEventually(contains: "lost the leader \(Replicas.address(leader))"), "\(follower.stderrTail())")
            #expect(try Replicas.lists(follower) == before, "a follower stopped serving its reads after the leader died")
            #expect(try Replicas.replication(follower)["connected"] as? Bool == false)
            expectError(try LineClient(port: follower.port).request(Wire.createUser("x", "x1", "X", "x@example.com")), code: "readOnly", id: "x")
        }

        // Promote a: stop it, start it on its data directory without --follow.
        a.terminate()
        #expect(a.waitForExit(timeout: 10) == 0)
        a = try Replicas.leader(dirs[1])
        defer { a.stop() }
        #expect(try Replicas.lists(a) == before)
        #expect(try Replicas.replication(a)["role"] as? String == "leader")
        // Point b at it.
        b.terminate()
        #expect(b.waitForExit(timeout: 10) == 0)
        b = try Replicas.follower(of: a, dirs[2])
        defer { b.stop() }
        #expect(try mutations.send(to: a.port, count: 2_000).isEmpty, "the promoted leader refused writes: \(a.stderrTail())")
        // 3,000 records, the new term's record, 2,000 more.
        #expect(try Replicas.sequence(a) == 5_001)
        #expect(try Replicas.replication(a)["term"] as? Int == 1)
        try Replicas.waitForConvergence(leader: a, followers: [b])
        try Replicas.expectSameLists(a, [b])
        let (equal, sizes) = Replicas.journalsEqual(dirs[1], dirs[2])
        #expect(equal, "the new leader's and its follower's journals differ (\(sizes))")
        #expect(Replicas.loggedNumber(b.stderrText, after: "following \(Replicas.address(a)) from sequence ") == 3_000, "\(b.stderrTail())")
    }

    @Test("exactly once across a failover: a promoted follower answers a retried keyed mutation with its first outcome, whether it got the key from the journal or from a snapshot")
    func keysSurviveFailover() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "4KiB"])
        defer { leader.stop() }
        let fromJournal = try Replicas.follower(of: leader, dirs[1])
        let c = try LineClient(port: leader.port)
        #expect(try c.request(ExactlyOnceTests.keyedCreate("1", key: "order-1")) == Wire.createUserResult("1", "k1", "Kay", "k@example.com"))
        // Two compactions put the keyed record in the leader's snapshot only (the first one's kept
        // journal holds it too); a new follower starts from that snapshot.
        try JournalSupport.createUsers(port: leader.port, range: 0..<150)
        _ = try Replicas.settledSnapshotSequence(leader)
        try JournalSupport.createUsers(port: leader.port, range: 150..<300)
        let compacted = try eventually { try Replicas.needsSnapshot(leader, from: 0) }
        #expect(compacted, "\(leader.stderrTail())")
        let fromSnapshot = try Replicas.follower(of: leader, dirs[2])
        #expect(fromSnapshot.stderrEventually(contains: "caught up through a snapshot"), "\(fromSnapshot.stderrTail())")
        try Replicas.waitForConvergence(leader: leader, followers: [fromJournal, fromSnapshot])
        leader.kill()
        _ = leader.waitForExit(timeout: 10)

        for (follower, dir, how) in [(fromJournal, dirs[1], "the journal"), (fromSnapshot, dirs[2], "a snapshot")] {
            follower.terminate()
            #expect(follower.waitForExit(timeout: 10) == 0)
            let promoted = try Replicas.leader(dir)
            defer { promoted.stop() }
            let retry = try LineClient(port: promoted.port).request(ExactlyOnceTests.keyedCreate("2", key: "order-1"))
            #expect(retry == Wire.createUserResult("2", "k1", "Kay", "k@example.com"),
                "a follower that got the key from \(how), promoted: the retry got \(retry)")
        }
    }
}
