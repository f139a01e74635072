import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The hostile-peer tests, against a TLS listener: the limits live below TLS, so they hold there too.
@Suite("hostile peers on a TLS listener: resets, half lines, non-readers, idle, the input budget", .serialized)
struct TLSHostilePeerTests {
    static func withTLSDaemon<R>(_ extra: [String] = [], _ body: (DaemonProcess, Int, TestCertificates) throws -> R) throws -> R {
        let certs = try TestCertificates()
        return try TLSTests.withTLSDaemon(certs, extra: extra) { daemon, port in try body(daemon, port, certs) }
    }

    static func connectionsSettle(_ daemon: DaemonProcess, to count: Int, timeout: Double = 5) throws -> Int {
        let probe = try LineClient(port: daemon.port)
        let watch = Stopwatch()
        var current = -1
        repeat {
            let stats = try Reply(probe.request(#"{"id":"s","method":"system.stats"}"#))
            current = (stats.param?["connections"] as? [String: Any])?["current"] as? Int ?? -1
            if current == count { break }
            usleep(50_000)
        } while watch.seconds < timeout
        return current
    }

    @Test("peers that reset mid-handshake or after half a line, running or SIGSTOPped, release their connections")
    func resetStorms() throws {
        try Self.withTLSDaemon { daemon, port, certs in
            for i in 0..<150 {
                if i % 2 == 0 {
                    let c = try TLSLineClient(port: port, caFile: certs.ca)
                    try c.send(#"{"id":"1","method":"user.getU"#)
                    c.abort()
                } else {
                    let c = try LineClient(port: port)
                    try c.sendBytes([22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3])  // half a ClientHello
                    c.abort()
                }
            }
            daemon.signal(SIGSTOP)
            for _ in 0..<100 {
                let c = try LineClient(port: port)
                try c.sendBytes([22, 3, 1, 2, 0, 1])
                c.abort()
            }
            daemon.signal(SIGCONT)
            #expect(try Self.connectionsSettle(daemon, to: 1) == 1, "reset TLS peers still hold connections")
            let ok = try TLSLineClient(port: port, caFile: certs.ca)
            #expect(try ok.request(#"{"id":"p","method":"system.ping"}"#)?.contains("pingResult") == true)
        }
    }

    @Test("a TLS peer that leaves half a line is closed after line_timeout; one that stays idle after idle_timeout")
    func halfLinesAndIdle() throws {
        try Self.withTLSDaemon(["--line-timeout", "1", "--idle-timeout", "1"]) { daemon, port, certs in
            let half = try TLSLineClient(port: port, caFile: certs.ca)
            try half.send(#"{"id":"1","method":"user.getUser","param":{"#)
            let idle = try TLSLineClient(port: port, caFile: certs.ca)
            #expect(try idle.request(#"{"id":"p","method":"system.ping"}"#)?.contains("pingResult") == true)
            let watch = Stopwatch()
            #expect(half.readLine() == nil, "the half line's connection is closed")
            #expect(idle.readLine() == nil, "the idle connection is closed")
            #expect(watch.seconds < 5, "closed after \(watch.seconds) s")
            #expect(daemon.stderrEventually(contains: "line_timeout"), "\(daemon.stderrTail())")
        }
    }

    @Test("a TLS peer that pipelines requests and never reads is dropped at max_output_bytes; memory stays bounded; others are served")
    func nonReader() throws {
        try Self.withTLSDaemon(["--max-output-bytes", "1MiB"]) { daemon, port, certs in
            try HostilePeerTests.seed(daemon.port, count: 200, nameBytes: 200)
            let hog = try TLSLineClient(port: port, caFile: certs.ca, timeout: TestPace.seconds(3))
            let batch = String(repeating: #"{"id":"l","method":"user.listUsers"}"# + "\n", count: 100)
            var sent = 0
            do {
                for _ in 0..<200 {
                    try hog.send(batch)
                    sent += 100
                }
            } catch {
                // The daemon closed it (or the send window stayed shut past the timeout): both are fine.
            }
            #expect(daemon.stderrEventually(contains: "output cap", timeout: TestPace.seconds(10)), "sent \(sent); \(daemon.stderrTail())")
            let ok = try TLSLineClient(port: port, caFile: certs.ca)
            #expect(try ok.request(#"{"id":"p","method":"system.ping"}"#)?.contains("pingResult") == true)
            if let rss = daemon.peakRSSKiB() { #expect(rss < 200 * 1024, "peak RSS \(rss) KiB") }
        }
    }

    @Test("TLS peers holding unfinished lines past max_input_bytes are shed with a logged reason")
    func inputBudget() throws {
        try Self.withTLSDaemon(["--max-input-bytes", "1MiB"]) { daemon, port, certs in
            let chunk = #"{"id":"1","method":"user.getUser","param":{"userId":""# + String(repeating: "x", count: 300_000)
            var peers: [TLSLineClient] = []
            for _ in 0..<8 {
                let c = try TLSLineClient(port: port, caFile: certs.ca, timeout: 5)
                try? c.send(chunk)
                peers.append(c)
                usleep(20_000)
            }
            #expect(daemon.stderrEventually(contains: "unfinished input"), "no log line about shedding: \(daemon.stderrTail())")
            let ok = try TLSLineClient(port: port, caFile: certs.ca)
            #expect(try ok.request(#"{"id":"p","method":"system.ping"}"#)?.contains("pingResult") == true)
        }
    }
}
