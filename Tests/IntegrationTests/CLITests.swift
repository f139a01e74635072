import Foundation
import Testing

@Suite("command line and signals")
struct CLITests {
    @Test("rpcd --version exits 0 and prints a version")
    func version() throws {
        let out = try runProcess(try Binaries.rpcd(), ["--version"])
        #expect(out.status == 0, "exit \(String(describing: out.status)), stderr: \(out.stderr)")
        let text = out.stdout + out.stderr
        let hasDigit = text.contains { $0.isNumber }
        #expect(hasDigit, "no version number in: \(text)")
    }

    @Test("rpcd --help exits 0 and mentions serve")
    func help() throws {
        let out = try runProcess(try Binaries.rpcd(), ["--help"])
        #expect(out.status == 0, "exit \(String(describing: out.status)), stderr: \(out.stderr)")
        #expect((out.stdout + out.stderr).contains("serve"), "help text: \(out.stdout + out.stderr)")
    }

    @Test(
        "an unknown subcommand or flag exits 2 with a one-line error on stderr",
        arguments: [["bogus"], ["--bogus"], ["serve", "--bogus", "--listen", "127.0.0.1:0"]])
    func unknownArguments(_ arguments: [String]) throws {
        let dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-cli-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dataDir) }
        let args = arguments.first == "serve" ? arguments + ["--data-dir", dataDir.path] : arguments
        let out = try runProcess(try Binaries.rpcd(), args, timeout: 5)
        #expect(out.status == 2, "rpcd \(args.joined(separator: " ")): exit \(String(describing: out.status)), stderr: \(out.stderr)")
        let message = out.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!message.isEmpty && !message.contains("\n"), "expected a one-line error on stderr, got: \(out.stderr)")
    }

    @Test("SIGTERM with a client connected: replies already received are sent, connection closed, exit 0 within 5 s")
    func sigterm() throws {
        try stopsCleanly(on: SIGTERM)
    }

    @Test("SIGINT: exit 0 within 5 s")
    func sigint() throws {
        try stopsCleanly(on: SIGINT)
    }

    private func stopsCleanly(on sig: Int32) throws {
        let daemon = try DaemonProcess()
        defer { daemon.stop() }
        let c = try LineClient(port: daemon.port)
        #expect(try c.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
        let idle = try LineClient(port: daemon.port)  // connected, never says anything
        try c.send(String(repeating: Wire.getUser("g", "u1") + "\n", count: 50))
        usleep(300_000)
        daemon.signal(sig)
        let status = daemon.waitForExit(timeout: 5)
        #expect(status == 0, "exit status \(status.map(String.init) ?? "none: still running after 5 s"); stderr:\n\(daemon.stderrTail())")
        let lines = try c.readLines(50)
        #expect(lines.allSatisfy { $0 == Wire.result("g", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")) })
        #expect(try c.readLine() == nil, "connection closed after the replies")
        #expect(try idle.readLine() == nil, "idle connection closed")
    }

    @Test("--listen twice: two `listening on` lines with different ports, both serving one state")
    func twoListeners() throws {
        try withDaemon(listen: ["127.0.0.1:0", "127.0.0.1:0"]) { daemon in
            let listeners = DaemonProcess.parseListeners(daemon.stderrText)
            #expect(listeners.count == 2, "stderr: \(daemon.stderrText)")
            #expect(listeners.allSatisfy { $0.host == "127.0.0.1" && $0.port > 0 })
            #expect(Set(listeners.map(\.port)).count == 2, "ports must differ: \(listeners.map(\.port))")
            let a = try LineClient(port: listeners[0].port)
            let b = try LineClient(port: listeners[1].port)
            #expect(try a.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
            #expect(try b.request(Wire.getUser("2", "u1")) == Wire.result("2", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
        }
    }

    @Test("the listening line names 127.0.0.1 and the real port")
    func listeningLine() throws {
        try withDaemon { daemon in
            #expect(daemon.listeners.count == 1)
            #expect(daemon.listeners[0].host == "127.0.0.1")
            #expect(daemon.port > 0)
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"1","method":"user.listUsers"}"#) == #"{"id":"1","method":"user.listUsersResult","param":{"users":[]}}"#)
        }
    }
}
