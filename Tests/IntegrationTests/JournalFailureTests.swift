import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("journal: a failed write or fsync is never acknowledged")
struct JournalFailureTests {
    /// Creates users one at a time until the first error; returns (acknowledged ids, the error reply).
    private func createUntilError(_ client: LineClient) throws -> ([String], Reply?) {
        var acked: [String] = []
        for i in 0..<50 {
            let line = try client.request(Wire.createUser("r\(i)", "u\(i)", "User \(i)", "u\(i)@example.com"))
            let reply = try Reply(line)
            if reply.isError { return (acked, reply) }
            acked.append("u\(i)")
        }
        return (acked, nil)
    }

    @Test(
        "fault injected in fsync or write: that mutation gets `internal`, later ones are refused, reads work, acknowledged ones survive",
        arguments: [("RPCD_TEST_FAIL_FSYNC_AFTER", "fsync"), ("RPCD_TEST_FAIL_WRITE_AFTER", "write")])
    func faultNotAcknowledged(_ hook: String, _ call: String) throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        // The first few fsyncs/writes (data dir, lock file, journal creation) succeed; a few creates
        // are acknowledged; then the fault starts.
        let first = try DaemonProcess(dataDir: dir, environment: [hook: "6"])
        let client = try LineClient(port: first.port)
        let (acked, failure) = try createUntilError(client)
        guard let failure else {
            Issue.record("no failure after 50 creates with \(hook)=6")
            return
        }
        #expect(failure.errorCode == "internal", "reply: \(failure.line)")
        #expect(failure.errorMessage?.contains(call) == true, "the error does not say why: \(failure.line)")
        let refused = try Reply(try client.request(Wire.createUser("x", "x1", "X", "x@example.com")))
        #expect(refused.errorCode == "internal" && refused.errorMessage?.contains("refused") == true, "reply: \(refused.line)")
        if let someone = acked.first {
            let read = try Reply(try client.request(Wire.getUser("g", someone)))
            #expect(read.method == "user.getUserResult", "reads must keep working: \(read.line)")
        }
        let list = try Reply(try client.request(Wire.request("l", "user.listUsers")))
        #expect(list.method == "user.listUsersResult", "reads must keep working: \(list.line)")
        #expect(first.stderrEventually(contains: "journal write failed"), "stderr: \(first.stderrTail())")
        first.stop()

        let second = try DaemonProcess(dataDir: dir)
        defer { second.stop() }
        #expect(try JournalSupport.userIDs(port: second.port).isSuperset(of: acked))
    }

    /// Pipelined creates share a turn and an fsync: when that fsync fails, each of them gets its
    /// own `internal` error under its own id (the turn's errors are written into one buffer and
    /// each slot filled from its part), and nothing is answered twice or not at all.
    @Test("fsync fails under pipelined creates: every create of the failed turn gets its own error under its own id")
    func pipelinedFaultAnswersEachRequestOnce() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let daemon = try DaemonProcess(dataDir: dir, environment: ["RPCD_TEST_FAIL_FSYNC_AFTER": "8"])
        defer { daemon.stop() }
        let client = try LineClient(port: daemon.port)
        var sawFsyncError = false
        for batch in 0..<40 where !sawFsyncError {
            let ids = (0..<8).map { "b\(batch)-\($0)" }
            try client.send(ids.map { Wire.createUser($0, "u-\($0)", "User", "u@example.com") + "\n" }.joined())
            let replies = try client.readLines(ids.count).map { try Reply($0) }
            #expect(replies.map { $0.id ?? "" } == ids, "one reply per request, in order: \(replies.map(\.line))")
            for reply in replies where reply.isError {
                #expect(reply.errorCode == "internal", "reply: \(reply.line)")
                if reply.errorMessage?.contains("fsync") == true { sawFsyncError = true }
            }
        }
        #expect(sawFsyncError, "no create was answered with the fsync failure")
    }
}
