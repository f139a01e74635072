import Foundation
import RPCEntities
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Helpers for the durability tests: a data directory that outlives daemons, bulk creates, lists.
enum JournalSupport {
    /// A fresh temporary data directory (not created); remove it with `remove`.
    static func makeDataDir() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-journal-\(UUID().uuidString)", isDirectory: true)
    }

    static func remove(_ dir: URL) { try? FileManager.default.removeItem(at: dir) }

    static func journal(_ dir: URL) -> URL { dir.appendingPathComponent("journal.jsonl") }

    /// Creates users `prefix0..<count` pipelined in one write; returns the ids acknowledged with a Result.
    @discardableResult
    static func createUsers(port: Int, prefix: String = "u", range: Range<Int>) throws -> [String] {
        let client = try LineClient(port: port, timeout: 30)
        var text = ""
        for i in range { text += Wire.createUser("r\(i)", "\(prefix)\(i)", "User \(i)", "\(prefix)\(i)@example.com") + "\n" }
        try client.send(text)
        var acked: [String] = []
        for i in range {
            let line = try client.expectLine()
            #expect(line == Wire.createUserResult("r\(i)", "\(prefix)\(i)", "User \(i)", "\(prefix)\(i)@example.com"), "reply: \(line.prefix(300))")
            acked.append("\(prefix)\(i)")
        }
        return acked
    }

    /// Creates users ten at a time from `next` on (moving it) until `done` holds, or 10,000 are
    /// made: enough to reach a compaction the test waits for, and no more.
    static func createUsers(port: Int, from next: inout Int, until done: () -> Bool) throws {
        while !done() && next < 10_000 {
            try createUsers(port: port, range: next..<(next + 10))
            next += 10
        }
    }

    /// Every user id, read with one `listUsers`.
    static func userIDs(port: Int) throws -> Set<String> {
        let client = try LineClient(port: port, timeout: 30)
        let reply = try Reply(try client.request(Wire.request("list", "user.listUsers")))
        guard let ids = reply.listIDs("users") else { throw HarnessError("listUsers reply without users: \(reply.line.prefix(300))") }
        return Set(ids)
    }

    /// Starts `rpcd serve` on `dir` expecting it to fail; returns (status, stderr).
    static func failingStart(_ dir: URL, extra: [String] = []) throws -> ProcessOutcome {
        try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir.path] + extra, timeout: 20)
    }

    /// `covered` sealed as README says: `,"crc":"<CRC-32C of covered, 8 lowercase hex digits>"}`.
    static func sealed(_ covered: String) -> String {
        let digits = String(CRC32C.checksum(covered.utf8), radix: 16)
        return covered + #","crc":""# + String(repeating: "0", count: 8 - digits.count) + digits + #""}"#
    }

    /// Creates `dir` with a journal of `records` user creates whose ids are UUIDs (no daemon
    /// needed): the memory tests' data, whose replay parses the ids on a second thread and sorts them.
    static func writeUUIDJournal(_ dir: URL, records: Int) throws {
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        var journal = ""
        journal.reserveCapacity(records * 180)
        for seq in 1...records {
            let id = UUID().uuidString.lowercased()
            journal += sealed(
                #"{"id":"r\#(seq)","method":"user.createUser","param":{"id":"\#(id)","name":"User \#(seq)","email":"u\#(seq)@example.com"},"seq":\#(seq)"#)
            journal += "\n"
        }
        try journal.write(to: Self.journal(dir), atomically: false, encoding: .utf8)
    }

    /// Whether `daemon` holds at most 0.7 of its peak RSS: about 0.6 after it gave the pages it
    /// freed back (`malloc_trim`), 0.8 and more when glibc kept them (measured on 300,000 users).
    static func gaveBackFreedMemory(_ daemon: DaemonProcess) throws -> (Bool, String) {
        let resident = try #require(daemon.rssKiB())
        let peak = try #require(daemon.peakRSSKiB())
        return (resident * 10 <= peak * 7, "RSS \(resident) KiB after a peak of \(peak) KiB")
    }

    static func lines(_ url: URL) throws -> [String] {
        try String(contentsOf: url, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }
}
