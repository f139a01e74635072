import Foundation
import RPCSchema
#if canImport(Glibc)
import Glibc
#endif

/// `--followers N`: N `rpcd serve --follow LEADER` daemons beside a spawned leader, each on a
/// fresh data directory with the leader's arguments (its `--fsync`). Ready once the leader lists
/// N subscribers.
final class FollowerSet {
    let daemons: [SpawnedDaemon]

    init(binary: String, leaderPort: Int, count: Int, extraArguments: [String]) throws {
        var daemons: [SpawnedDaemon] = []
        for _ in 0..<count {
            daemons.append(try SpawnedDaemon(
                binary: binary, dataDir: freshDataDir(), extraArguments: extraArguments + ["--follow", "127.0.0.1:\(leaderPort)"]))
        }
        self.daemons = daemons
        let leader = try StatsProbe(port: leaderPort)
        let deadline = Date().addingTimeInterval(30)
        while (try leader.stats().replication?.subscribers.count ?? 0) < count {
            guard Date() < deadline else { throw UsageError("the leader lists fewer than \(count) subscribers 30 s after the followers started") }
            usleep(10_000)
        }
    }

    var ports: [Int] { daemons.map(\.port) }

    /// CPU seconds the followers used so far, all together.
    func cpuSeconds() -> Double { daemons.reduce(0) { $0 + $1.cpuSeconds() } }

    /// Kills the followers and removes their data directories.
    func kill() {
        for daemon in daemons {
            daemon.kill()
            Cleanup.removeDirectory(daemon.dataDir)
        }
    }
}

/// `system.stats` over one blocking connection of its own.
final class StatsProbe {
    private let fd: Int32
    private var input: [UInt8] = []
    private let decoder = JSONValueDecoder()
    private static let request = Array(#"{"id":"stats","method":"system.stats"}"#.utf8) + [UInt8(ascii: "\n")]

    init(port: Int) throws {
        fd = try openConnection(host: "127.0.0.1", port: port)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func stats() throws -> StatsResult {
        let sent = Self.request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == Self.request.count else { throw UsageError("system.stats: send failed: \(String(cString: strerror(errno)))") }
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while !input.contains(UInt8(ascii: "\n")) {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw UsageError("system.stats: the daemon closed the connection or did not answer within 10 s") }
            input += buffer[0..<n]
        }
        let newline = input.firstIndex(of: UInt8(ascii: "\n"))!
        let line = Array(input[..<newline])
        input.removeSubrange(...newline)
        guard case .counterRequest(let reply) = line.withUnsafeBytes({ RequestCodec.decode($0) }),
            reply.method == SystemStats.method.result, let param = reply.param,
            let stats = try? decoder.decode(StatsResult.self, from: param)
        else { throw UsageError("system.stats: not a stats reply: \(String(decoding: line.prefix(300), as: UTF8.self))") }
        return stats
    }
}

/// Follower lag in records, sampled every 10 ms on a thread of its own over `[from, until)`
/// (monotonic nanoseconds): each of the leader's `replication.subscribers[].lagRecords`, or, when
/// the leader lists fewer subscribers than there are followers, the leader's sequence less each
/// follower's own `replication.sequence`. Also samples the leader's last fsync latency.
final class LagSampler: @unchecked Sendable {
    // @unchecked: `samples`, `fsyncMicroseconds`, `failure` and `stopping` are guarded by `lock`;
    // the probes are used only by the sampling thread.
    struct Figures {
        var samples: [Int]
        /// Sampling rounds (one `system.stats` of the leader each).
        var rounds = 0
        /// Whether any sample came from the followers' own sequence numbers.
        var fallback: Bool
        var meanFsyncMicroseconds: Double
        var failure: String?

        func percentile(_ q: Double) -> Int {
            guard !samples.isEmpty else { return 0 }
            let sorted = samples.sorted()
            return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * q).rounded(.up)) - 1))]
        }
    }

    private let lock = NSLock()
    private var figures = Figures(samples: [], fallback: false, meanFsyncMicroseconds: 0)
    private var fsyncTotal = 0.0
    private var fsyncCount = 0
    private var stopping = false
    private let done = DispatchSemaphore(value: 0)
    private let leader: StatsProbe
    private let followers: [StatsProbe]
    private let expected: Int

    init(leaderPort: Int, followerPorts: [Int]) throws {
        leader = try StatsProbe(port: leaderPort)
        followers = try followerPorts.map { try StatsProbe(port: $0) }
        expected = followerPorts.count
    }

    func start(from: UInt64, until: UInt64) {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            while nowNanoseconds() < until && !lock.withLock({ stopping }) {
                let tick = nowNanoseconds()
                if tick >= from {
                    do {
                        try sample()
                    } catch {
                        lock.withLock { figures.failure = figures.failure ?? "\(error)" }
                        return
                    }
                }
                let next = tick + 10_000_000
                let now = nowNanoseconds()
                if next > now { usleep(UInt32((next - now) / 1000)) }
            }
        }
    }

    /// Waits for the sampling thread and returns what it saw.
    func stop() -> Figures {
        lock.withLock { stopping = true }
        done.wait()
        return lock.withLock {
            var result = figures
            result.meanFsyncMicroseconds = fsyncCount > 0 ? fsyncTotal / Double(fsyncCount) : 0
            return result
        }
    }

    private func sample() throws {
        let stats = try leader.stats()
        let subscribers = stats.replication?.subscribers ?? []
        var lags = subscribers.map(\.lagRecords)
        var fallback = false
        if subscribers.count < expected {
            let leaderSequence = stats.replication?.sequence ?? 0
            lags = try followers.map { max(0, leaderSequence - (try $0.stats().replication?.sequence ?? 0)) }
            fallback = true
        }
        lock.withLock {
            figures.samples += lags
            figures.rounds += 1
            figures.fallback = figures.fallback || fallback
            if stats.journal.lastFsyncMicroseconds > 0 {
                fsyncTotal += Double(stats.journal.lastFsyncMicroseconds)
                fsyncCount += 1
            }
        }
    }

    /// After the load: milliseconds until every follower holds the leader's last sequence (nil
    /// if not within `timeout` seconds).
    func catchUp(timeout: Double = 30) throws -> (milliseconds: Int, sequence: Int)? {
        let started = nowNanoseconds()
        let deadline = started + UInt64(timeout * 1e9)
        let target = try leader.stats().replication?.sequence ?? 0
        while nowNanoseconds() < deadline {
            if try followers.allSatisfy({ (try $0.stats().replication?.sequence ?? 0) >= target }) {
                return (Int((nowNanoseconds() - started) / 1_000_000), target)
            }
            usleep(2_000)
        }
        return nil
    }
}

/// Prints the followers' rows (for 0 followers, only the leader's fsync batch) and the LAG line;
/// returns the errors (lag not sampled, followers that did not catch up).
func printFollowerFigures(
    _ lag: LagSampler.Figures, catchUp: (milliseconds: Int, sequence: Int)?, followers: Int, leaderPort: Int, writesPerSecond: Int,
    batchRecords: Double?, cpuPercent: Double
) -> Int {
    // Group commit: about as many writes share an fsync as arrive while one runs, when fsyncs run
    // back to back; at a rate the writer idles between them, and the journal's own count says it.
    let batch = Int((Double(writesPerSecond) * lag.meanFsyncMicroseconds / 1e6).rounded())
    let measured = batchRecords.map { Int($0.rounded()) }
    if followers > 0 {
        print("followers   \(followers) (rpcd serve --follow 127.0.0.1:\(leaderPort), each with its own data directory)")
        print("follower CPU \(String(format: "%.0f", cpuPercent))% of one core, all together")
    } else {
        print("followers   0")
    }
    if lag.meanFsyncMicroseconds > 0 && writesPerSecond > 0 {
        print("fsync batch ≈ \(batch) records (\(writesPerSecond) writes/s × the leader's mean fsync \(Int(lag.meanFsyncMicroseconds)) µs)"
            + (measured.map { "; the journal's: \($0) records a batch" } ?? ""))
    }
    var errors = 0
    if let failure = lag.failure {
        print("lag error   \(failure)")
        errors += 1
    }
    guard followers > 0 else { return errors }
    let p50 = lag.percentile(0.5)
    let p99 = lag.percentile(0.99)
    let most = lag.samples.max() ?? 0
    let source = lag.fallback ? "the leader's sequence less each follower's" : "the leader's subscribers[].lagRecords"
    print("lag records p50 \(p50)  p99 \(p99)  max \(most)  (\(lag.samples.count) samples of \(source), \(lag.rounds) rounds aimed 10 ms apart)")
    if let catchUp {
        print("caught up   \(catchUp.milliseconds) ms after the load (every follower at the leader's sequence \(catchUp.sequence))")
    } else {
        print("caught up   NO: a follower is behind the leader 30 s after the load")
        errors += 1
    }
    print(
        "LAG followers=\(followers) p50_records=\(p50) p99_records=\(p99) max_records=\(most) samples=\(lag.samples.count) "
            + "batch_est=\(batch) batch_records=\(measured.map(String.init) ?? "none") catchup_ms=\(catchUp.map { "\($0.milliseconds)" } ?? "none")")
    return errors
}

/// What a record costs each process with `--followers` (create loads): the leader's CPU per
/// durable write, each follower's CPU per record it applied over the same seconds (from /proc and
/// the followers' own `replication.sequence`), and their ratio.
final class RecordCosts {
    private let daemons: [SpawnedDaemon]
    private let probes: [StatsProbe]
    private let cpuBefore: [Double]
    private let sequenceBefore: [Int]
    /// The leader's µs per write of each run, by follower count (`--followers 0,2` compares them).
    nonisolated(unsafe) static var leaderMicroseconds: [Int: [Double]] = [:]

    init(followers: FollowerSet) throws {
        daemons = followers.daemons
        probes = try followers.ports.map { try StatsProbe(port: $0) }
        cpuBefore = daemons.map { $0.cpuSeconds() }
        sequenceBefore = try probes.map { try $0.stats().replication?.sequence ?? 0 }
    }

    /// Each follower's CPU µs per record applied since `init`.
    func measure() throws -> [Double] {
        try daemons.indices.map { index in
            let cpu = daemons[index].cpuSeconds() - cpuBefore[index]
            let applied = (try probes[index].stats().replication?.sequence ?? 0) - sequenceBefore[index]
            return applied > 0 ? cpu * 1e6 / Double(applied) : 0
        }
    }

    static func print(_ followers: [Double], followers count: Int, writesPerSecond: Int, leaderCPU: Double?, elapsed: Double) {
        let writes = Double(writesPerSecond) * elapsed
        let leader = leaderCPU.map { writes > 0 ? $0 * 1e6 / writes : 0 } ?? 0
        leaderMicroseconds[count, default: []].append(leader)
        Swift.print("leader CPU  \(String(format: "%.2f", leader)) µs per durable write (\(writesPerSecond) writes/s)")
        for (index, cost) in followers.enumerated() {
            Swift.print("follower \(index + 1)  \(String(format: "%.2f", cost)) µs CPU per applied record (\(String(format: "%.2f", leader > 0 ? cost / leader : 0)) × the leader's per write)")
        }
        let each = followers.map { String(format: "%.2f", $0) }.joined(separator: ",")
        let worst = followers.max() ?? 0
        Swift.print(
            "COST followers=\(count) leader_wps=\(writesPerSecond) leader_cpu_us_per_write=\(String(format: "%.2f", leader)) "
                + "follower_cpu_us_per_record=\(each.isEmpty ? "none" : each) follower_over_leader=\(String(format: "%.2f", leader > 0 ? worst / leader : 0))")
    }

    /// `RATIO leader_cpu_per_write followers=N/followers=0` when both ran.
    static func printLeaderRatios() {
        guard let alone = leaderMicroseconds[0], !alone.isEmpty else { return }
        for (count, runs) in leaderMicroseconds.sorted(by: { $0.key < $1.key }) where count > 0 {
            let base = median(alone)
            Swift.print("RATIO leader_cpu_per_write followers=\(count)/followers=0 = \(String(format: "%.2f", base > 0 ? median(runs) / base : 0)) (µs \(String(format: "%.2f", median(runs))) / \(String(format: "%.2f", base)))")
        }
    }
}
