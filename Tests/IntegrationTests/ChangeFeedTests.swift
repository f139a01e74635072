import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `replication.subscribe` seen from a plain connection: netcat, raw sockets, a peer that never
/// reads.
@Suite("change feed: replication.subscribe from netcat and raw sockets", .serialized)
struct ChangeFeedTests {
    static let subscribe = #"{"id":"f","method":"replication.subscribe"}"#

    static func subscribe(from seq: Int, snapshot: Bool? = nil) -> String {
        let flag = snapshot.map { #","snapshot":\#($0)"# } ?? ""
        return #"{"id":"f","method":"replication.subscribe","param":{"fromSequence":\#(seq)\#(flag)}}"#
    }

    /// A subscribe as a daemon sends it: with its terms (none here), so the leader feeds it from
    /// the journal its last compaction kept too.
    static func daemonSubscribe(from seq: Int) -> String {
        #"{"id":"f","method":"replication.subscribe","param":{"fromSequence":\#(seq),"terms":[]}}"#
    }

    static func subscribeResult(_ sequence: Int, _ snapshotSequence: Int) -> String {
        #"{"id":"f","method":"replication.subscribeResult","param":{"sequence":\#(sequence),"snapshotSequence":\#(snapshotSequence)}}"#
    }

    @Test("netcat subscribes; a change made on another connection arrives as its journal line (id r<seq>, seq, crc)")
    func netcatReceivesJournalLines() throws {
        guard let nc = netcatOrIssue() else { return }
        try withDaemon { daemon in
            let feed = try NetcatProcess(nc: nc, port: daemon.port)
            defer { feed.stop() }
            try feed.type(Self.subscribe)
            #expect(feed.waitForLines(1) == [Self.subscribeResult(0, 0)], "nc stderr: \(feed.stderrText)")

            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
            expectError(try c.request(Wire.createUser("2", "u1", "Ada", "ada@example.com")), code: "conflict", id: "2")  // not a change
            #expect(try c.request(ExactlyOnceTests.keyedCreate("3", key: "k-9")).contains("createUserResult"))
            let lines = feed.waitForLines(3)
            #expect(lines.count == 3, "nc printed: \(lines)")
            let journal = try JournalSupport.lines(JournalSupport.journal(daemon.dataDir)).filter { !$0.isEmpty }
            #expect(Array(lines.dropFirst()) == journal, "the feed lines are the journal's lines")
            let first = try Reply(lines[1])
            #expect(first.id == "r1" && first.method == "user.createUser" && first.object["seq"] as? Int == 1, "\(lines[1])")
            #expect(lines[1].hasPrefix(#"{"id":"r1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"},"seq":1,"crc":""#), "\(lines[1])")
            #expect(lines[2].hasPrefix(#"{"id":"r2","method":"user.createUser","param":{"id":"k1","name":"Kay","email":"k@example.com"},"key":"k-9","seq":2,"crc":""#), "\(lines[2])")

            // The feed's connection is still an ordinary one: its requests are answered, and its
            // acknowledgements (counter-requests with the record's id) are not.
            try feed.type(#"{"id":"r1","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}"#)
            try feed.type(Wire.getUser("g", "u1"))
            #expect(feed.waitForLines(4).last == Wire.result("g", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")), "\(feed.lines)")
            let acked = try eventually {
                let subscribers = try Replicas.replication(daemon)["subscribers"] as? [[String: Any]] ?? []
                return subscribers.first?["ackedSequence"] as? Int == 1 && subscribers.first?["sentSequence"] as? Int == 2
            }
            #expect(acked, "\(String(describing: try? Replicas.replication(daemon)))")
            #expect(feed.lines.count == 4, "an acknowledgement was answered: \(feed.lines)")
        }
    }

    @Test("a seed-form subscriber gets the same changes in the seed form, with their seq")
    func seedFormFeed() throws {
        try withDaemon { daemon in
            let feed = try LineClient(port: daemon.port)
            let result = try Reply(feed.request(#"{"id":"f","method":{"replication":{"_0":"subscribe"}},"param":{"replication":{"subscribe":{}}}}"#))
            #expect(result.isSeedForm && result.method == "replication.subscribeResult", "\(result.line)")
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")).contains("createUserResult"))
            let change = try Reply(feed.expectLine())
            #expect(change.isSeedForm && change.id == "r1" && change.method == "user.createUser", "\(change.line)")
            #expect(change.param?["email"] as? String == "ada@example.com" && change.object["seq"] as? Int == 1, "\(change.line)")
            #expect(change.object["crc"] == nil, "the seal covers the canonical bytes only: \(change.line)")
        }
    }

    @Test("fromSequence ahead of the leader, negative, or a second subscribe on one connection: invalidParams; equal to it: fine")
    func badFromSequence() throws {
        try withDaemon { daemon in
            try JournalSupport.createUsers(port: daemon.port, range: 0..<2)
            let c = try LineClient(port: daemon.port)
            let ahead = expectError(try c.request(Self.subscribe(from: 3)), code: "invalidParams", id: "f")
            #expect(ahead?.errorMessage?.contains("ahead") == true, "\(ahead?.line ?? "")")
            expectError(try c.request(Self.subscribe(from: -1)), code: "invalidParams", id: "f")
            #expect(try c.request(Self.subscribe(from: 2)) == Self.subscribeResult(2, 0))
            let twice = expectError(try c.request(Self.subscribe(from: 2)), code: "invalidParams", id: "f")
            #expect(twice?.errorMessage?.contains("already") == true, "\(twice?.line ?? "")")
            #expect(c.isSilent(for: 0.3), "records before fromSequence were sent")
        }
    }

    @Test("at most 128 subscribers at once: the next gets overloaded, and a place that frees up is taken again")
    func subscriberLimit() throws {
        try withDaemon { daemon in
            var subscribers: [LineClient] = []
            for _ in 0..<128 {
                let c = try LineClient(port: daemon.port)
                #expect(try c.request(Self.subscribe) == Self.subscribeResult(0, 0))
                subscribers.append(c)
            }
            let extra = try LineClient(port: daemon.port)
            let refused = expectError(try extra.request(Self.subscribe), code: "overloaded", id: "f")
            #expect(refused?.errorMessage?.contains("128") == true, "\(refused?.line ?? "")")
            #expect(try extra.request(Wire.getUser("g", "nobody")).contains("error.error"), "the refused connection stays open")
            subscribers.removeLast().close()
            #expect(try eventually {
                try Reply(LineClient(port: daemon.port).request(Self.subscribe)).method == "replication.subscribeResult"
            })
        }
    }

    @Test("after a compaction, fromSequence 0 is snapshotRequired without snapshot: true; with it: snapshotBegin, the snapshot's lines and keys, snapshotEnd, then the journal")
    func snapshotFirst() throws {
        try withDaemon(extraArguments: ["--compact-after-bytes", "4KiB"]) { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(ExactlyOnceTests.keyedCreate("k", key: "kept")) == Wire.createUserResult("k", "k1", "Kay", "k@example.com"))
            try JournalSupport.createUsers(port: daemon.port, range: 0..<300)
            #expect(try c.request(Wire.request("d", "user.deleteUser", #"{"userId":"u299"}"#)).contains("deleteUserResult"))
            let snapshotSequence = try Replicas.settledSnapshotSequence(daemon)
            #expect(snapshotSequence > 1, "no compaction: \(daemon.stderrTail())")

            let refused = try LineClient(port: daemon.port)
            let error = expectError(try refused.request(Self.subscribe(from: 0)), code: "snapshotRequired", id: "f")
            #expect(error?.errorMessage?.contains("snapshot") == true)
            #expect(refused.isSilent(for: 0.3), "the feed started after snapshotRequired")

            let feed = try LineClient(port: daemon.port)
            #expect(try feed.request(Self.subscribe(from: 0, snapshot: true)) == Self.subscribeResult(302, snapshotSequence))
            let snapshotFile = try JournalSupport.lines(daemon.dataDir.appendingPathComponent("snapshot.jsonl"))
            let records = snapshotFile.dropFirst().filter { $0.hasPrefix(#"{"id":"s","#) }
            #expect(try feed.expectLine()
                == #"{"id":"snapshot","method":"replication.snapshotBegin","param":{"sequence":\#(snapshotSequence),"records":\#(records.count)}}"#)
            var sent: [String] = []
            while let line = try feed.readLine(), !line.contains("replication.snapshotEnd") { sent.append(line) }
            #expect(sent.filter { !$0.contains(#""method":"replication.key""#) } == Array(records), "the snapshot's record lines, as in snapshot.jsonl")
            // The remembered outcome of the keyed create travels with them (a promoted follower answers its retry).
            let keys = sent.filter { $0.contains(#""method":"replication.key""#) }
            #expect(keys.count == 1 && keys.first?.hasPrefix(#"{"id":"s","method":"replication.key","param":{"key":"kept","#) == true, "\(keys)")
            #expect(keys.first?.contains(#""reply":{"id":"k1","name":"Kay","email":"k@example.com"}"#) == true, "\(keys)")
            let journal = try JournalSupport.lines(JournalSupport.journal(daemon.dataDir)).filter { !$0.isEmpty }
            #expect(journal.count == 302 - snapshotSequence)
            #expect(try feed.readLines(journal.count) == journal, "after the snapshot, the journal's lines")
            #expect(feed.isSilent(for: 0.2))
        }
    }

    @Test("the journal a compaction replaced stays for daemons subscribing from before the snapshot (others need the snapshot, as before), until the next compaction replaces it or a restart removes it")
    func previousJournalServesSubscribers() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let previous = dir.appendingPathComponent("journal.prev.jsonl")
        var daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir)
        defer { daemon.stop() }
        // Writes until `count` compactions are done and settled (no rotation under way).
        func write(until count: Int, from start: inout Int) throws {
            try JournalSupport.createUsers(port: daemon.port, from: &start) { Replicas.compactions(daemon) >= count }
            #expect(Replicas.compactions(daemon) == count, "\(daemon.stderrTail())")
            _ = try Replicas.settledSnapshotSequence(daemon)
        }
        var next = 0
        try write(until: 1, from: &next)
        let snapshot = try Replicas.settledSnapshotSequence(daemon)
        // Each without the spaces a writer may keep ahead of its end.
        let kept = try JournalSupport.lines(previous).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        let journal = try JournalSupport.lines(JournalSupport.journal(dir)).filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        let durable = kept.count + journal.count
        #expect(try Replicas.sequence(daemon) == durable, "the two journals hold every record once")
        #expect(snapshot > 0 && kept.count == snapshot, "the kept journal holds what the snapshot does: \(kept.count) lines, snapshot at \(snapshot)")

        // A plain subscriber from 0 needs the snapshot, as `snapshotSequence` tells it.
        expectError(try LineClient(port: daemon.port).request(Self.subscribe(from: 0)), code: "snapshotRequired", id: "f")
        // A daemon from 0, without a snapshot: every record as journaled, the kept journal's then the live one's.
        let feed = try LineClient(port: daemon.port, timeout: 30)
        let started = try Reply(feed.request(Self.daemonSubscribe(from: 0)))
        #expect(started.param?["sequence"] as? Int == durable && started.param?["snapshotSequence"] as? Int == snapshot, "\(started.line)")
        #expect(try feed.readLines(durable) == kept + journal)
        #expect(feed.isSilent(for: 0.2))

        // The next compaction replaces it: records before it need the snapshot.
        try write(until: 2, from: &next)
        let first = try #require(try Reply(JournalSupport.lines(previous)[0]).object["seq"] as? Int)
        #expect(first == kept.count + 1, "the kept journal is the one the second compaction replaced")
        expectError(try LineClient(port: daemon.port).request(Self.daemonSubscribe(from: first - 2)), code: "snapshotRequired", id: "f")
        let later = try LineClient(port: daemon.port, timeout: 30)
        #expect(try later.request(Self.daemonSubscribe(from: first - 1)).contains("subscribeResult"))
        #expect(try Reply(later.expectLine()).object["seq"] as? Int == first)

        // A restart removes it (a directory restored from a backup may hold another history).
        daemon.stop()
        daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir)
        #expect(!FileManager.default.fileExists(atPath: previous.path))
        let restarted = try Replicas.settledSnapshotSequence(daemon)
        expectError(try LineClient(port: daemon.port).request(Self.daemonSubscribe(from: restarted - 1)), code: "snapshotRequired", id: "f")
    }

    @Test("a compaction drops the journal the last one kept when it begins (at its peak the disk holds two journals), and keeps the one it replaces")
    func keptJournalDroppedWhenCompactionBegins() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let daemon = try DaemonProcess(
            extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir, environment: ["RPCD_TEST_COMPACTION_DELAY_MS": "1500"])
        defer { daemon.stop() }
        let previous = dir.appendingPathComponent("journal.prev.jsonl").path
        let next = dir.appendingPathComponent("journal.next.jsonl").path
        // Writes until a compaction begins (its next journal appears), then no more until it ends.
        var count = 0
        func writeUntilCompactionBegins() throws {
            try JournalSupport.createUsers(port: daemon.port, from: &count) { FileManager.default.fileExists(atPath: next) }
        }
        try writeUntilCompactionBegins()
        #expect(eventually(timeout: 20) { Replicas.compactions(daemon) == 1 }, "\(daemon.stderrTail())")
        let first = try Replicas.settledSnapshotSequence(daemon)
        #expect(FileManager.default.fileExists(atPath: previous))
        #expect(try !Replicas.needsSnapshot(daemon, from: 0))
        // The second compaction waits 1.5 s before its snapshot: the kept journal is gone meanwhile.
        try writeUntilCompactionBegins()
        #expect(FileManager.default.fileExists(atPath: next) && !FileManager.default.fileExists(atPath: previous), "\(daemon.stderrTail())")
        #expect(try Replicas.needsSnapshot(daemon, from: 0))
        #expect(eventually(timeout: 20) { Replicas.compactions(daemon) == 2 }, "\(daemon.stderrTail())")
        _ = try Replicas.settledSnapshotSequence(daemon)
        let kept = try JournalSupport.lines(URL(fileURLWithPath: previous))
        #expect(try Reply(kept[0]).object["seq"] as? Int == first + 1, "the journal the second compaction replaced")
        #expect(try !Replicas.needsSnapshot(daemon, from: first))
    }

    @Test("a damaged line in the journal a compaction kept stops the feed that reads it, never reaching it; subscribers behind the snapshot then get the snapshot, a follower converges")
    func damagedKeptJournal() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"], dataDir: dirs[0])
        defer { daemon.stop() }
        var next = 0
        try JournalSupport.createUsers(port: daemon.port, from: &next) { Replicas.compactions(daemon) > 0 }
        let snapshot = try Replicas.settledSnapshotSequence(daemon)
        // Record 5 of the kept journal, damaged in place ("User 4" -> "Uxer 4"): its checksum no longer matches.
        let previous = dirs[0].appendingPathComponent("journal.prev.jsonl")
        var bytes = try Data(contentsOf: previous)
        let at = try #require(bytes.range(of: Data(#""name":"User 4""#.utf8)))
        bytes[at.lowerBound + 9] = UInt8(ascii: "x")
        try bytes.write(to: previous)

        let feed = try LineClient(port: daemon.port, timeout: 30)
        #expect(try feed.request(Self.daemonSubscribe(from: 0)).contains("subscribeResult"))
        let stopped = expectError(try feed.expectLine(), code: "internal")
        #expect(stopped?.errorMessage?.contains("the journal kept from before the last compaction is damaged") == true, "\(stopped?.line ?? "")")
        #expect(stopped?.errorMessage?.contains("record 5 does not match its checksum") == true, "\(stopped?.line ?? "")")
        #expect(daemon.stderrEventually(contains: "not reading the journal kept from before the last compaction any more"), "\(daemon.stderrTail())")
        #expect(try Replicas.needsSnapshot(daemon, from: 0))
        let again = try LineClient(port: daemon.port, timeout: 30)
        #expect(try again.request(Self.subscribe(from: 4, snapshot: true)).contains("subscribeResult"))
        #expect(try again.expectLine().contains(#""method":"replication.snapshotBegin","param":{"sequence":\#(snapshot),"#))

        // A follower started empty is fed the snapshot, and its records are the leader's.
        let follower = try Replicas.follower(of: daemon, dirs[1])
        defer { follower.stop() }
        try Replicas.waitForConvergence(leader: daemon, followers: [follower])
        try Replicas.expectSameLists(daemon, [follower])
        #expect(follower.stderrEventually(contains: "caught up through a snapshot", timeout: 30), "\(follower.stderrTail())")
    }

    @Test("a subscriber that falls behind compaction (and behind what memory keeps) is disconnected with a logged reason; it subscribes again with a snapshot")
    func behindCompaction() throws {
        try withDaemon(extraArguments: ["--compact-after-bytes", "1MiB"]) { daemon in
            let users = 100
            try JournalSupport.createUsers(port: daemon.port, range: 0..<users)
            let slow = try LineClient(port: daemon.port, timeout: 30, receiveBufferBytes: 4096)
            #expect(try slow.request(Self.subscribe(from: 0)) == Self.subscribeResult(users, 0))
            // 40 MB of updates: past its 2 MiB window, the socket buffers and the 16 MiB memory
            // keeps, and compacted many times over.
            let name = String(repeating: "n", count: 10_000)
            let writer = try LineClient(port: daemon.port, timeout: 60)
            for batch in 0..<80 {
                try writer.send((0..<50).map { i in
                    Wire.request("w\(i)", "user.updateUser", #"{"userId":"u\#(i)","newName":"\#(batch)\#(name)"}"#) + "\n"
                }.joined())
                for _ in 0..<50 { #expect(try writer.expectLine().contains("updateUserResult")) }
            }
            var lines: [String] = []
            while let line = try slow.readLine() { lines.append(line) }
            let last = try #require(lines.last)
            expectError(last, code: "internal")
            #expect(last.contains("the change feed stopped"), "\(last.prefix(300))")
            #expect(lines.count > 1 && lines.count < users + 4_000, "\(lines.count) lines before the disconnect")
            #expect(daemon.stderrEventually(contains: "replication: disconnecting subscriber"), "\(daemon.stderrTail())")
            // Its next record is in the snapshot now: without a snapshot it is refused, with one it gets everything.
            let again = try LineClient(port: daemon.port, timeout: 30)
            let seq = lines.count - 1 + users  // the feed lines it got were records 1...
            expectError(try again.request(Self.subscribe(from: seq)), code: "snapshotRequired", id: "f")
            #expect(try again.request(Self.subscribe(from: seq, snapshot: true)).contains("subscribeResult"))
            #expect(try again.expectLine().contains("replication.snapshotBegin"))
        }
    }

    @Test("a subscriber that never reads: the leader's memory stays bounded while 120 MB are journaled, and clients and other subscribers get everything")
    func subscriberThatNeverReads() throws {
        try withDaemon(extraArguments: ["--compact-after-bytes", "1GiB"]) { daemon in
            let users = 100
            try JournalSupport.createUsers(port: daemon.port, range: 0..<users)
            // Subscribes from the beginning with a tiny receive window, then never reads again.
            let stuck = try LineClient(port: daemon.port, receiveBufferBytes: 4096)
            try stuck.sendLine(Self.subscribe(from: 0))
            // Another subscriber reads everything, on a thread of its own.
            let updates = 3_000
            let total = users + updates
            let port = daemon.port
            let received = Locked(0)
            let subscribed = DispatchSemaphore(value: 0)
            let readerDone = DispatchSemaphore(value: 0)
            Thread {
                defer { readerDone.signal() }
                guard let reading = try? LineClient(port: port, timeout: 120),
                    (try? reading.request(Self.subscribe(from: 0))) == Self.subscribeResult(users, 0)
                else {
                    subscribed.signal()
                    return
                }
                subscribed.signal()
                // Every line from here on is a change; the feed goes quiet once it sent them all.
                // Until it has every change: a writer slowed by a busy disk may pause for seconds.
                let drained = reading.drainUntilClosed(silenceTimeout: 60, stopAfterLines: total)
                received.withLock { $0 = drained.lines }
            }.start()
            #expect(subscribed.wait(timeout: .now() + 10) == .success)
            // And a client reads on a connection of its own while the writer writes.
            let writing = Locked(true)
            let reads = Locked((ok: 0, bad: 0))
            let clientDone = DispatchSemaphore(value: 0)
            Thread {
                defer { clientDone.signal() }
                guard let client = try? LineClient(port: port, timeout: 30) else { return }
                var n = 0
                while writing.current {
                    n += 1
                    let ok = (try? client.request(Wire.getUser("g\(n)", "u\(n % users)")))?.contains("getUserResult") == true
                    reads.withLock { ok ? ($0.ok += 1) : ($0.bad += 1) }
                    usleep(1_000)  // a client, not a second load generator on two cores
                }
            }.start()
            usleep(300_000)
            let baseline = try #require(daemon.rssKiB())

            // 3,000 updates with 40 KB names: 120 MB of journal the stuck subscriber is owed, in
            // two halves; memory must level off, not grow with what is owed.
            let name = String(repeating: "n", count: 40_000)
            let writer = try LineClient(port: daemon.port, timeout: 60)
            var answered = 0
            var halfway = 0
            for batch in 0..<(updates / 50) {
                if batch == updates / 100 { halfway = daemon.rssKiB() ?? 0 }
                var text = ""
                for i in 0..<50 {
                    let n = batch * 50 + i
                    text += Wire.request("w\(n)", "user.updateUser", #"{"userId":"u\#(n % users)","newName":"\#(n)\#(name)"}"#) + "\n"
                }
                try writer.send(text)
                for _ in 0..<50 where try writer.expectLine().contains("updateUserResult") { answered += 1 }
            }
            let end = try #require(daemon.rssKiB())
            writing.withLock { $0 = false }
            #expect(answered == updates, "the writer's requests were not all answered")
            #expect(readerDone.wait(timeout: .now() + 120) == .success)
            #expect(clientDone.wait(timeout: .now() + 30) == .success)
            #expect(received.current == total, "the reading subscriber got \(received.current) of \(total) changes: \(daemon.stderrTail())")
            #expect(reads.current.ok > 0 && reads.current.bad == 0, "reads during the writes: \(reads.current)")

            let journalBytes = (try? FileManager.default.attributesOfItem(atPath: JournalSupport.journal(daemon.dataDir).path)[.size] as? Int) ?? 0
            #expect(journalBytes > 120_000_000, "the journal has \(journalBytes) bytes")
            // Measured: 60-85 MB over the baseline at the peak with or without subscribers (40 KB
            // lines in flight, the feed's 16 MiB of recent batches, allocator arenas), the same after
            // 80, 160 or 320 MB, and 10-15 MB more over a second half of 60 MB. Keeping what the
            // stuck subscriber is owed would add 120 MB, 60 MB of them in the second half.
            let peak = try #require(daemon.peakRSSKiB())
            #expect(peak - baseline < 150 * 1024, "RSS grew from \(baseline) KiB to a peak of \(peak) KiB while the stuck subscriber was owed \(journalBytes) bytes")
            // Under load from other processes the allocator keeps a little more (up to 36 MB seen);
            // what matters is that the growth stays well below the 60 MB owed over that half.
            #expect(end - halfway < 45 * 1024, "RSS grew from \(halfway) KiB to \(end) KiB over the second 60 MB")

            // The stuck one got what fits its window and the socket buffers, no more; it is still
            // owed the rest (or was let go with a logged reason).
            let subscribers = try Replicas.replication(daemon)["subscribers"] as? [[String: Any]] ?? []
            let laggard = subscribers.first { ($0["lagRecords"] as? Int ?? 0) > 0 }
            if let laggard {
                let sent = laggard["sentSequence"] as? Int ?? -1
                #expect(sent >= 0 && sent < users + updates / 8, "the stuck subscriber was sent up to record \(sent) of \(total): \(laggard)")
                #expect((laggard["lagBytes"] as? Int ?? 0) > 100_000_000, "\(laggard)")
            } else {
                #expect(daemon.stderrText.contains("disconnecting subscriber"), "the stuck subscriber is neither lagging nor let go: \(subscribers)")
            }
            stuck.abort()
        }
    }
}
