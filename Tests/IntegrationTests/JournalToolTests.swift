import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("journal tools: rpcd repair limits, rpcd journal check and dump")
struct JournalToolTests {
    private func rpcd(_ arguments: [String]) throws -> ProcessOutcome {
        try runProcess(try Binaries.rpcd(), arguments)
    }

    private func oneLine(_ text: String) -> String { text.trimmingCharacters(in: .whitespacesAndNewlines) }

    /// A data directory with a snapshot (compacted at a small threshold) and journal records after it.
    private func compactedDirectory() throws -> (dir: URL, users: Set<String>) {
        let dir = JournalSupport.makeDataDir()
        let daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "4096"], dataDir: dir)
        var users = Set(try JournalSupport.createUsers(port: daemon.port, range: 0..<60))
        #expect(daemon.stderrEventually(contains: "compacted", timeout: 10), "no compaction: \(daemon.stderrTail())")
        users.formUnion(try JournalSupport.createUsers(port: daemon.port, prefix: "w", range: 0..<5))
        let c = try LineClient(port: daemon.port)
        #expect(try c.request(Wire.request("d", "user.deleteUser", #"{"userId":"u7"}"#)).contains("deleteUserResult"))
        #expect(try c.request(Wire.request("n", "user.updateUser", #"{"userId":"u8","newName":"Eight"}"#)).contains("updateUserResult"))
        #expect(try c.request(Wire.addBuilding("b", "b1", "Tower", "1 Main St", ["u1", "w2"])).contains("addBuildingResult"))
        users.remove("u7")
        daemon.stop()
        return (dir, users)
    }

    /// Everything a client can list, as reply lines.
    private func listing(port: Int) throws -> [String] {
        let c = try LineClient(port: port)
        return [try c.request(Wire.request("l", "user.listUsers")), try c.request(Wire.request("b", "building.listBuildings"))]
    }

    @Test("rpcd repair on a directory that does not exist says so, exits 1 and does not create it")
    func repairMissingDirectory() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        for command in [["repair"], ["journal", "check"], ["journal", "dump"]] {
            let out = try rpcd(command + ["--data-dir", dir.path])
            #expect(out.status == 1, "\(command): \(out.stderr)")
            #expect(oneLine(out.stderr).contains("data directory \(dir.path) does not exist") && !oneLine(out.stderr).contains("\n"), "\(out.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dir.path), "\(command) created the directory")
        }
    }

    @Test("snapshot deleted: the start refuses, rpcd repair (even --force) refuses with one line and keeps the journal")
    func repairRefusesWithoutSnapshot() throws {
        let (dir, _) = try compactedDirectory()
        defer { JournalSupport.remove(dir) }
        try FileManager.default.removeItem(at: dir.appendingPathComponent("snapshot.jsonl"))
        let journal = JournalSupport.journal(dir)
        let before = try Data(contentsOf: journal)
        let start = try JournalSupport.failingStart(dir)
        #expect(start.status == 1 && start.stderr.contains("\(journal.path):1: the journal starts at sequence number"), "\(start.stderr)")
        for force in [[], ["--force"]] {
            let repair = try rpcd(["repair", "--data-dir", dir.path] + force)
            #expect(repair.status == 1, "repair \(force): \(repair.stdout) \(repair.stderr)")
            #expect(oneLine(repair.stderr).contains("there is no snapshot") && !oneLine(repair.stderr).contains("\n"), "\(repair.stderr)")
            #expect(try Data(contentsOf: journal) == before, "repair \(force) changed the journal")
        }
        let check = try rpcd(["journal", "check", "--data-dir", dir.path])
        #expect(check.status == 1 && check.stdout.hasPrefix("\(journal.path):1: the journal starts at sequence number"), "\(check.stdout)")
    }

    @Test("damage that runs to the end (a bad last line, then NULs) is cut without --force, with a backup; the start has the rest")
    func repairCutsDamageAtTheEnd() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let daemon = try DaemonProcess(dataDir: dir)
        try JournalSupport.createUsers(port: daemon.port, range: 0..<4)
        daemon.stop()
        let journal = JournalSupport.journal(dir)
        var bytes = try [UInt8](Data(contentsOf: journal))
        bytes[bytes.count - 30] ^= 0x01  // in the last line's seq or seal
        let kept = bytes.count - (try JournalSupport.lines(journal)[3].utf8.count + 1)
        try Data(bytes + [UInt8](repeating: 0, count: 500) + [0x0A] + [UInt8](repeating: 0, count: 100)).write(to: journal)

        let repair = try rpcd(["repair", "--data-dir", dir.path])
        #expect(repair.status == 0, "repair: \(repair.stdout) \(repair.stderr)")
        #expect(repair.stdout.contains("\(journal.path):4: checksum mismatch") && repair.stdout.contains("cut from this line"), "\(repair.stdout)")
        #expect(try Data(contentsOf: journal).count == kept)
        let backups = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasPrefix("journal.jsonl.cut-") }
        #expect(backups.count == 1, "\(backups)")
        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == ["u0", "u1", "u2"])
    }

    @Test("rpcd journal check: 0 and a summary when intact; 1 and the first problem as FILE:LINE for a flip, a gap, a duplicate; 2 for usage")
    func checkExitCodes() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let daemon = try DaemonProcess(dataDir: dir)
        try JournalSupport.createUsers(port: daemon.port, range: 0..<4)
        // While the daemon runs, check reads without the lock.
        let live = try rpcd(["journal", "check", "--data-dir", dir.path])
        #expect(live.status == 0 && live.stdout.contains("journal.jsonl seq 1...4 (4 records)"), "\(live.stdout) \(live.stderr)")
        daemon.stop()
        let journal = JournalSupport.journal(dir)
        let lines = try JournalSupport.lines(journal).filter { !$0.isEmpty }
        let intact = try rpcd(["journal", "check", "--data-dir", dir.path])
        #expect(intact.status == 0, "\(intact.stdout) \(intact.stderr)")
        #expect(oneLine(intact.stdout) == "rpcd journal check: \(dir.path) is intact: journal.jsonl seq 1...4 (4 records); 4 records in all, last seq 4")

        var flipped = lines
        flipped[2] = flipped[2].replacingOccurrences(of: "User 2", with: "User 3")
        let cases: [([String], String)] = [
            (flipped, "\(journal.path):3: checksum mismatch"),
            ([lines[0], lines[2], lines[3]], "\(journal.path):2: sequence number 3 after 1: record 2 is missing"),
            ([lines[0], lines[1], lines[1], lines[2]], "\(journal.path):3: duplicate sequence number 2"),
        ]
        for (text, problem) in cases {
            try (text.joined(separator: "\n") + "\n").write(to: journal, atomically: false, encoding: .utf8)
            let out = try rpcd(["journal", "check", "--data-dir", dir.path])
            #expect(out.status == 1, "\(problem): \(out.stdout) \(out.stderr)")
            #expect(out.stdout.hasPrefix(problem) && !oneLine(out.stdout).contains("\n"), "\(out.stdout)")
        }
        for usage in [["journal"], ["journal", "verify"], ["journal", "check", "--from-seq", "2"], ["journal", "dump", "--from-seq", "0"], ["journal", "check", "--data-dir"]] {
            let out = try rpcd(usage)
            #expect(out.status == 2, "\(usage): \(out.stderr)")
            #expect(out.stderr.hasPrefix("rpcd: ") && !oneLine(out.stderr).contains("\n"), "\(usage): \(out.stderr)")
        }
    }

    @Test("rpcd journal dump (snapshot and journal) piped into a fresh daemon rebuilds the same state; --ndjson and --from-seq")
    func dumpReplaysIntoFreshDaemon() throws {
        let (dir, users) = try compactedDirectory()
        defer { JournalSupport.remove(dir) }
        #expect(FileManager.default.fileExists(atPath: dir.appendingPathComponent("snapshot.jsonl").path))
        let dump = try rpcd(["journal", "dump", "--data-dir", dir.path])
        #expect(dump.status == 0, "dump: \(dump.stderr)")
        let requests = dump.stdout.split(separator: "\n").map(String.init)
        #expect(requests.allSatisfy { !$0.contains(#""seq""#) && !$0.contains(#""crc""#) }, "\(requests.prefix(3))")

        let original = try DaemonProcess(dataDir: dir)
        defer { original.stop() }
        let fresh = try DaemonProcess()
        defer { fresh.stop() }
        let client = try LineClient(port: fresh.port, timeout: 30)
        try client.send(requests.joined(separator: "\n") + "\n")  // what `| nc` does
        for line in try client.readLines(requests.count) {
            #expect(!line.contains("error.error"), "replay reply: \(line)")
        }
        #expect(try JournalSupport.userIDs(port: fresh.port) == users)
        #expect(try listing(port: fresh.port) == listing(port: original.port))

        let ndjson = try rpcd(["journal", "dump", "--ndjson", "--data-dir", dir.path])
        let objects = ndjson.stdout.split(separator: "\n")
        #expect(ndjson.status == 0 && objects.count == requests.count, "\(ndjson.stderr)")
        #expect(objects.last.map { $0.hasPrefix(#"{"seq":"#) && $0.contains(#""file":"journal.jsonl","line":"#) && $0.contains(#""method":"building.addBuilding""#) } == true, "\(objects.last ?? "")")

        // From a seq the journal holds: only the records from there on.
        let lastSeq = objects.last.flatMap { $0.split(separator: ",").first?.split(separator: ":").last }.flatMap { Int($0) } ?? 0
        let tail = try rpcd(["journal", "dump", "--from-seq", "\(lastSeq - 1)", "--data-dir", dir.path])
        #expect(tail.status == 0 && tail.stdout.split(separator: "\n").map(String.init) == Array(requests.suffix(2)), "\(tail.stdout) \(tail.stderr)")
        let covered = try rpcd(["journal", "dump", "--from-seq", "2", "--data-dir", dir.path])
        #expect(covered.status == 1 && covered.stdout.isEmpty && covered.stderr.contains("only in the snapshot"), "\(covered.stderr)")
    }
}
