import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("journal: recovery after kill -9, torn tails, corruption, repair")
struct JournalRecoveryTests {
    @Test("1000 acknowledged creates survive SIGKILL and a restart on the same data dir", arguments: ["always", "everysec", "none"])
    func acknowledgedSurviveKill(_ policy: String) throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(extraArguments: ["--fsync", policy], dataDir: dir)
        let acked = try JournalSupport.createUsers(port: first.port, range: 0..<1000)
        #expect(acked.count == 1000)
        first.stop()  // SIGKILL

        let second = try DaemonProcess(extraArguments: ["--fsync", policy], dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == Set(acked), "stderr: \(second.stderrTail())")
        #expect(second.stderrText.contains("loaded 1000 records"), "no load line: \(second.stderrTail())")
    }

    @Test("with --group-commit-delay, creates pipelined on 4 connections at once are all acknowledged, and every acknowledged one survives SIGKILL")
    func groupCommitDelayKeepsThePromise() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(extraArguments: ["--group-commit-delay", "20ms"], dataDir: dir)
        // A lone create finds the writer idle: answered (the delay only applies between batches).
        _ = try JournalSupport.createUsers(port: first.port, prefix: "lone", range: 0..<1)
        let acked = Locked<[String]>([])
        let port = first.port
        let finished = runOnThreads(4) { worker in
            do {
                let ids = try JournalSupport.createUsers(port: port, prefix: "w\(worker)-", range: 0..<500)
                acked.withLock { $0 += ids }
            } catch {
                Issue.record("worker \(worker): \(error)")
            }
        }
        #expect(finished)
        #expect(acked.current.count == 2000)
        first.stop()  // SIGKILL

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == Set(acked.current + ["lone0"]), "stderr: \(second.stderrTail())")
    }

    @Test("--group-commit-delay with --fsync none starts with a warning that it has no effect")
    func groupCommitDelayWithoutFsyncWarns() throws {
        try withDaemon(extraArguments: ["--fsync", "none", "--group-commit-delay", "2ms"]) { daemon in
            #expect(daemon.stderrText.contains("warning group_commit_delay has no effect with fsync none"), "stderr: \(daemon.stderrTail())")
        }
    }

    @Test("the journal is canonical request lines with id r<seq>, a seq and a trailing crc, replayable as they are")
    func journalFormat() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        try withDaemon(extraArguments: ["--data-dir", dir.path]) { daemon in
            let c = try LineClient(port: daemon.port)
            _ = try c.request(Wire.createUser("1", "u1", "Ada", "ada@example.com"))
            _ = try c.request(Wire.getUser("2", "u1"))  // reads are never journaled
            _ = try c.request(Wire.request("3", "user.updateUser", #"{"userId":"u1","newName":"Ada L"}"#))
        }
        let lines = try JournalSupport.lines(JournalSupport.journal(dir))
        #expect(lines == [
            JournalSupport.sealed(#"{"id":"r1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"},"seq":1"#),
            JournalSupport.sealed(#"{"id":"r2","method":"user.updateUser","param":{"userId":"u1","newName":"Ada L"},"seq":2"#),
            "",
        ])
    }

    /// The journal's last byte, nil for an empty or missing file.
    private static func lastByte(_ url: URL) -> UInt8? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let end = try? handle.seekToEnd(), end > 0 else { return nil }
        try? handle.seek(toOffset: end - 1)
        return (try? handle.read(upToCount: 1))?.first
    }

    /// Whether every warning in `stderr` is one a kill -9 under load may leave: a record cut
    /// short mid-write (rare: the kill must land inside a batch's write, between two of its
    /// pages), or a compaction under way.
    private static func onlyKillWarnings(_ stderr: String) -> Bool {
        stderr.split(separator: "\n").allSatisfy {
            !$0.contains(" warning ") || $0.contains("bytes of an incomplete last record") || $0.contains("compaction cut short by a crash")
        }
    }

    /// Creates `count` users on each of `connections` connections, one request at a time each
    /// (many small batches in a row, as 50 × 1 writers make), on background threads; each
    /// acknowledged id goes into `acked`. Ends early when the daemon goes away.
    private static func load(port: Int, prefix: String, connections: Int, count: Int, acked: Locked<[String]>) -> BackgroundJob<Bool> {
        BackgroundJob {
            runOnThreads(connections) { c in
                guard let client = try? LineClient(port: port, timeout: 30) else { return }
                for i in 0..<count {
                    let id = "\(prefix)\(c)-\(i)"
                    guard let reply = try? client.request(Wire.createUser(id, id, "U", "\(id)@example.com")),
                        reply.contains("createUserResult")
                    else { return }
                    acked.withLock { $0.append(id) }
                }
            }
        }
    }

    @Test("under a sustained load the writer keeps spaces ahead of the journal's end and cuts them once idle; kill -9 leaves them, and a start drops them quietly, every acknowledged record kept")
    func spacesAhead() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let journal = JournalSupport.journal(dir)
        let first = try DaemonProcess(dataDir: dir)
        let space = UInt8(ascii: " ")

        // A load, then idle: the spaces were there while it ran, and are cut after it.
        let acked = Locked<[String]>([])
        let load = Self.load(port: first.port, prefix: "a", connections: 8, count: 1500, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { Self.lastByte(journal) == space }, "no spaces ahead under load")
        #expect(load.wait(timeout: 120) == true)
        #expect(acked.current.count == 8 * 1500)
        #expect(eventually(timeout: 5, every: 0.001) { Self.lastByte(journal) == UInt8(ascii: "\n") }, "the spaces were not cut once idle")

        // kill -9 under load: the spaces stay, and every acknowledged record comes back, with no warning.
        let running = Self.load(port: first.port, prefix: "k", connections: 8, count: 100_000, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { Self.lastByte(journal) == space }, "no spaces ahead under the second load")
        first.stop()  // SIGKILL
        _ = running.wait(timeout: 60)
        // Almost always still there; unless the load stalled 20 ms (a loaded CI) and they were cut.
        let leftSpaces = Self.lastByte(journal) == space

        let second = try DaemonProcess(dataDir: dir)
        let ids = try JournalSupport.userIDs(port: second.port)
        let expected = Set(acked.current)
        #expect(ids.isSuperset(of: expected), "lost \(expected.subtracting(ids).count) acknowledged")
        let stderr = second.stderrText
        #expect(stderr.contains("spaces written ahead") == leftSpaces && Self.onlyKillWarnings(stderr), "stderr: \(second.stderrTail())")
        #expect(Self.lastByte(journal) == UInt8(ascii: "\n"))

        // A clean stop under load cuts them too.
        let third = Self.load(port: second.port, prefix: "t", connections: 8, count: 100_000, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { Self.lastByte(journal) == space }, "no spaces ahead under the third load")
        second.terminate()  // SIGTERM: answers what it read, then stops
        #expect(second.waitForExit(timeout: 20) == 0, "stderr: \(second.stderrTail())")
        _ = third.wait(timeout: 60)
        #expect(Self.lastByte(journal) == UInt8(ascii: "\n"), "a clean stop left the spaces")
        let fourth = try DaemonProcess(dataDir: dir)
        defer { fourth.stop() }
        let all = try JournalSupport.userIDs(port: fourth.port)
        #expect(all.isSuperset(of: Set(acked.current)) && !fourth.stderrText.contains("spaces written ahead"), "stderr: \(fourth.stderrTail())")
    }

    @Test("one client creating one user at a time (the writer idle between batches) gets spaces ahead too, cut once it pauses; every create is kept")
    func spacesAheadForOneClient() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let journal = JournalSupport.journal(dir)
        let daemon = try DaemonProcess(dataDir: dir)
        let acked = Locked<[String]>([])
        // A drain of the writer holds one batch here: counted per drain, no load was ever sustained.
        let load = Self.load(port: daemon.port, prefix: "o", connections: 1, count: 100_000, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { Self.lastByte(journal) == UInt8(ascii: " ") }, "no spaces ahead under one client's load")
        daemon.stop()  // SIGKILL
        _ = load.wait(timeout: 60)

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port).isSuperset(of: Set(acked.current)), "stderr: \(second.stderrTail())")
        let few = Self.load(port: second.port, prefix: "p", connections: 1, count: 50, acked: acked)
        #expect(few.wait(timeout: 60) == true)
        #expect(eventually(timeout: 5, every: 0.001) { Self.lastByte(journal) == UInt8(ascii: "\n") }, "the spaces were not cut once idle")
    }

    @Test("a journal rotated under load (compaction) is cut to its last line before the next one starts: stopped right after the rotation (test hook), it ends in a newline")
    func spacesCutAtRotation() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(
            extraArguments: ["--compact-after-bytes", "1MiB"], dataDir: dir, environment: ["RPCD_TEST_CRASH_AT": "compaction-rotated"])
        let acked = Locked<[String]>([])
        let load = Self.load(port: first.port, prefix: "r", connections: 8, count: 100_000, acked: acked)
        #expect(first.waitForExit(timeout: 60) == 99, "the hook did not stop rpcd at the rotation: \(first.stderrTail())")
        _ = load.wait(timeout: 60)
        #expect(acked.current.count > 1000, "too few creates before the rotation for spaces ahead: \(acked.current.count)")
        #expect(Self.lastByte(JournalSupport.journal(dir)) == UInt8(ascii: "\n"), "the rotated journal kept its spaces")

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port).isSuperset(of: Set(acked.current)), "stderr: \(second.stderrTail())")
    }

    @Test("spaces ahead and compaction: journals rotated under load end in lines, and kill -9 in the middle of it loses no acknowledged record")
    func spacesAheadAcrossCompactions() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let journal = JournalSupport.journal(dir)
        let first = try DaemonProcess(extraArguments: ["--compact-after-bytes", "256KiB"], dataDir: dir)
        let acked = Locked<[String]>([])
        let load = Self.load(port: first.port, prefix: "c", connections: 8, count: 1500, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { Self.lastByte(journal) == UInt8(ascii: " ") }, "no spaces ahead under load")
        #expect(load.wait(timeout: 120) == true)
        #expect(first.stderrEventually(contains: "compacted: snapshot at seq", timeout: 10), "no compaction: \(first.stderrTail())")
        #expect(eventually(timeout: 5, every: 0.001) { Self.lastByte(journal) == UInt8(ascii: "\n") }, "the spaces were not cut once idle")

        let running = Self.load(port: first.port, prefix: "d", connections: 8, count: 100_000, acked: acked)
        #expect(eventually(timeout: 30, every: 0.001) { acked.current.count > 8 * 1500 + 4000 })
        first.stop()  // SIGKILL, compactions under way or not
        _ = running.wait(timeout: 60)

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        let ids = try JournalSupport.userIDs(port: second.port)
        let expected = Set(acked.current)
        #expect(ids.isSuperset(of: expected), "lost \(expected.subtracting(ids).count) acknowledged")
        #expect(Self.onlyKillWarnings(second.stderrText), "stderr: \(second.stderrTail())")
    }

    @Test("an incomplete last line is cut off with a warning naming the file and the bytes; data intact")
    func tornTail() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(dataDir: dir)
        let acked = try JournalSupport.createUsers(port: first.port, range: 0..<20)
        first.stop()
        let journal = JournalSupport.journal(dir)
        let garbage = #"{"id":"x","method":"user.createUser","param":{"id":"#
        let handle = try FileHandle(forWritingTo: journal)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data(garbage.utf8))
        try handle.close()

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == Set(acked))
        let stderr = second.stderrText
        #expect(stderr.contains("warning") && stderr.contains(journal.path) && stderr.contains("dropped \(garbage.utf8.count) bytes"), "stderr: \(stderr)")
        #expect(try String(contentsOf: journal, encoding: .utf8).hasSuffix("}\n"))
        // The journal takes new records after the cut.
        try JournalSupport.createUsers(port: second.port, prefix: "v", range: 0..<5)
    }

    @Test("a corrupt middle line stops the start with FILE:LINE; rpcd repair refuses to discard the intact lines after it; --force cuts (with a backup) and the start works")
    func corruptMiddleLineAndRepair() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(dataDir: dir)
        try JournalSupport.createUsers(port: first.port, range: 0..<10)
        first.stop()
        let journal = JournalSupport.journal(dir)
        var lines = try JournalSupport.lines(journal)
        lines[4] = #"{"id":"r4","method":"user.createUser","param":{"id":"u4","na"#  // line 5, truncated JSON
        try lines.joined(separator: "\n").write(to: journal, atomically: false, encoding: .utf8)
        let damaged = try Data(contentsOf: journal)

        let failed = try JournalSupport.failingStart(dir)
        #expect(failed.status == 1, "status \(String(describing: failed.status)), stderr: \(failed.stderr)")
        #expect(failed.stderr.contains("\(journal.path):5: checksum mismatch"), "stderr: \(failed.stderr)")
        #expect(failed.stderr.contains("rpcd repair --data-dir \(dir.path)"), "stderr: \(failed.stderr)")
        #expect(!failed.stderr.contains("listening on"))

        // Five intact records follow line 5: without --force, repair discards nothing.
        let refused = try runProcess(try Binaries.rpcd(), ["repair", "--data-dir", dir.path])
        #expect(refused.status == 1, "repair: \(refused.stdout) \(refused.stderr)")
        let message = refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(message.contains("\(journal.path):5: ") && message.contains("5 intact record(s) follow it (the first at \(journal.path):6)") && message.contains("--force"), "\(message)")
        #expect(!message.contains("\n"), "\(message)")
        #expect(try Data(contentsOf: journal) == damaged, "repair without --force changed the journal")

        let repair = try runProcess(try Binaries.rpcd(), ["repair", "--force", "--data-dir", dir.path])
        #expect(repair.status == 0, "repair: \(repair.stdout) \(repair.stderr)")
        let backups = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("journal.jsonl.cut-") }
        #expect(backups.count == 1, "cut backups: \(backups)")
        if let backup = backups.first {
            let cut = try String(contentsOf: dir.appendingPathComponent(backup), encoding: .utf8)
            #expect(cut.hasPrefix(lines[4]) && cut.contains(#""id":"u9""#), "backup: \(cut)")
        }

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == ["u0", "u1", "u2", "u3"])
    }

    /// TSan's allocator is not glibc's: there is nothing for malloc_trim to give back under it.
    @Test(
        "a restart gives back what its replay freed: once listening, the daemon holds well under its replay's peak",
        .enabled(if: ProcessInfo.processInfo.environment["TSAN_OPTIONS"] == nil))
    func restartReleasesReplayMemory() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        // 300,000 records put what the replay frees well above the daemon's own memory.
        try JournalSupport.writeUUIDJournal(dir, records: 300_000)
        try withDaemon(extraArguments: ["--data-dir", dir.path, "--fsync", "none"]) { daemon in
            let c = try LineClient(port: daemon.port, timeout: 30)
            let stats = try c.request(Wire.request("s", "system.stats"))
            #expect(stats.contains(#""users":300000"#), "\(stats.prefix(400))")
            let (gaveBack, figures) = try JournalSupport.gaveBackFreedMemory(daemon)
            #expect(gaveBack, "\(figures) during the replay")
        }
    }

    @Test("a second daemon on the same data dir is refused with one line")
    func secondDaemonRefused() throws {
        try withDaemon { daemon in
            let out = try JournalSupport.failingStart(daemon.dataDir)
            #expect(out.status == 1, "status \(String(describing: out.status)), stderr: \(out.stderr)")
            let message = out.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(message.contains("in use by another rpcd (pid \(daemon.pid))") && !message.contains("\n"), "stderr: \(out.stderr)")
        }
    }

    @Test("a read-only data dir, or one that cannot be created, gives a clear one-line error")
    func readOnlyDataDir() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o555])
        // root ignores permissions: drop to nobody with setpriv to see what a normal user sees.
        var command = [try Binaries.rpcd().path]
        if geteuid() == 0 {
            guard let setpriv = Binaries.onPath("setpriv") else { return }
            command = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] + command
        }
        for (path, expected) in [(dir.path, "is not writable"), (dir.path + "/sub/data", "cannot create data directory")] {
            let out = try runProcess(
                URL(fileURLWithPath: command[0]), Array(command.dropFirst()) + ["serve", "--listen", "127.0.0.1:0", "--data-dir", path])
            #expect(out.status == 1, "status \(String(describing: out.status)), stderr: \(out.stderr)")
            let message = out.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(message.contains(expected) && message.contains(path) && !message.contains("\n"), "stderr: \(out.stderr)")
        }
    }
}
