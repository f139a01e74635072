import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// rpcd under systemd, without systemd: a notify socket made by the test, `systemd-socket-activate`
/// for inherited sockets, `$JOURNAL_STREAM` for log priorities.
@Suite(.serialized)
struct SystemdTests {
    @Test func readyAfterStartAndStoppingAfterSIGTERM() throws {
        let notify = try NotifySocket()
        let daemon = try DaemonProcess(environment: ["NOTIFY_SOCKET": notify.address])
        defer { daemon.stop() }
        let beforeReady = notify.waitFor("READY=1", timeout: 10)
        #expect(notify.received("READY=1"), "no READY=1; got \(beforeReady); stderr:\n\(daemon.stderrTail())")
        #expect(notify.messages.contains { $0.contains("STATUS=") }, "no STATUS= line: \(notify.messages)")
        #expect(!notify.received("STOPPING=1"))

        // Serving once ready.
        let client = try LineClient(port: daemon.port)
        #expect(try Reply(client.request(#"{"id":"1","method":"system.ping"}"#)).method == "system.pingResult")

        daemon.terminate()
        notify.waitFor("STOPPING=1", timeout: 10)
        #expect(notify.received("STOPPING=1"), "no STOPPING=1 after SIGTERM: \(notify.messages)")
        #expect(daemon.waitForExit(timeout: 10) == 0)
    }

    @Test func watchdogPingsAtHalfTheInterval() throws {
        let notify = try NotifySocket()
        // 400 ms watchdog: pings every 200 ms.
        let daemon = try DaemonProcess(environment: ["NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "400000"])
        defer { daemon.stop() }
        notify.waitFor("READY=1", timeout: 10)
        let start = Date()
        var pings = 0
        while pings < 3 && Date().timeIntervalSince(start) < 5 {
            if notify.waitFor("WATCHDOG=1", timeout: 2).contains(where: { $0.contains("WATCHDOG=1") }) { pings += 1 }
        }
        #expect(pings >= 3, "expected WATCHDOG=1 pings, got \(notify.messages); stderr:\n\(daemon.stderrTail())")
        #expect(Date().timeIntervalSince(start) < 3, "3 pings took \(Date().timeIntervalSince(start)) s")
        let status = notify.messages.last { $0.contains("WATCHDOG=1") } ?? ""
        #expect(status.contains("STATUS=serving"), "a ping carries the short status: \(status)")
    }

    @Test func noWatchdogPingsForAnotherPID() throws {
        let notify = try NotifySocket()
        let daemon = try DaemonProcess(environment: [
            "NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000", "WATCHDOG_PID": "1",
        ])
        defer { daemon.stop() }
        notify.waitFor("READY=1", timeout: 10)
        notify.waitFor("WATCHDOG=1", timeout: 1)
        #expect(!notify.received("WATCHDOG=1"), "WATCHDOG_PID names another process: \(notify.messages)")
    }

    @Test func socketActivationServesTheInheritedSocket() throws {
        guard let activate = Binaries.onPath("systemd-socket-activate") else {
            Issue.record("systemd-socket-activate not found; apt-get install systemd (.ci/run does)")
            return
        }
        let port = try freeLoopbackPort()
        let dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-sa-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dataDir) }
        let activated = try SocketActivated(activate: activate, ports: [port], arguments: ["--data-dir", dataDir.path])
        defer { activated.stop() }
        let process = activated.process
        let stderr = activated.stderr
        // The port is listening from the start (systemd's socket); rpcd serves it once started.
        let client = activated.connect(port: port)
        let connected = try #require(client, "could not connect to 127.0.0.1:\(port); stderr:\n\(stderr.text)")
        let reply = try Reply(connected.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")))
        #expect(reply.method == "user.createUserResult", "\(reply.line)")
        #expect(stderr.wait(timeout: 5, until: { $0.contains("listening on 127.0.0.1:\(port) (socket from systemd)") }),
            "rpcd did not adopt the inherited socket; stderr:\n\(stderr.text)")
        #expect(!stderr.text.contains("listening on 127.0.0.1:7878"), "rpcd bound its default address too")
        kill(process.processIdentifier, SIGTERM)
        let exitDeadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < exitDeadline { usleep(10_000) }
        #expect(!process.isRunning && process.terminationStatus == 0, "stderr:\n\(stderr.text)")
    }

    @Test func journalStreamGetsSyslogPriorityPrefixes() throws {
        try withDaemon(extraArguments: ["--log-level", "debug"], environment: ["JOURNAL_STREAM": "8:12345"]) { daemon in
            let client = try LineClient(port: daemon.port)
            _ = try client.request(#"{"id":"1","method":"system.ping"}"#)
            client.close()
            #expect(PipeWait.until(5) { daemon.stderrText.contains("<7>connection") }, "\(daemon.stderrTail())")
            let lines = daemon.stderrText.split(separator: "\n")
            #expect(lines.contains { $0.hasPrefix("<6>listening on 127.0.0.1:") }, "\(daemon.stderrTail())")
            #expect(lines.allSatisfy { $0.hasPrefix("<") }, "every line carries a priority: \(daemon.stderrTail())")
            // No per-request lines at info.
            #expect(!lines.contains { $0.hasPrefix("<6>") && $0.contains("system.ping") })
        }
    }
}

enum PipeWait {
    /// Polls `condition` every 20 ms for up to `seconds`.
    static func until(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            usleep(20_000)
        }
        return condition()
    }
}
