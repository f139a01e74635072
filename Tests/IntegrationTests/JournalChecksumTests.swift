import Foundation
import RPCEntities
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real binary against damaged journals. The byte-by-byte loops run in-process against the
/// pure replay (RPCEntitiesTests `JournalDamageTests`); these check what a start does with a few.
@Suite("journal: checksums at start, torn tails vs damage, journals from before checksums")
struct JournalChecksumTests {
    /// A data directory whose journal holds users u0, u1, u2 (one line each), written by rpcd.
    private func threeUserJournal() throws -> (dir: URL, journal: URL, lines: [String]) {
        let dir = JournalSupport.makeDataDir()
        let daemon = try DaemonProcess(dataDir: dir)
        try JournalSupport.createUsers(port: daemon.port, range: 0..<3)
        daemon.stop()
        let journal = JournalSupport.journal(dir)
        return (dir, journal, try JournalSupport.lines(journal).filter { !$0.isEmpty })
    }

    private func flip(_ url: URL, at offset: Int) throws {
        var bytes = try [UInt8](Data(contentsOf: url))
        bytes[offset] ^= 0x01
        try Data(bytes).write(to: url)
    }

    @Test("a flipped byte in the middle line (param, seq, seal) refuses to start with FILE:2: checksum mismatch, one line saying what to do")
    func middleLineFlipRefuses() throws {
        let (dir, journal, lines) = try threeUserJournal()
        defer { JournalSupport.remove(dir) }
        let original = try Data(contentsOf: journal)
        let start = lines[0].utf8.count + 1
        let middle = lines[1]
        // In the param, in the seq digits, in the "crc" key, in the hex digits.
        let targets = [middle.utf8.count / 3, middle.utf8.count - 22, middle.utf8.count - 15, middle.utf8.count - 5]
        for target in targets {
            try original.write(to: journal)
            try flip(journal, at: start + target)
            let out = try JournalSupport.failingStart(dir)
            #expect(out.status == 1, "byte \(target): status \(String(describing: out.status)), stderr: \(out.stderr)")
            let message = out.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(message.contains("\(journal.path):2: checksum mismatch"), "byte \(target): \(message)")
            #expect(message.contains("rpcd journal check --data-dir \(dir.path)") && message.contains("rpcd repair --data-dir \(dir.path)"), "\(message)")
            #expect(!message.contains("\n") && !message.contains("listening on"), "\(message)")
        }
    }

    @Test("truncated inside the last line, inside its seal, or just before its newline: starts with the first two users and a warning")
    func truncationStartsWithPrefix() throws {
        let (dir, journal, lines) = try threeUserJournal()
        defer { JournalSupport.remove(dir) }
        let original = try Data(contentsOf: journal)
        let lastStart = lines[0].utf8.count + lines[1].utf8.count + 2
        for cut in [lastStart + 1, lastStart + lines[2].utf8.count - 10, original.count - 1] {
            try original.prefix(cut).write(to: journal)
            let daemon = try DaemonProcess(dataDir: dir)
            #expect(try JournalSupport.userIDs(port: daemon.port) == ["u0", "u1"], "cut at \(cut): \(daemon.stderrTail())")
            #expect(daemon.stderrText.contains("warning") && daemon.stderrText.contains("dropped \(cut - lastStart) bytes"), "cut at \(cut): \(daemon.stderrTail())")
            daemon.stop()
        }
    }

    @Test("NUL bytes after the last newline (a power cut) are cut at start with a warning and saved beside the journal; NULs before it refuse")
    func nulTailIsCutAndSaved() throws {
        let (dir, journal, _) = try threeUserJournal()
        defer { JournalSupport.remove(dir) }
        let records = try Data(contentsOf: journal)
        let partial = Data(#"{"id":"r4","method":"user.cre"#.utf8)
        let cases: [(tail: Data, users: Set<String>)] = [(Data(count: 4096), []), (Data(count: 4096), ["u0", "u1", "u2"]), (partial + Data(count: 512), ["u0", "u1", "u2"])]
        for (tail, users) in cases {
            let kept = users.isEmpty ? Data() : records
            try (kept + tail).write(to: journal)
            let daemon = try DaemonProcess(dataDir: dir)
            #expect(try JournalSupport.userIDs(port: daemon.port) == users, "\(daemon.stderrTail())")
            #expect(daemon.stderrText.contains("warning") && daemon.stderrText.contains("dropped \(tail.count) bytes after the last newline"), "\(daemon.stderrTail())")
            daemon.stop()
            #expect(try Data(contentsOf: journal) == kept, "the file ends after the last record")
            let saved = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains(".torn-") }
            #expect(saved.count == 1, "\(saved)")
            if let name = saved.first {
                #expect(try Data(contentsOf: dir.appendingPathComponent(name)) == tail, "the cut bytes are kept whole")
                try FileManager.default.removeItem(at: dir.appendingPathComponent(name))
            }
        }
        // NULs and then a newline: damage before the last newline still refuses.
        let damaged = records + Data(count: 64) + Data("\n".utf8)
        try damaged.write(to: journal)
        let out = try JournalSupport.failingStart(dir)
        #expect(out.status == 1 && out.stderr.contains("\(journal.path):4:"), "status \(String(describing: out.status)), stderr: \(out.stderr)")
        #expect(try Data(contentsOf: journal) == damaged, "a refused start changed the journal")
    }

    @Test("a journal written before checksums loads; new lines are sealed after the old ones; it loads again")
    func oldJournalLoads() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let old = [
            #"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"},"seq":1}"#,
            #"{"id":"2","method":"user.createUser","param":{"id":"u2","name":"Bob","email":"bob@example.com"},"seq":2}"#,
            #"{"id":"3","method":"user.updateUser","param":{"userId":"u1","newName":"Ada L"},"seq":3}"#,
        ]
        let journal = JournalSupport.journal(dir)
        try (old.joined(separator: "\n") + "\n").write(to: journal, atomically: false, encoding: .utf8)

        let first = try DaemonProcess(dataDir: dir)
        #expect(try JournalSupport.userIDs(port: first.port) == ["u1", "u2"], "stderr: \(first.stderrTail())")
        #expect(try LineClient(port: first.port).request(Wire.getUser("g", "u1")).contains(#""name":"Ada L""#))
        try JournalSupport.createUsers(port: first.port, prefix: "v", range: 0..<1)
        first.stop()
        let lines = try JournalSupport.lines(journal)
        #expect(Array(lines.prefix(3)) == old)
        #expect(lines[3] == JournalSupport.sealed(#"{"id":"r4","method":"user.createUser","param":{"id":"v0","name":"User 0","email":"v0@example.com"},"seq":4"#))

        let check = try runProcess(try Binaries.rpcd(), ["journal", "check", "--data-dir", dir.path])
        #expect(check.status == 0 && check.stdout.contains("3 lines written before checksums"), "check: \(check.stdout) \(check.stderr)")
        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port) == ["u1", "u2", "v0"], "stderr: \(second.stderrTail())")
    }

    @Test("README's example journal line is sealed as README says")
    func readmeExample() throws {
        let root = try #require(packageRoot(), "no Package.swift above \(#filePath)")
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let example = try #require(readme.split(separator: "\n").first { $0.hasPrefix(#"{"id":"r42""#) && $0.contains(#""crc":""#) })
        let covered = String(example[..<example.range(of: #","crc":""#)!.lowerBound])
        #expect(JournalSupport.sealed(covered) == example)
        #expect(Array(example.utf8).withUnsafeBytes { JournalRecord.checksum(of: $0) } == .valid)
    }
}
