import Foundation
import Testing

/// Habits a newcomer brings (JSON-RPC's `params`, a mistyped method) get errors that say what to
/// type instead.
@Suite("newcomer habits")
struct NewcomerTests {
    @Test("unknown top-level keys are invalidRequest naming the key and the right one; seq and crc are accepted")
    func unknownTopLevelKeys() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let params = try c.request(#"{"id":"1","method":"user.getUser","params":{"userId":"u1"}}"#)
            let reply = expectError(params, code: "invalidRequest", id: "1")
            #expect(reply?.errorMessage?.contains(#""params" is not a field of a request; did you mean "param"?"#) == true, "\(params)")
            let jsonrpc = try c.request(#"{"jsonrpc":"2.0","id":"2","method":"system.ping"}"#)
            #expect(expectError(jsonrpc, code: "invalidRequest", id: "2")?.errorMessage?.contains(#""jsonrpc" is not a field"#) == true, "\(jsonrpc)")
            // The keys journal lines carry are part of the wire: a journal line replays as it is.
            let journaled = try c.request(#"{"id":"3","method":"system.ping","seq":7,"crc":"00000000"}"#)
            #expect(journaled.contains("system.pingResult"), "\(journaled)")
        }
    }

    @Test("methodNotFound offers the nearest method and lists system.* too")
    func didYouMean() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let typo = try c.request(#"{"id":"1","method":"user.getUsr","param":{"userId":"u1"}}"#)
            let message = expectError(typo, code: "methodNotFound", id: "1")?.errorMessage ?? ""
            #expect(message.contains(#"did you mean "user.getUser"?"#), "\(message)")
            #expect(message.contains("system.ping") && message.contains("system.stats"), "\(message)")
            let system = try c.request(#"{"id":"2","method":"system.pong"}"#)
            #expect(expectError(system, code: "methodNotFound", id: "2")?.errorMessage?.contains(#"did you mean "system.ping"?"#) == true, "\(system)")
            let entity = try c.request(#"{"id":"3","method":"usr.getUser","param":{"userId":"u1"}}"#)
            #expect(expectError(entity, code: "methodNotFound", id: "3")?.errorMessage?.contains(#"did you mean "user.getUser"?"#) == true, "\(entity)")
        }
    }
}

@Suite("newcomer rough edges: addresses, exit codes, wording")
struct NewcomerEdgeTests {
    @Test("a bad --listen is a one-line rpcd: usage error (exit 2) listing the accepted forms")
    func badListen() throws {
        let out = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "example.com:7878", "--data-dir", "/nonexistent/never-created"])
        #expect(out.status == 2)
        let lines = out.stderr.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix("rpcd: --listen 'example.com:7878'"), "\(out.stderr)")
        #expect(out.stderr.contains("localhost") && out.stderr.contains("*"), "\(out.stderr)")
    }

    @Test("--listen :PORT, *:PORT and localhost:PORT work; binding beyond loopback is warned about")
    func listenForms() throws {
        try withDaemon(listen: ["*:0"]) { daemon in
            #expect(daemon.stderrEventually(contains: "every interface"), "\(daemon.stderrTail())")
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
        }
        try withDaemon(listen: [":0"]) { daemon in
            #expect(daemon.stderrEventually(contains: "every interface"), "\(daemon.stderrTail())")
        }
        try withDaemon(listen: ["localhost:0"]) { daemon in
            #expect(daemon.listeners[0].host == "127.0.0.1")
            #expect(!daemon.stderrText.contains("warning"), "\(daemon.stderrTail())")
        }
    }

    @Test("a port in use: the error names the address")
    func bindErrorNamesAddress() throws {
        try withDaemon { daemon in
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-bind-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: dir) }
            let out = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:\(daemon.port)", "--data-dir", dir.path])
            #expect(out.status == 1)
            #expect(out.stderr.contains("127.0.0.1:\(daemon.port)") && out.stderr.contains("in use"), "\(out.stderr)")
        }
    }

    @Test("past --max-connections 1: \"at most 1 connection\", not \"1 connections\"")
    func singularConnection() throws {
        try withDaemon(extraArguments: ["--max-connections", "1"]) { daemon in
            let first = try LineClient(port: daemon.port)
            #expect(try first.request(#"{"id":"1","method":"system.ping"}"#).contains("pingResult"))
            let second = try LineClient(port: daemon.port)
            let line = try #require(try second.readLine())
            #expect(line.contains("at most 1 connection at once"), "\(line)")
        }
    }
}
