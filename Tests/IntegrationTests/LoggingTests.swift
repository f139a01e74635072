import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Logging must never freeze the daemon (issue 10, item 6): with nobody reading its stderr, a
/// flood of oversize lines and connection churn (each logged) froze it before, and a new client's
/// ping waited forever.
@Suite("logging")
struct LoggingTests {
    @Test("stderr unread, 5000 oversize lines and 5000 logged connections: a new client's ping still completes")
    func unreadStderrDoesNotFreezeTheDaemon() throws {
        try withDaemon(extraArguments: ["--max-frame-bytes", "64", "--log-level", "debug"]) { daemon in
            let port = daemon.port
            daemon.pauseStderr()
            // Four flooders (spread over the event loops), 1250 oversize lines each; their replies
            // are read so only stderr can be what blocks.
            let line = Array(String(repeating: "x", count: 100).utf8) + [10]
            let flood = Array([[UInt8]](repeating: line, count: 1250).joined())
            let threads = (0..<4).map { _ in
                Thread {
                    guard let c = try? LineClient(port: port, timeout: 3) else { return }
                    try? c.sendBytes(flood)
                    _ = c.drainUntilClosed(silenceTimeout: 1)
                }
            }
            // Connection churn: each open and close is a debug line: 750 KB, more than the pipe
            // (64 KiB) and the log queue (256 KiB) hold together.
            let churned = DispatchSemaphore(value: 0)
            let churn = Thread {
                for _ in 0..<5000 { (try? LineClient(port: port, timeout: 3))?.close() }
                churned.signal()
            }
            threads.forEach { $0.start() }
            churn.start()
            usleep(1_500_000)
            // Measured by completion: within a generous 5 s, while stderr is still not read.
            let c = try LineClient(port: daemon.port, timeout: 5)
            #expect(try c.request(#"{"id":"p","method":"system.ping"}"#).contains("pingResult"))
            #expect(churned.wait(timeout: .now() + 60) == .success, "the churn did not finish")
            #expect(try c.request(#"{"id":"q","method":"system.ping"}"#).contains("pingResult"))
            daemon.resumeStderr()
            // Once read again: the first oversize line in full, the rest summed up, the drops counted.
            #expect(daemon.stderrEventually(contains: "discarded a line over 64 bytes", timeout: 5), "\(daemon.stderrTail())")
            #expect(daemon.stderrEventually(contains: "more in the last 10 s, the last: connection", timeout: 15), "\(daemon.stderrTail())")
            #expect(daemon.stderrEventually(contains: " log lines: stderr was not being read fast enough", timeout: 5), "\(daemon.stderrTail())")
            let oversize = daemon.stderrText.components(separatedBy: "warning connection").count - 1
            #expect(oversize < 10, "oversize warnings are rate-limited, not one per line: \(oversize)")
        }
    }

    @Test("a start that fails still gets its reason to stderr before the exit")
    func failedStartIsLogged() throws {
        // Hold a port, then ask rpcd to listen on it.
        let holder = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(holder) }
        var addr = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(holder, $0, length) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(holder, $0, &length) } }
        listen(holder, 1)
        let port = Int(UInt16(bigEndian: addr.sin_port))
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-log-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let outcome = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:\(port)", "--data-dir", dir], timeout: 10)
        #expect(outcome.status == 1, "\(outcome.stderr)")
        #expect(outcome.stderr.contains("cannot listen"), "\(outcome.stderr)")
    }
}
