import Foundation
import Testing

@Suite("half-closed clients")
struct HalfCloseTests {
    static func requests(_ tag: String) -> String {
        Wire.createUser("\(tag)-1", "\(tag)", "H", "h@example.com") + "\n" + Wire.getUser("\(tag)-2", tag) + "\n"
            + Wire.getUser("\(tag)-3", "nobody") + "\n"
    }

    static func expectReplies(_ c: LineClient, _ tag: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let lines = try c.readLines(3)
        #expect(lines[0] == Wire.createUserResult("\(tag)-1", tag, "H", "h@example.com"), sourceLocation: sourceLocation)
        #expect(lines[1] == Wire.result("\(tag)-2", "user.getUser", Wire.user(tag, "H", "h@example.com")), sourceLocation: sourceLocation)
        expectError(lines[2], code: "notFound", id: "\(tag)-3", sourceLocation: sourceLocation)
        #expect(try c.readLine() == nil, "EOF after the replies", sourceLocation: sourceLocation)
    }

    @Test("3 requests then shutdown(SHUT_WR): all 3 replies arrive, then EOF")
    func halfClose() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.send(Self.requests("a"))
            c.shutdownWrite()
            try Self.expectReplies(c, "a")

            // A client that sends nothing and half-closes gets EOF too.
            let d = try LineClient(port: daemon.port)
            d.shutdownWrite()
            #expect(try d.readLine() == nil, "a client that half-closes without sending gets EOF")
        }
    }

    @Test("a pipeline of 1,000 mixed lines in one write (mutations, reads, errors, system.ping, bad JSON), then shutdown(SHUT_WR): every reply in order, then EOF")
    func pipelineInOrder() throws {
        try withDaemon { daemon in
            // A loop answers a turn's requests together; service methods and bad lines answer at
            // once. Whatever the mix, replies keep the order of the requests.
            var lines: [String] = []
            var ids: [String] = []
            for i in 0..<200 {
                lines.append(Wire.createUser("c\(i)", "p\(i)", "P", "p@example.com"))
                ids.append("c\(i)")
                lines.append(Wire.getUser("g\(i)", "p\(i)"))
                ids.append("g\(i)")
                lines.append(Wire.getUser("n\(i)", "absent-\(i)"))
                ids.append("n\(i)")
                if i % 3 == 0 {
                    lines.append(#"{"id":"s\#(i)","method":"system.ping"}"#)
                    ids.append("s\(i)")
                }
                if i % 7 == 0 {
                    lines.append(#"{"id":"b\#(i)","method":"user.getUser","param":"#)  // not JSON: answered with id ""
                    ids.append("")
                }
                lines.append(Wire.createUser("d\(i)", "p\(i)", "P", "p@example.com"))  // conflict
                ids.append("d\(i)")
            }
            let c = try LineClient(port: daemon.port)
            try c.send(lines.joined(separator: "\n") + "\n")
            c.shutdownWrite()
            let replies = try c.readLines(ids.count)
            let got = replies.map { line -> String in
                guard let data = line.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return "?" }
                return object["id"] as? String ?? "?"
            }
            let first = got.count == ids.count ? ids.indices.first { got[$0] != ids[$0] } : 0
            #expect(first == nil, "reply \(first ?? 0) answers \"\(first.map { got[$0] } ?? "")\", expected \"\(first.map { ids[$0] } ?? "")\"")
            #expect(try c.readLine() == nil, "EOF after the replies")
        }
    }

    @Test("100 half-closed clients at once all get their replies and EOF; no fd leak, no spinning")
    func manyHalfClosed() throws {
        try withDaemon { daemon in
            // Warm up, so lazily created daemon fds are in the baseline.
            let warm = try LineClient(port: daemon.port)
            #expect(try warm.request(#"{"id":"w","method":"user.listUsers"}"#).contains("listUsersResult"))
            warm.shutdownWrite()
            #expect(try warm.readLine() == nil)
            warm.close()
            usleep(200_000)
            let baselineFDs = try #require(daemon.openFDCount())

            var clients: [LineClient] = []
            for i in 0..<100 { clients.append(try LineClient(port: daemon.port)); _ = i }
            for (i, c) in clients.enumerated() {
                try c.send(Self.requests("c\(i)"))
                c.shutdownWrite()
            }
            for (i, c) in clients.enumerated() { try Self.expectReplies(c, "c\(i)") }
            for c in clients { c.close() }
            clients.removeAll()

            // The daemon closed its side of every connection.
            var fds = daemon.openFDCount() ?? -1
            let watch = Stopwatch()
            while fds > baselineFDs && watch.seconds < 3 {
                usleep(50_000)
                fds = daemon.openFDCount() ?? -1
            }
            #expect(fds <= baselineFDs, "daemon has \(fds) fds open, \(baselineFDs) before the 100 clients")

            // Idle with 0 connections: it must not burn CPU (EOF treated like EAGAIN spins).
            let before = try #require(daemon.cpuTicks())
            usleep(1_000_000)
            let after = try #require(daemon.cpuTicks())
            #expect(after - before <= 20, "daemon used \(after - before) ticks (of 100) in 1 s while idle")

            // And it still serves.
            let probe = try LineClient(port: daemon.port)
            #expect(try probe.request(Wire.getUser("p", "c42")) == Wire.result("p", "user.getUser", Wire.user("c42", "H", "h@example.com")))
        }
    }

    @Test("half-closed clients that stay open (CLOSE_WAIT on our side) do not make the daemon spin")
    func halfClosedNotReaped() throws {
        try withDaemon { daemon in
            var clients: [LineClient] = []
            for _ in 0..<50 {
                let c = try LineClient(port: daemon.port)
                c.shutdownWrite()
                clients.append(c)
            }
            // We never close our ends; the daemon got EOF on all 50.
            usleep(300_000)
            let before = try #require(daemon.cpuTicks())
            usleep(1_000_000)
            let after = try #require(daemon.cpuTicks())
            #expect(after - before <= 20, "daemon used \(after - before) ticks (of 100) in 1 s with 50 half-closed peers")
            for c in clients { #expect(try c.readLine() == nil) }
        }
    }
}
