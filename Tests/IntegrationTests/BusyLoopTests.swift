import Foundation
import Testing

/// A loop that is never idle still runs the work queued on it: a turn lingers for the next event
/// while it keeps serving, up to a bound, and a connection to add or a stats visit waits for the
/// turn to end. A turn without that bound would leave them waiting as long as the load lasts.
@Suite("a busy loop")
struct BusyLoopTests {
    @Test("one loop kept busy by a pipelining peer still takes new connections and answers system.stats")
    func newConnectionsAndStatsUnderLoad() throws {
        try withDaemon(extraArguments: ["--event-loops", "1"]) { daemon in
            let port = daemon.port
            let stop = Locked(false)
            let answered = Locked(0)
            let failure = Locked<String?>(nil)
            let flooder = Thread {
                do {
                    let c = try LineClient(port: port, timeout: 10)
                    let batch = String(repeating: #"{"id":"p","method":"system.ping"}"# + "\n", count: 256)
                    // Two batches in flight: the loop always has a line to read.
                    try c.send(batch)
                    while !stop.current {
                        try c.send(batch)
                        for _ in 0..<256 { _ = try c.expectLine() }
                        answered.withLock { $0 += 256 }
                    }
                    for _ in 0..<256 { _ = try c.expectLine() }
                } catch {
                    failure.withLock { $0 = "flooding peer: \(error)" }
                }
            }
            flooder.start()
            defer { stop.withLock { $0 = true } }
            let watch = Stopwatch()
            while answered.current < 10_000 && failure.current == nil && watch.seconds < 20 { usleep(1_000) }
            #expect(answered.current >= 10_000, "the flooding peer got \(answered.current) replies in 20 s")

            let before = answered.current
            for round in 0..<5 {
                let c = try LineClient(port: port, timeout: 5)
                let ping = try c.request(#"{"id":"n\#(round)","method":"system.ping"}"#)
                #expect(ping.contains("system.pingResult"), "round \(round): \(ping.prefix(200))")
                let stats = try c.request(#"{"id":"s\#(round)","method":"system.stats"}"#)
                #expect(stats.contains("system.statsResult"), "round \(round): \(stats.prefix(200))")
            }
            // The loop was kept busy all along (the flood went on). Over the five rounds, not per
            // round: one round can be over before the flooding thread is next scheduled.
            #expect(answered.current > before, "the flooding peer made no progress while five peers connected")
            stop.withLock { $0 = true }
            let drained = Stopwatch()
            while !flooder.isFinished && drained.seconds < 10 { usleep(1_000) }
            #expect(failure.current == nil, "\(failure.current ?? "")")
        }
    }
}
