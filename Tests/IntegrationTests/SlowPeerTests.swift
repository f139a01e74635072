import Foundation
import Testing
import TestSupport

@Suite("slow and vanishing peers")
struct SlowPeerTests {
    /// How the writer of the stuck client stopped.
    enum WriterEnd: Sendable, Equatable {
        case blocked  // send timed out: the daemon stopped reading
        case disconnected  // EPIPE / ECONNRESET
        case sentEverything
        case failed(String)
    }

    @Test("a client that never reads does not delay others and is disconnected past the (default 8 MiB) output cap")
    func stuckClient() throws {
        try stuckClientScenario(extraArguments: [])
    }

    @Test("--max-output-bytes 256 KiB: a stuck client is dropped past the configured cap")
    func stuckClientSmallCap() throws {
        try stuckClientScenario(extraArguments: ["--max-output-bytes", "262144"])
    }

    private func stuckClientScenario(extraArguments: [String]) throws {
        try withDaemon(extraArguments: extraArguments) { daemon in
            let port = daemon.port
            // Big records, so each tiny listUsers request produces a ~40 KB reply.
            let setup = try LineClient(port: port)
            let name = String(repeating: "n", count: 2000)
            for i in 0..<20 {
                let id = String(format: "s%02d", i)
                #expect(try setup.request(Wire.createUser(id, id, name, "\(id)@example.com")).contains("createUserResult"))
            }

            // A small receive buffer on the stuck client, so the daemon's own output buffer fills fast.
            let stuck = try LineClient(port: port, timeout: 2, receiveBufferBytes: 64 * 1024)
            let stuckFD = stuck.fd
            let maxRequests = 3000  // ~120 MB of replies: far past an 8 MiB cap plus socket buffers
            let sent = Locked(0)
            let writer = BackgroundJob<WriterEnd> {
                let line = Array(#"{"id":"x","method":"user.listUsers"}"#.utf8) + [10]
                let batch = Array([[UInt8]](repeating: line, count: 10).joined())
                while sent.current < maxRequests {
                    do {
                        try sendAll(fd: stuckFD, batch)
                    } catch let error as LineClientError {
                        if case .timeout = error { return .blocked }
                        if case .closedByPeer = error { return .disconnected }
                        return .failed("\(error)")
                    } catch {
                        return .failed("\(error)")
                    }
                    sent.withLock { $0 += 10 }
                }
                return .sentEverything
            }

            // While the stuck client is flooding, another client's round trips stay fast.
            let watch = Stopwatch()
            while sent.current < 300 && watch.seconds < 10 { usleep(10_000) }
            let other = try LineClient(port: port, timeout: 10)
            var slowest = 0.0
            for i in 0..<5 {
                let rtt = Stopwatch()
                let reply = try other.request(Wire.getUser("o\(i)", "s01"))
                slowest = max(slowest, rtt.seconds)
                #expect(reply.hasPrefix(#"{"id":"o\#(i)","method":"user.getUserResult""#), "\(reply.prefix(100))")
                usleep(50_000)
            }
            // Scaled under a sanitizer (`TestPace`): the ThreadSanitizer run took 2.09 s here.
            #expect(slowest < TestPace.seconds(2), "another client's round trip took \(slowest) s while a peer was stuck")

            let end = writer.wait(timeout: 30)
            #expect(end != nil, "the stuck client's writer neither blocked nor was disconnected within 30 s")
            if case .failed(let why) = end { Issue.record("writer failed: \(why)") }
            let requestsSent = sent.current

            // The daemon must have dropped the stuck connection: draining it ends in EOF/reset before
            // the replies to everything we sent have arrived.
            usleep(500_000)
            let drained = stuck.drainUntilClosed(silenceTimeout: 5)
            #expect(drained.end != .timeout,
                "the stuck client was never disconnected (writer: \(String(describing: end)), read \(drained.bytes) bytes, \(drained.lines) replies, sent \(requestsSent))")
            #expect(drained.lines < requestsSent, "got all \(drained.lines) replies: the output was never capped")

            // The drop is logged.
            let logged = daemon.stderrText.lowercased()
            #expect(["dropped", "disconnect", "overflow", "output cap", "not reading"].contains { logged.contains($0) },
                "no log line about dropping the stuck peer in stderr:\n\(daemon.stderrTail())")

            // The daemon is alive and serving.
            #expect(daemon.isRunning)
            let after = try LineClient(port: port)
            #expect(try after.request(Wire.getUser("z", "s00")).hasPrefix(#"{"id":"z","method":"user.getUserResult""#))
        }
    }

    @Test("peers that close or reset with unread replies never kill the daemon (SIGPIPE)")
    func peerClosesWithUnreadReplies() throws {
        try withDaemon { daemon in
            let setup = try LineClient(port: daemon.port)
            let name = String(repeating: "r", count: 500)
            for i in 0..<10 {
                _ = try setup.request(Wire.createUser("r\(i)", "r\(i)", name, "r\(i)@example.com"))
            }
            let batch = String(repeating: #"{"id":"x","method":"user.listUsers"}"# + "\n", count: 1000)
            for round in 0..<20 {
                let c = try LineClient(port: daemon.port, receiveBufferBytes: 4096)
                try c.send(batch)
                if round % 2 == 0 { c.close() } else { c.abort() }  // FIN vs RST
            }
            // Give the daemon time to hit EPIPE / ECONNRESET on its writes.
            usleep(500_000)
            #expect(daemon.isRunning, "rpcd died: \(daemon.isRunning ? "" : daemon.exitDescription.text)")
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Wire.getUser("p", "r3")).hasPrefix(#"{"id":"p","method":"user.getUserResult""#))
        }
    }
}

/// A blocking send of all bytes on `fd` (used from a background thread that owns no LineClient).
func sendAll(fd: Int32, _ bytes: [UInt8]) throws {
    try bytes.withUnsafeBytes { raw in
        var offset = 0
        while offset < raw.count {
            let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
            if n > 0 {
                offset += n
                continue
            }
            let e = errno
            if n < 0 && e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { throw LineClientError.timeout("send") }
            if e == EPIPE || e == ECONNRESET { throw LineClientError.closedByPeer(errno: e) }
            throw LineClientError.failed("send", errno: e)
        }
    }
}
