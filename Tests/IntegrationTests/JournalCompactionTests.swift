import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("journal: compaction, and kill -9 at every step of it")
struct JournalCompactionTests {
    /// Creates users in batches of 20 until the daemon stops answering; returns the ids acknowledged.
    private func createUntilGone(_ daemon: DaemonProcess, max: Int) -> [String] {
        var acked: [String] = []
        guard let client = try? LineClient(port: daemon.port, timeout: 10) else { return acked }
        var next = 0
        while next < max {
            var text = ""
            for i in next..<(next + 20) { text += Wire.createUser("r\(i)", "u\(i)", "User \(i)", "u\(i)@example.com") + "\n" }
            guard (try? client.send(text)) != nil else { break }
            for i in next..<(next + 20) {
                guard let line = try? client.readLine() else { return acked }
                if line == Wire.createUserResult("r\(i)", "u\(i)", "User \(i)", "u\(i)@example.com") { acked.append("u\(i)") }
            }
            next += 20
        }
        return acked
    }

    @Test(
        "SIGKILL at a named point of compaction (test hook): restart has every acknowledged mutation",
        arguments: ["compaction-rotated", "compaction-snapshot-written", "compaction-snapshot-renamed", "compaction-journal-renamed"])
    func crashDuringCompaction(_ point: String) throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(
            extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir, environment: ["RPCD_TEST_CRASH_AT": point])
        let acked = createUntilGone(first, max: 5000)
        #expect(first.waitForExit(timeout: 10) == 99, "the hook did not stop rpcd at \(point): \(first.stderrTail())")
        #expect(!acked.isEmpty)

        let second = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir)
        defer { second.stop() }
        let ids = try JournalSupport.userIDs(port: second.port)
        #expect(ids.isSuperset(of: acked), "lost \(Set(acked).subtracting(ids).count) acknowledged users after a crash at \(point): \(second.stderrTail())")
        // And it keeps working: more creates, another restart.
        try JournalSupport.createUsers(port: second.port, prefix: "v", range: 0..<500)
        second.stop()
        let third = try DaemonProcess(dataDir: dir)
        defer { third.stop() }
        #expect(try JournalSupport.userIDs(port: third.port).count == ids.count + 500, "stderr: \(third.stderrTail())")
    }

    @Test("past the threshold the journal is compacted into a snapshot; SIGKILL after it loses nothing")
    func compactionThenKill() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let first = try DaemonProcess(extraArguments: ["--compact-after-bytes", "20000"], dataDir: dir)
        var acked = try JournalSupport.createUsers(port: first.port, range: 0..<1500)
        // Updates and deletes go through compaction too.
        let c = try LineClient(port: first.port)
        #expect(try c.request(Wire.request("d", "user.deleteUser", #"{"userId":"u7"}"#)).contains("deleteUserResult"))
        #expect(try c.request(Wire.addBuilding("b", "b1", "Tower", "1 Main St", ["u1", "u2"])).contains("addBuildingResult"))
        acked.removeAll { $0 == "u7" }
        acked += try JournalSupport.createUsers(port: first.port, prefix: "w", range: 0..<500)
        // Compaction runs in the background; wait until one has finished.
        let deadline = Date().addingTimeInterval(10)
        while !first.stderrText.contains("compacted") && Date() < deadline { usleep(20_000) }
        #expect(first.stderrText.contains("compacted"), "no compaction logged: \(first.stderrTail())")
        let snapshot = dir.appendingPathComponent("snapshot.jsonl")
        #expect(FileManager.default.fileExists(atPath: snapshot.path))
        let journalSize = (try? FileManager.default.attributesOfItem(atPath: JournalSupport.journal(dir).path)[.size] as? Int) ?? -1
        #expect(journalSize < 200_000, "journal not restarted: \(journalSize) bytes")
        first.stop()

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == Set(acked), "stderr: \(second.stderrTail())")
        let b = try LineClient(port: second.port).request(Wire.request("g", "building.getBuilding", #"{"buildingId":"b1"}"#))
        #expect(b == Wire.result("g", "building.getBuilding", Wire.building("b1", "Tower", "1 Main St", ["u1", "u2"])))
    }

    @Test("SIGTERM during a compaction lets it finish: the next start has nothing to redo")
    func stopLetsCompactionFinish() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        // The compaction waits 4 s before it writes its snapshot (test hook), so it is still under
        // way when the stop comes; the daemon waits up to 5 s for it.
        let first = try DaemonProcess(
            extraArguments: ["--compact-after-bytes", "20000", "--fsync", "none"], dataDir: dir,
            environment: ["RPCD_TEST_COMPACTION_DELAY_MS": "4000"])
        // Users in batches of 20 until the compaction has started (journal.next.jsonl exists),
        // watched from this thread, so the stop comes within a batch of its start whatever the
        // machine's load.
        let next = dir.appendingPathComponent("journal.next.jsonl").path
        let started = Locked(false)
        let acked = Locked<[String]>([])
        let writer = DispatchGroup()
        let port = first.port
        writer.enter()
        DispatchQueue.global().async {
            defer { writer.leave() }
            for batch in 0..<100 where !started.current {
                guard let ids = try? JournalSupport.createUsers(port: port, range: (batch * 20)..<(batch * 20 + 20)) else { return }
                acked.withLock { $0 += ids }
            }
        }
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: next) && Date() < deadline { usleep(2_000) }
        started.withLock { $0 = true }
        #expect(writer.wait(timeout: .now() + 60) == .success)
        #expect(FileManager.default.fileExists(atPath: next), "no compaction started: \(first.stderrTail())")
        first.terminate()
        #expect(first.waitForExit(timeout: 20) == 0, "\(first.stderrTail())")
        #expect(first.stderrText.contains("letting the compaction under way finish"), "\(first.stderrTail())")
        #expect(first.stderrText.contains("compacted: snapshot"), "\(first.stderrTail())")
        #expect(!FileManager.default.fileExists(atPath: next), "the stop left the compaction unfinished: \(first.stderrTail())")

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == Set(acked.current), "stderr: \(second.stderrTail())")
        #expect(!second.stderrText.contains("finishing a compaction"), "\(second.stderrTail())")
    }
}
