import Foundation
import RPCSchema
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The holes a hostile peer, a web page and a careless operator could use (README "Security"):
/// each test failed on the build before its fix.
@Suite("security: cross-protocol requests, authentication limits, log and echo safety", .serialized)
struct SecurityTests {
    static let createLine = #"{"id":"1","method":"user.createUser","param":{"id":"web","name":"W","email":"w@x"}}"#

    /// Reads until the daemon closes; the bytes as text.
    static func readAll(_ c: LineClient, timeout: Double = 5) -> String {
        var lines: [String] = []
        c.setReceiveTimeout(timeout)
        while let line = try? c.readLine() { lines.append(line) }
        return lines.joined(separator: "\n")
    }

    static func userExists(_ port: Int, _ id: String) throws -> Bool {
        let c = try LineClient(port: port)
        return try c.request(#"{"id":"g","method":"user.getUser","param":{"userId":"\#(id)"}}"#).contains("getUserResult")
    }

    @Test("a browser's form POST (text/plain body) gets HTTP 400 and its JSON body is never run")
    func browserPost() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let body = Self.createLine + "\n"
            try c.send(
                "POST / HTTP/1.1\r\nHost: 127.0.0.1:\(daemon.port)\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n"
                    + "Content-Length: \(body.utf8.count)\r\n\r\n" + body)
            let answer = Self.readAll(c)
            #expect(answer.hasPrefix("HTTP/1.1 400 Bad Request"), "\(answer)")
            #expect(answer.contains("newline-delimited JSON") && answer.contains("nc 127.0.0.1 \(daemon.port)"), "\(answer)")
            #expect(!answer.contains("createUserResult"), "\(answer)")
            #expect(try !Self.userExists(daemon.port, "web"), "the body of an HTTP request must not run")
            #expect(daemon.stderrEventually(contains: "sent an HTTP request"), "\(daemon.stderrTail())")
        }
    }

    @Test("an HTTP header later on a connection ends it before the lines behind it run; what came before is answered")
    func headerMidConnection() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.send(#"{"id":"p","method":"system.ping"}"# + "\nHost: 127.0.0.1\n" + Self.createLine + "\n")
            let answer = Self.readAll(c)
            #expect(answer.contains("system.pingResult"), "\(answer)")
            #expect(answer.contains(#""code":"invalidRequest""#) && answer.contains("HTTP"), "\(answer)")
            #expect(try !Self.userExists(daemon.port, "web"))
            // Other request lines that start with a letter are not taken for HTTP.
            let d = try LineClient(port: daemon.port)
            #expect(try d.request("hello there").contains("parseError"))
            #expect(try d.request(#"{"id":"q","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test("curl gets an HTTP answer that says what rpcd speaks")
    func curlGet() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.send("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n")
            let answer = Self.readAll(c)
            #expect(answer.hasPrefix("HTTP/1.1 400"), "\(answer)")
            let length = answer.components(separatedBy: "\r\n\r\n").last.map { $0.utf8.count + 1 }
            #expect(answer.contains("Content-Length: \(length ?? -1)"), "the body is exactly Content-Length bytes: \(answer)")
        }
    }

    @Test("a connection that must authenticate and stays silent is closed after auth_timeout")
    func authTimeout() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file, "--auth-timeout", "0.5"]) { daemon in
            let silent = try LineClient(port: daemon.port)
            let authed = try LineClient(port: daemon.port)
            #expect(try authed.request(principals.authLine("read")).contains("authResult"))
            let started = Date()
            let answer = Self.readAll(silent, timeout: TestPace.seconds(5))
            #expect(answer.contains("auth_timeout") && answer.contains("unauthorized"), "\(answer)")
            #expect(Date().timeIntervalSince(started) < TestPace.seconds(4))
            Thread.sleep(forTimeInterval: 0.3)
            #expect(try authed.request(#"{"id":"s","method":"system.ping"}"#).contains("pingResult"), "an authenticated peer is not timed out")
        }
    }

    @Test("silent unauthenticated connections cannot lock out a peer with a token (max_unauthenticated)")
    func unauthenticatedCap() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file, "--max-connections", "40", "--auth-timeout", "300"]) { daemon in
            let admin = try LineClient(port: daemon.port)
            #expect(try admin.request(principals.authLine("admin")).contains("authResult"))
            var silent: [LineClient] = []
            for _ in 0..<60 { silent.append(try LineClient(port: daemon.port)) }
            Thread.sleep(forTimeInterval: 0.3)
            // A newcomer with a token gets in and is served, however many silent peers came first.
            for round in 0..<3 {
                let late = try LineClient(port: daemon.port)
                let reply = try late.request(principals.authLine("write", id: "w\(round)"))
                #expect(reply.contains("authResult"), "round \(round): \(reply)")
                #expect(try late.request(#"{"id":"c","method":"user.listUsers","param":{"limit":1}}"#).contains("listUsersResult"))
            }
            #expect(try admin.request(#"{"id":"s","method":"system.stats"}"#).contains("statsResult"), "the authenticated admin kept its connection")
            #expect(daemon.stderrEventually(contains: "closed unauthenticated to make room"), "\(daemon.stderrTail())")
            _ = silent
        }
    }

    @Test("peers dribbling an unfinished line are closed after line_timeout; slow whole lines are not")
    func lineTimeout() throws {
        try withDaemon(extraArguments: ["--line-timeout", "1", "--idle-timeout", "2"]) { daemon in
            let dribblers = try (0..<20).map { _ in try LineClient(port: daemon.port) }
            let slow = try LineClient(port: daemon.port)
            let deadline = Date().addingTimeInterval(TestPace.seconds(4))
            var closed = Set<Int>()
            var tick = 0
            while Date() < deadline && closed.count < dribblers.count {
                for (index, c) in dribblers.enumerated() where !closed.contains(index) {
                    do { try c.send("{") } catch { closed.insert(index) }
                }
                // One whole request every 0.3 s: never idle, never a line under way for long.
                if tick % 3 == 0 { #expect(try slow.request(#"{"id":"s","method":"system.ping"}"#).contains("pingResult")) }
                tick += 1
                Thread.sleep(forTimeInterval: 0.1)
            }
            for (index, c) in dribblers.enumerated() where !closed.contains(index) {
                c.setReceiveTimeout(TestPace.seconds(2))
                if (try? c.readLine()) == nil { closed.insert(index) }
            }
            #expect(closed.count == dribblers.count, "\(closed.count) of \(dribblers.count) dribbling peers closed")
            #expect(try slow.request(#"{"id":"t","method":"system.ping"}"#).contains("pingResult"))
            #expect(daemon.stderrEventually(contains: "line_timeout"), "\(daemon.stderrTail())")
        }
    }

    @Test("control characters from a peer reach the log escaped, never raw")
    func logInjection() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let c = try LineClient(port: daemon.port)
            let name = #"\u001b[2J\u001b[31mfake\r\u0007\u0000x"#
            let reply = try c.request(#"{"id":"1","method":"system.auth","param":{"name":"\#(name)","token":"t"}}"#)
            #expect(reply.contains("unauthorized"))
            #expect(daemon.stderrEventually(contains: "system.auth failed"), "\(daemon.stderrTail())")
            let log = Array(daemon.stderrText.utf8)
            for byte: UInt8 in [0x1B, 0x0D, 0x07, 0x00] { #expect(!log.contains(byte), "raw byte \(byte) in the log") }
            #expect(daemon.stderrText.contains(#"\u001b[2J\u001b[31mfake\u000d\u0007\u0000x"#), "\(daemon.stderrTail())")
        }
    }

    @Test("echoes of peer input are bounded by bytes in replies and logs, the cut marked")
    func boundedEcho() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file, "--max-frame-bytes", "4MiB"]) { daemon in
            let c = try LineClient(port: daemon.port)
            let marks = "a" + String(repeating: "\u{0301}", count: 400_000)  // one grapheme, 800,001 bytes
            let reply = try c.request(#"{"id":"1","method":"system.auth","param":{"name":"\#(marks)","token":"t"}}"#)
            #expect(reply.utf8.count < 1024 && reply.contains("bytes)"), "\(reply.utf8.count) bytes")
            let longName = String(repeating: "n", count: 120_000)
            let second = try c.request(#"{"id":"2","method":"system.auth","param":{"name":"\#(longName)","token":"t"}}"#)
            #expect(second.utf8.count < 1024, "\(second.utf8.count) bytes")
            let method = try c.request(#"{"id":"3","method":"\#(longName).x"}"#)
            #expect(method.utf8.count < 4096 && method.contains("methodNotFound"), "\(method.utf8.count) bytes")
            #expect(daemon.stderrEventually(contains: "system.auth failed"))
            let longest = daemon.stderrText.split(separator: "\n").map(\.utf8.count).max() ?? 0
            #expect(longest < 2048, "the longest log line is \(longest) bytes")
        }
    }

    @Test("failures add up on a connection (a success between does not reset them) and throttle the peer's host")
    func failureLimit() throws {
        var principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try principals.add("boss", role: .admin)
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let wrong = #"{"id":"x","method":"system.auth","param":{"name":"boss","token":"guess"}}"#
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(wrong).contains("unauthorized"))
            #expect(try c.request(wrong).contains("unauthorized"))
            #expect(try c.request(principals.authLine("read")).contains("authResult"))
            #expect(try c.request(wrong).contains("closing the connection"))
            #expect(try c.readLine() == nil, "the third failure closes, the success between notwithstanding")

            // [wrong, wrong, good] over fresh connections for 1.5 s: the host is throttled, so
            // only a handful of guesses are ever checked.
            var checked = 0
            var throttled = 0
            let end = Date().addingTimeInterval(1.5)
            while Date() < end {
                let d = try LineClient(port: daemon.port)
                for line in [wrong, wrong, principals.authLine("read")] {
                    guard let reply = try? d.request(line) else { break }
                    if reply.contains("not checked") || reply.contains("wait") { throttled += 1 } else if line == wrong { checked += 1 }
                }
            }
            #expect(checked <= 12, "\(checked) guesses were checked in 1.5 s")
            #expect(throttled > 0)
            #expect(daemon.stderrEventually(contains: "from 127.0.0.1 lately"), "\(daemon.stderrTail())")
        }
    }

    @Test("a look-alike name (KELVIN SIGN for K) does not authenticate as the real principal")
    func lookAlikeName() throws {
        var principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try principals.add("Kilo", role: .admin)
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let token = principals.tokens["Kilo"]!
            let c = try LineClient(port: daemon.port)
            let reply = try c.request(#"{"id":"1","method":"system.auth","param":{"name":"\u212Ailo","token":"\#(token)"}}"#)
            #expect(reply.contains("unauthorized"), "\(reply)")
            #expect(try c.request(principals.authLine("Kilo")).contains(#""name":"Kilo""#))
        }
    }

    @Test("refused calls are logged per source and the last ones kept in system.stats")
    func auditTrail() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let reader = try LineClient(port: daemon.port)
            #expect(try reader.request(principals.authLine("read")).contains("authResult"))
            for n in 0..<5 {
                #expect(try reader.request(#"{"id":"\#(n)","method":"user.deleteUser","param":{"userId":"x"}}"#).contains("forbidden"))
            }
            let anonymous = try LineClient(port: daemon.port)
            #expect(try anonymous.request(#"{"id":"u","method":"user.listUsers"}"#).contains("unauthorized"))
            let admin = try LineClient(port: daemon.port)
            #expect(try admin.request(principals.authLine("admin")).contains("authResult"))
            let stats = try admin.request(#"{"id":"s","method":"system.stats"}"#)
            #expect(stats.contains(#""refusals":["#) && stats.contains(#""code":"forbidden""#) && stats.contains(#""method":"user.deleteUser""#), "\(stats)")
            #expect(stats.contains(#""code":"unauthorized""#) && stats.contains(#"\"read\" from 127.0.0.1"#), "\(stats)")
            #expect(daemon.stderrEventually(contains: "user.deleteUser refused (forbidden)"), "\(daemon.stderrTail())")
        }
    }

    @Test("idempotency keys are scoped by principal: another principal's same key neither reads the outcome nor blocks it, across a restart")
    func keysPerPrincipal() throws {
        var principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try principals.add("alice", role: .write)
        try principals.add("bob", role: .write)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-keys-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        func create(_ c: LineClient, _ id: String) throws -> String {
            try c.request(#"{"id":"k","method":"user.createUser","param":{"id":"\#(id)","name":"N","email":"e@x"},"key":"shared-key"}"#)
        }
        for round in 0..<2 {
            let daemon = try DaemonProcess(extraArguments: ["--auth-file", principals.file], dataDir: dir)
            defer { daemon.stop() }
            let alice = try LineClient(port: daemon.port)
            let bob = try LineClient(port: daemon.port)
            #expect(try alice.request(principals.authLine("alice")).contains("authResult"))
            #expect(try bob.request(principals.authLine("bob")).contains("authResult"))
            let first = try create(alice, "from-alice")
            #expect(first.contains("createUserResult") && first.contains("from-alice"), "round \(round): \(first)")
            let other = try create(bob, "from-bob")
            #expect(other.contains("createUserResult") && other.contains("from-bob"), "round \(round): bob's key is his own: \(other)")
            // Each retry gets its own principal's first outcome (after the restart too).
            #expect(try create(alice, "from-alice") == first)
            #expect(try create(bob, "from-bob") == other)
            let mixed = try create(bob, "from-alice")
            #expect(mixed.contains("keyReused") && mixed.contains(#"key \"shared-key\""#), "\(mixed)")
            let long = try bob.request(#"{"id":"l","method":"user.createUser","param":{"id":"x","name":"N","email":"e@x"},"key":"\#(String(repeating: "k", count: 126))"}"#)
            #expect(long.contains("invalidRequest") && long.contains("use a shorter key"), "\(long)")
        }
    }
}
