import Foundation
import Testing

/// Peers that reset, vanish, hoard input or ask for too much: each test reproduces an attack that
/// worked on an earlier build (LINUX-SOCKETS.md, "Found in rpcd itself").
@Suite("hostile peers")
struct HostilePeerTests {
    /// Creates `count` users whose names make each record about `nameBytes` long, pipelined.
    static func seed(_ port: Int, count: Int, nameBytes: Int, prefix: String = "u") throws {
        let c = try LineClient(port: port, timeout: 30)
        let name = String(repeating: "n", count: nameBytes)
        var batch = ""
        for i in 0..<count {
            batch += Wire.createUser("c\(i)", String(format: "\(prefix)%05d", i), name, "x@example.com") + "\n"
        }
        try c.send(batch)
        let replies = try c.readLines(count)
        #expect(replies.allSatisfy { $0.contains("createUserResult") }, "\(replies.first { !$0.contains("createUserResult") } ?? "")")
    }

    /// Waits (up to `timeout`) for the daemon's fd count to fall to `baseline`; returns the last count.
    static func fdsSettle(_ daemon: DaemonProcess, to baseline: Int, timeout: Double = 5) -> Int {
        var fds = daemon.openFDCount() ?? -1
        let watch = Stopwatch()
        while fds > baseline && watch.seconds < timeout {
            usleep(50_000)
            fds = daemon.openFDCount() ?? -1
        }
        return fds
    }

    /// Requests served so far for `method`, from `system.stats`.
    static func served(_ port: Int, _ method: String) throws -> Int {
        let c = try LineClient(port: port)
        let reply = try Reply(c.request(#"{"id":"s","method":"system.stats"}"#))
        let methods = (reply.param?["methods"] as? [[String: Any]]) ?? []
        return methods.first { $0["method"] as? String == method }?["requests"] as? Int ?? 0
    }

    /// A baseline fd count once lazily opened daemon fds exist (one connection opened and closed).
    static func baselineFDs(_ daemon: DaemonProcess) throws -> Int {
        let warm = try LineClient(port: daemon.port)
        #expect(try warm.request(#"{"id":"w","method":"system.ping"}"#).contains("pingResult"))
        warm.close()
        usleep(200_000)
        return try #require(daemon.openFDCount())
    }

    @Test("peers that send half a line and reset are released at once, whether the daemon is running or stopped meanwhile")
    func resetAfterHalfLine() throws {
        try withDaemon { daemon in
            let baseline = try Self.baselineFDs(daemon)
            // While the daemon runs: each reset races the daemon's read of the half line.
            for _ in 0..<300 {
                let c = try LineClient(port: daemon.port)
                try c.send(#"{"id":"1","method":"user.getU"#)
                c.abort()
            }
            var fds = Self.fdsSettle(daemon, to: baseline)
            #expect(fds <= baseline, "\(fds - baseline) of 300 reset peers still hold an fd (baseline \(baseline))")

            // While the daemon is stopped: the half line and the reset are both queued when it looks.
            daemon.signal(SIGSTOP)
            for i in 0..<300 {
                let c = try LineClient(port: daemon.port)
                if i % 3 != 0 { try c.send(#"{"id":"1","method":"user.getU"#) }  // every third resets with nothing sent
                c.abort()
            }
            daemon.signal(SIGCONT)
            fds = Self.fdsSettle(daemon, to: baseline)
            #expect(fds <= baseline, "\(fds - baseline) of 300 reset peers still hold an fd (baseline \(baseline))")

            // The fd count can settle while the last resets still wait in the listen backlog (not
            // yet the daemon's fds): the count of connections must come down to the probe's own.
            let probe = try LineClient(port: daemon.port)
            var stats = try Reply(probe.request(#"{"id":"s","method":"system.stats"}"#))
            let watch = Stopwatch()
            while (stats.param?["connections"] as? [String: Any])?["current"] as? Int != 1 && watch.seconds < 5 {
                usleep(50_000)
                stats = try Reply(probe.request(#"{"id":"s","method":"system.stats"}"#))
            }
            let connections = try #require(stats.param?["connections"] as? [String: Any])
            #expect(connections["current"] as? Int == 1, "\(stats.line)")
        }
    }

    @Test("big requests from peers that reset before the daemon reads them are never served")
    func noWorkForPeersThatAreGone() throws {
        try withDaemon { daemon in
            // Each listUsers reply is about 300 KB.
            try Self.seed(daemon.port, count: 1000, nameBytes: 300)
            let baseline = try Self.baselineFDs(daemon)
            let before = try Self.served(daemon.port, "user.listUsers")

            daemon.signal(SIGSTOP)
            let batch = String(repeating: #"{"id":"x","method":"user.listUsers"}"# + "\n", count: 20)
            for _ in 0..<100 {
                let c = try LineClient(port: daemon.port)
                try c.send(batch)
                c.abort()
            }
            daemon.signal(SIGCONT)

            // A new client is served promptly: nothing of the 2000 big lists stands in its way.
            let probe = try LineClient(port: daemon.port, timeout: 10)
            #expect(try probe.request(#"{"id":"p","method":"system.ping"}"#).contains("pingResult"))
            probe.close()
            let fds = Self.fdsSettle(daemon, to: baseline)
            #expect(fds <= baseline, "\(fds - baseline) reset peers still hold an fd")
            let after = try Self.served(daemon.port, "user.listUsers")
            #expect(after - before == 0, "served \(after - before) of 2000 list requests from peers that had reset")
            if let rss = daemon.peakRSSKiB() { #expect(rss < 200 * 1024, "peak RSS \(rss) KiB") }
        }
    }

    @Test("a reply larger than max_output_bytes is answered with replyTooLarge, and the connection stays open")
    func replyTooLarge() throws {
        try withDaemon(extraArguments: ["--max-output-bytes", "262144"]) { daemon in
            try Self.seed(daemon.port, count: 3000, nameBytes: 40)
            let c = try LineClient(port: daemon.port)
            let reply = try c.request(#"{"id":"big","method":"user.listUsers","param":{}}"#)
            expectError(reply, code: "replyTooLarge", id: "big")
            #expect(reply.contains("limit"), "the error says to page with limit: \(reply)")
            // Still open, and paging works.
            let page = try c.request(#"{"id":"p","method":"user.listUsers","param":{"limit":10}}"#)
            #expect(page.hasPrefix(#"{"id":"p","method":"user.listUsersResult""#), "\(page.prefix(200))")
            #expect(daemon.stderrEventually(contains: "replyTooLarge"), "the refusal is logged")
        }
    }

    @Test("the idle timeout never cuts a reply short: a reader that pauses gets every byte")
    func idleTimeoutDoesNotTruncate() throws {
        try withDaemon(extraArguments: ["--idle-timeout", "1"]) { daemon in
            // About 6 MB in one reply: far more than the socket buffers hold.
            try Self.seed(daemon.port, count: 3000, nameBytes: 2000)
            let c = try LineClient(port: daemon.port, timeout: 20, receiveBufferBytes: 64 * 1024)
            try c.sendLine(#"{"id":"all","method":"user.listUsers"}"#)
            usleep(2_500_000)  // longer than the idle timeout, with most of the reply still owed
            let line = try #require(try c.readLine())
            #expect(line.hasPrefix(#"{"id":"all","method":"user.listUsersResult""#))
            #expect(line.hasSuffix("]}}"), "the reply was cut short at \(line.utf8.count) bytes")
            #expect(line.utf8.count > 6_000_000)

            // A connection that is really idle is still closed.
            let idle = try LineClient(port: daemon.port, timeout: 5)
            #expect(try idle.readLine() == nil, "an idle connection is closed after the timeout")
        }
    }
}

@Suite("hostile peers: the daemon-wide input budget")
struct InputBudgetTests {
    @Test("peers holding unfinished lines past --max-input-bytes are shed, largest first, with a logged reason")
    func unfinishedLinesAreBounded() throws {
        // 1 MiB for the whole daemon; each peer holds 300 KB of a line with no newline.
        try withDaemon(extraArguments: ["--max-input-bytes", "1MiB"]) { daemon in
            let chunk = #"{"id":"1","method":"user.getUser","param":{"userId":""# + String(repeating: "x", count: 300_000)
            var peers: [LineClient] = []
            for _ in 0..<12 {
                let c = try LineClient(port: daemon.port, timeout: 5)
                try c.send(chunk)
                peers.append(c)
                usleep(20_000)
            }
            #expect(daemon.stderrEventually(contains: "unfinished input"), "no log line about shedding: \(daemon.stderrTail())")
            // Whoever is still connected holds at most the budget.
            var open = 0
            for c in peers where c.isSilent(for: 0.2) { open += 1 }
            #expect(open * 300_000 <= 1 << 20, "\(open) peers still hold 300 KB each past a 1 MiB budget")
            #expect(open >= 1, "the budget fits at least one peer; all \(peers.count) were shed")
            // Everyone else is served.
            let probe = try LineClient(port: daemon.port)
            #expect(try probe.request(#"{"id":"p","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test("a loop's share of the budget always fits one line of max_frame_bytes: four loops, 1 MiB in all, one 700 KB line is served")
    func oneMaximalLineIsNeverShed() throws {
        // An even split gives each of the four loops 256 KiB, less than one legitimate line.
        try withDaemon(extraArguments: ["--event-loops", "4", "--max-input-bytes", "1MiB", "--max-frame-bytes", "1MiB"]) { daemon in
            #expect(
                daemon.stderrEventually(contains: "leaves less than one line of max_frame_bytes"),
                "no warning that the split was raised: \(daemon.stderrTail())")
            let c = try LineClient(port: daemon.port, timeout: 5)
            try c.send(#"{"id":"big","method":"user.getUser","param":{"userId":""# + String(repeating: "x", count: 700_000))
            usleep(100_000)  // the daemon holds the unfinished line meanwhile
            try c.send("\"}}\n")
            let reply = try c.expectLine()
            #expect(reply.contains(#""id":"big""#), "the 700 KB line got no reply of its own: \(reply.prefix(200))")
            #expect(!daemon.stderrTail().contains("unfinished input"), "the peer was shed: \(daemon.stderrTail())")
        }
    }
}
