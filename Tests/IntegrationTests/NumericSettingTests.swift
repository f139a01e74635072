import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Numbers an operator gives at start (issue 10, items 1 and 2): out of range is a usage error
/// before anything starts (exit 2, one line naming the allowed range), never a trap later.
@Suite("numeric settings")
struct NumericSettingTests {
    private func write(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-\(UUID().uuidString).conf").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("serve with a flag out of range: exit 2 at once, one line with the range", arguments: [
        ["--idle-timeout", "2e10"], ["--idle-timeout", "1e300"], ["--idle-timeout", "nan"], ["--idle-timeout", "-1"],
        ["--max-frame-bytes", "9223372036854775807"], ["--max-frame-bytes", "8"], ["--max-output-bytes", "0"],
        ["--max-output-bytes", "9223372036854775807"], ["--max-connections", "9223372036854775807"],
        ["--compact-after-bytes", "0"], ["--compact-after-bytes", "9223372036854775807"],
    ])
    func flagOutOfRange(_ flag: [String]) throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-range-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let outcome = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir] + flag, timeout: 5)
        #expect(outcome.status == 2, "\(flag): status \(outcome.status.map(String.init) ?? "none (still running)"); stderr: \(outcome.stderr)")
        let lines = outcome.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("rpcd: \(flag[0]) '\(flag[1])' ") && lines[0].contains("allowed: "), "\(outcome.stderr)")
    }

    @Test("a config file out of range: serve exits 2 and check-config names FILE:LINE for each")
    func fileOutOfRange() throws {
        let path = try write("""
            # numbers past their ranges
            idle_timeout = 1e300
            max_frame_bytes = 9223372036854775807
            max_connections = -1
            max_output_bytes = 1TiB
            """)
        defer { unlink(path) }
        let serve = try runProcess(try Binaries.rpcd(), ["serve", "--config", path, "--listen", "127.0.0.1:0"], timeout: 5)
        #expect(serve.status == 2, "status \(serve.status.map(String.init) ?? "none (still running)"); stderr: \(serve.stderr)")
        let check = try runProcess(try Binaries.rpcd(), ["check-config", path])
        #expect(check.status == 2, "\(check.stderr)")
        for (line, key) in [(2, "idle_timeout"), (3, "max_frame_bytes"), (4, "max_connections"), (5, "max_output_bytes")] {
            #expect(serve.stderr.contains("rpcd: \(path):\(line): \(key) "), "serve: \(serve.stderr)")
            #expect(check.stderr.contains("\(path):\(line): \(key) ") && check.stderr.contains("allowed: "), "check-config: \(check.stderr)")
        }
    }

    @Test("the largest idle timeout is accepted and its idle sweep runs without trapping")
    func largestIdleTimeout() throws {
        try withDaemon(extraArguments: ["--idle-timeout", "2592000"]) { daemon in
            let c = try LineClient(port: daemon.port)
            usleep(1_500_000)  // past the sweep's first ticks (every second)
            #expect(try c.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test("--event-loops 1: the lone loop runs on a thread of its own; with 2, libdispatch's threads run both")
    func loneLoopHasItsOwnThread() throws {
        try withDaemon(extraArguments: ["--event-loops", "1"]) { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
            #expect(daemon.threadNames().filter { $0.hasPrefix("rpcd.loop.") } == ["rpcd.loop.0"], "\(daemon.threadNames())")
        }
        try withDaemon(extraArguments: ["--event-loops", "2"]) { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
            #expect(daemon.threadNames().filter { $0.hasPrefix("rpcd.loop.") } == [], "\(daemon.threadNames())")
        }
    }

    @Test("--event-loops 3: three loops serve connections spread over them, one state behind them all")
    func threeEventLoops() throws {
        try withDaemon(extraArguments: ["--event-loops", "3"]) { daemon in
            #expect(daemon.stderrEventually(contains: ", 3 event loops; "), "\(daemon.stderrTail())")
            // Connections go to the loops in turn: nine of them land three on each.
            let clients = try (0..<9).map { _ in try LineClient(port: daemon.port) }
            for (n, c) in clients.enumerated() {
                let reply = try c.request(#"{"id":"c\#(n)","method":"user.createUser","param":{"id":"u\#(n)","name":"N\#(n)","email":"u\#(n)@x"}}"#)
                #expect(reply.contains("createUserResult"), "\(reply)")
            }
            for (n, c) in clients.enumerated() {
                let other = (n + 4) % clients.count
                let reply = try c.request(#"{"id":"g\#(n)","method":"user.getUser","param":{"userId":"u\#(other)"}}"#)
                #expect(reply.contains(#""name":"N\#(other)""#), "\(reply)")
            }
        }
        try withDaemon { daemon in
            let loops = max(1, ProcessInfo.processInfo.activeProcessorCount / 2)
            #expect(daemon.stderrEventually(contains: ", \(loops) event loop\(loops == 1 ? "" : "s"); "), "\(daemon.stderrTail())")
        }
    }

    @Test("rpcd call --timeout out of range: usage error, not a trap", arguments: ["1e300", "1e20", "nan", "0", "-5"])
    func callTimeoutOutOfRange(_ value: String) throws {
        let outcome = try runProcess(try Binaries.rpcd(), ["call", "--timeout", value, "127.0.0.1:1", "system.ping"], timeout: 5)
        #expect(outcome.status == 2, "status \(outcome.status.map(String.init) ?? "none"); stderr: \(outcome.stderr)")
        #expect(outcome.stderr.hasPrefix("rpcd call: --timeout '\(value)' ") && outcome.stderr.contains("allowed: "), "\(outcome.stderr)")
    }

    @Test("WATCHDOG_USEC near UInt64.max: the heartbeat timer is clamped, the daemon keeps serving")
    func hugeWatchdog() throws {
        let notify = try NotifySocket()
        try withDaemon(environment: ["NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "18446744073709551615"]) { daemon in
            notify.waitFor("READY=1", timeout: 5)
            usleep(300_000)
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test("a snapshot at seq UInt64.max: mutations are refused with a reason, reads and the daemon go on")
    func exhaustedSequenceNumbers() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-seq-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(#"{"rpcdSnapshot":1,"seq":18446744073709551615,"records":0}"#.utf8 + [10])
            .write(to: dir.appendingPathComponent("snapshot.jsonl"))
        let daemon = try DaemonProcess(dataDir: dir)
        defer { daemon.stop() }
        let c = try LineClient(port: daemon.port)
        let refused = expectError(try c.request(Wire.createUser("1", "u1", "Ada", "a@x")), code: "internal", id: "1")
        #expect(refused?.errorMessage?.contains("sequence numbers are used up") == true, "\(refused?.line ?? "")")
        #expect(try c.request(#"{"id":"2","method":"user.listUsers"}"#).contains("listUsersResult"))
        #expect(daemon.isRunning, "\(daemon.stderrTail())")
    }
}
