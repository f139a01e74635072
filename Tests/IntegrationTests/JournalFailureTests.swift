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
}
