import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// rpcbench runs each workload for a second against a daemon it spawns, with no errors.
/// A smoke test of the tool, not a timed test: figures are not asserted.
///
/// Each run gets a temporary directory of its own as TMPDIR (rpcbench's `NSTemporaryDirectory()`), so
/// the count of `rpcbench-*` entries in it, the same before and after the run, is not disturbed by
/// other runs on the machine.
@Suite("rpcbench smoke") struct RPCBenchSmokeTests {
    @Test("rpcbench reports zero errors and leaves no rpcbench-* in its temporary directory", arguments: ["get", "create", "mixed"])
    func workload(_ workload: String) throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        let outcome = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--workload", workload, "--duration", "1", "--warmup", "0.2",
             "--conns", "4", "--depth", "4", "--users", "50"],
            timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT ") } ?? ""
        #expect(result.contains("workload=\(workload)"), "no RESULT line: \(outcome.stdout)")
        #expect(result.contains(" errors=0"), "\(result)")
        let rps = result.split(separator: " ").first { $0.hasPrefix("rps=") }.flatMap { Int($0.dropFirst(4)) } ?? 0
        #expect(rps > 0, "\(result)")
        // The group commit's line (from system.stats before and after): only when the run wrote.
        let journal = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("journal ") }
        #expect((journal != nil) == (workload != "get"), "\(outcome.stdout)")
        if let journal { #expect(journal.contains(" batches/s of ") && journal.contains(" fsyncs/s"), "\(journal)") }
        #expect(temp.rpcbenchEntries() == before, "rpcbench left its data directory behind")
    }

    @Test("rpcbench --catch-up: a follower started empty and one restarted behind both get in sync")
    func catchUp() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        let outcome = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--catch-up", "2000"], timeout: 120)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT catchup=2000 ") } ?? ""
        #expect(result.contains(" behind=400 ") && result.contains(" catchup_rps=") && result.hasSuffix(" errors=0"), "\(outcome.stdout)")
        #expect(temp.rpcbenchEntries() == before, "rpcbench left its directories behind")
    }

    /// The limiter can only hold a load back: more than the rate (a tenth over, for the edges of
    /// the run) is a limiter that does not limit.
    @Test("rpcbench --rate: no more requests per second than asked, with zero errors")
    func rate() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let outcome = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--workload", "get", "--rate", "2000", "--duration", "1", "--warmup", "0.2", "--conns", "4", "--depth", "4"],
            timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT ") } ?? ""
        let rps = result.split(separator: " ").first { $0.hasPrefix("rps=") }.flatMap { Double($0.dropFirst(4)) } ?? -1
        #expect(rps > 0 && rps <= 2200 && result.contains(" errors=0"), "\(outcome.stdout)")
    }

    @Test("rpcbench --memory: bytes per record of the daemon (and of Redis when it is installed), with zero errors")
    func memory() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        let outcome = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--memory", "20000"], timeout: 120)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT target=rpcd memory_records=20000 ") } ?? ""
        let bytes = result.split(separator: " ").first { $0.hasPrefix("bytes_per_record=") }.flatMap { Int($0.dropFirst("bytes_per_record=".count)) }
        #expect(result.hasSuffix(" errors=0") && (bytes ?? 0) > 50, "\(outcome.stdout)")
        let uuids = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--memory", "20000", "--uuid-ids"], timeout: 120)
        #expect(uuids.status == 0 && uuids.stdout.contains(#"users {"id":"9e3779b1-0001-4001-9000-000000000001","#), "\(uuids.stdout)\(uuids.stderr)")
        #expect(temp.rpcbenchEntries() == before, "rpcbench left its directories behind")
    }

    @Test("rpcbench --recovery, with UUIDs for ids: the restarted daemon has the last record written")
    func recovery() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        for shape in [[], ["--uuid-ids"]] {
            let outcome = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--recovery", "5000"] + shape, timeout: 120)
            #expect(outcome.status == 0, "rpcbench \(shape) failed: \(outcome.stdout)\(outcome.stderr)")
            #expect(outcome.stdout.contains("last record present after restart: yes") && outcome.stdout.contains("RESULT recovery=5000 "), "\(outcome.stdout)")
        }
        let misplaced = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--uuid-ids"], timeout: 30)
        #expect(misplaced.status == 2 && misplaced.stderr.contains("--uuid-ids shapes the users of --memory and --recovery"), "\(misplaced.stderr)")
        #expect(temp.rpcbenchEntries() == before, "rpcbench left its directories behind")
    }

    @Test("rpcbench --tls: the load over rpcd's tls: listener, and idle TLS connections, with zero errors")
    func overTLS() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        let load = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--tls", "--workload", "create", "--duration", "1", "--warmup", "0.2", "--conns", "4", "--depth", "4"],
            timeout: 60)
        #expect(load.status == 0, "rpcbench failed: \(load.stdout)\(load.stderr)")
        let result = load.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT ") } ?? ""
        #expect(result.contains(" errors=0") && !result.contains(" rps=0 "), "\(load.stdout)")
        let rate = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--tls", "--connect-rate", "0.5"], timeout: 60)
        #expect(rate.status == 0 && rate.stdout.contains("RESULT target=rpcd connect_rate=") && rate.stdout.contains("errors=0"), "\(rate.stdout)\(rate.stderr)")
        let idle = try temp.runBench(["--spawn", try Binaries.rpcd().path, "--tls", "--idle", "20"], timeout: 60)
        #expect(idle.status == 0 && idle.stdout.contains("TLS, handshake done"), "\(idle.stdout)\(idle.stderr)")
        #expect(temp.rpcbenchEntries() == before, "rpcbench left its directories behind")
    }

    @Test(
        "rpcbench --compare redis: rpcd and a spawned redis-server both report zero errors",
        .enabled(if: Binaries.onPath("redis-server") != nil, "redis-server is not installed (apt-get install redis-server)"),
        arguments: [["--workload", "get"], ["--workload", "create", "--fsync", "always"], ["--workload", "create"]])
    func compareRedis(_ workload: [String]) throws {
        try compare("redis", workload)
    }

    @Test("rpcbench --compare floor: rpcd and the built-in floor both report zero errors")
    func compareFloor() throws {
        try compare("floor", ["--workload", "get"])
    }

    @Test("rpcbench --compare floor --rounds 2: the second round runs the floor first, then the median of both rounds")
    func compareRoundsAlternate() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let outcome = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--compare", "floor", "--rounds", "2", "--duration", "0.5", "--warmup", "0.1",
             "--conns", "2", "--depth", "2", "--users", "20"],
            timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let lines = outcome.stdout.split(separator: "\n")
        // Row order: rpcd, floor; then floor, rpcd.
        let rows = lines.filter { $0.hasPrefix("RESULT ") }.map { $0.hasPrefix("RESULT target=floor ") ? "floor" : "rpcd" }
        #expect(rows == ["rpcd", "floor", "floor", "rpcd"], "\(outcome.stdout)")
        let ratios = lines.filter { $0.hasPrefix("RATIO rpcd/floor = ") }
        #expect(ratios.count == 3, "\(outcome.stdout)")
        #expect(ratios.last?.contains("(median of 2 rounds: ") == true, "\(outcome.stdout)")
    }

    /// Runs rpcd then `reference` on the same 1 s load; checks both RESULT rows, the RATIO line, and
    /// that nothing (rpcd's data directory, Redis's) is left in the temporary directory.
    private func compare(_ reference: String, _ workload: [String]) throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let before = temp.rpcbenchEntries()
        let outcome = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--compare", reference, "--duration", "1", "--warmup", "0.2",
             "--conns", "4", "--depth", "4", "--users", "50"] + workload,
            timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let lines = outcome.stdout.split(separator: "\n")
        for prefix in ["RESULT workload=", "RESULT target=\(reference) workload="] {
            let result = lines.first { $0.hasPrefix(prefix) } ?? ""
            #expect(result.contains(" errors=0"), "no \(prefix)… errors=0 line: \(outcome.stdout)")
            let rps = result.split(separator: " ").first { $0.hasPrefix("rps=") }.flatMap { Int($0.dropFirst(4)) } ?? 0
            #expect(rps > 0, "\(result)")
        }
        #expect(lines.contains { $0.hasPrefix("RATIO rpcd/\(reference) = ") }, "no RATIO line: \(outcome.stdout)")
        // Durable creates (--fsync always, or rpcd's default with no --fsync) meet a Redis whose
        // AOF is fsynced before each reply; gets meet one that persists nothing.
        if reference == "redis" {
            let redis = lines.first { $0.hasPrefix("RESULT target=redis ") } ?? ""
            #expect(redis.contains(" appendfsync=always") == workload.contains("create"), "\(redis)")
        }
        #expect(temp.rpcbenchEntries() == before, "rpcbench left a temporary directory behind")
    }

    @Test("rpcbench --followers 0,1: a RESULT row per count, the follower's lag and catch-up, the ratio; nothing left behind")
    func followers() throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let outcome = try temp.runBench(
            ["--spawn", try Binaries.rpcd().path, "--workload", "create", "--fsync", "always", "--followers", "0,1",
             "--duration", "1", "--warmup", "0.2", "--conns", "4", "--depth", "4"],
            timeout: 90)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let lines = outcome.stdout.split(separator: "\n")
        for count in [0, 1] {
            let result = lines.first { $0.hasPrefix("RESULT ") && $0.contains(" followers=\(count) ") } ?? ""
            #expect(result.contains(" errors=0"), "no RESULT … followers=\(count) … errors=0 line: \(outcome.stdout)")
        }
        let lag = lines.first { $0.hasPrefix("LAG followers=1 ") } ?? ""
        #expect(lag.contains(" p99_records=") && !lag.contains("samples=0 ") && !lag.contains("catchup_ms=none"), "\(outcome.stdout)")
        // The leader's group-commit batch as its journal counted it (records / batches), beside the estimate.
        #expect(lag.contains(" batch_records=") && !lag.contains("batch_records=none") && !lag.contains("batch_records=0 "), "\(outcome.stdout)")
        #expect(lines.contains { $0.hasPrefix("RATIO followers=1/followers=0 = ") }, "no RATIO line: \(outcome.stdout)")
        #expect(temp.rpcbenchEntries().isEmpty && temp.processesNamingIt().isEmpty, "left behind: \(temp.rpcbenchEntries())")
    }

    @Test("rpcbench --in-process --batch runs the daemon's staged path (decode, stage, run a batch) with no error replies", arguments: ["get", "create", "mixed"])
    func inProcessBatched(_ workload: String) throws {
        let outcome = try runProcess(
            try Binaries.rpcbench(), ["--in-process", "3000", "--workload", workload, "--batch", "16", "--users", "50"], timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        #expect(outcome.stdout.contains("in batches of 16"), "\(outcome.stdout)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT inprocess=3000 workload=\(workload) ") } ?? ""
        #expect(result.contains(" errors=0"), "no RESULT … errors=0 line: \(outcome.stdout)")
    }

    @Test("rpcbench --followers without --spawn or with a bad count, --batch without --in-process or past 4096: exit 2 with one line naming the flag", arguments: [
        ["--connect", "127.0.0.1:1", "--followers", "2"], ["--spawn", "/bin/false", "--followers", "two"], ["--spawn", "/bin/false", "--followers", "-1"],
        ["--connect", "127.0.0.1:1", "--batch", "16"], ["--in-process", "10", "--batch", "5000"], ["--in-process", "10", "--batch", "0"],
    ])
    func flagMisused(_ arguments: [String]) throws {
        let flag = arguments.first { $0 == "--followers" || $0 == "--batch" } ?? ""
        let outcome = try runProcess(try Binaries.rpcbench(), arguments, timeout: 30)
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("rpcbench: \(flag) ") && outcome.stderr.split(separator: "\n").count == 1, "\(outcome.stderr)")
    }

    @Test("rpcbench --rounds outside 1...100 exits 2 with one line that names the range", arguments: ["0", "101", "many"])
    func roundsOutOfRange(_ rounds: String) throws {
        let outcome = try runProcess(try Binaries.rpcbench(), ["--spawn", "/bin/false", "--keys", "both", "--rounds", rounds], timeout: 30)
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("rpcbench: --rounds ") && outcome.stderr.split(separator: "\n").count == 1, "\(outcome.stderr)")
        if rounds == "101" { #expect(outcome.stderr.contains("1 to 100"), "\(outcome.stderr)") }
    }

    @Test("rpcbench --compare redis without redis-server on PATH exits 2 with one line")
    func compareRedisMissing() throws {
        let outcome = try runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["PATH=/nonexistent", try Binaries.rpcbench().path, "--spawn", try Binaries.rpcd().path, "--compare", "redis"], timeout: 30)
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("rpcbench: ") && outcome.stderr.split(separator: "\n").count == 1, "\(outcome.stderr)")
    }

    @Test("rpcbench stopped by SIGTERM or SIGINT mid-run kills its daemon and removes its data directory", arguments: [SIGTERM, SIGINT])
    func interrupted(_ signalNumber: Int32) throws {
        let temp = try BenchTemp()
        defer { temp.remove() }
        let process = Process()
        process.executableURL = try Binaries.rpcbench()
        process.arguments = ["--spawn", try Binaries.rpcd().path, "--duration", "60", "--warmup", "0", "--conns", "2", "--depth", "2", "--users", "10"]
        process.environment = ProcessInfo.processInfo.environment.merging(["TMPDIR": temp.path]) { $1 }
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        // Running: the daemon is up on its data directory, and half a second later under load.
        let deadline = Date().addingTimeInterval(30)
        while temp.processesNamingIt().isEmpty && process.isRunning && Date() < deadline { usleep(20_000) }
        usleep(500_000)
        #expect(temp.rpcbenchEntries().count == 1, "no data directory while running")
        #expect(!temp.processesNamingIt().isEmpty, "no daemon while running")
        kill(process.processIdentifier, signalNumber)
        let exitDeadline = Date().addingTimeInterval(20)
        while process.isRunning && Date() < exitDeadline { usleep(10_000) }
        #expect(!process.isRunning, "rpcbench still running 20 s after the signal")
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal && process.terminationStatus == signalNumber)
        #expect(temp.rpcbenchEntries().isEmpty, "left behind: \(temp.rpcbenchEntries())")
        #expect(temp.processesNamingIt().isEmpty, "a daemon outlived rpcbench")
    }

    @Test("rpcbench against a server that echoes each line (its id, but the request's method, not the result's): exit 1, every reply counted as another request's")
    func echoedRepliesDoNotMatch() throws {
        let echo = try EchoServer()
        defer { echo.stop() }
        let outcome = try runProcess(
            try Binaries.rpcbench(),
            ["--connect", "127.0.0.1:\(echo.port)", "--workload", "create", "--conns", "1", "--depth", "1", "--duration", "0.3", "--warmup", "0"],
            timeout: 30)
        #expect(outcome.status == 1, "rpcbench took echoed requests for replies: \(outcome.stdout)\(outcome.stderr)")
        let errors = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("errors ") } ?? ""
        #expect(errors.contains(" 0 error replies, ") && !errors.contains(" 0 replies with another id or method"), "\(outcome.stdout)")
        #expect(outcome.stdout.contains(#""method":"user.createUser""#) || outcome.stderr.contains(#""method":"user.createUser""#),
                "the first mismatch is shown: \(outcome.stdout)\(outcome.stderr)")
    }

    @Test("rpcbench fails with exit 2 and one line when it cannot connect")
    func unreachable() throws {
        let outcome = try runProcess(try Binaries.rpcbench(), ["--connect", "127.0.0.1:1", "--duration", "1"], timeout: 30)
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("rpcbench: ") && outcome.stderr.split(separator: "\n").count == 1)
    }
}

/// A temporary directory given to one rpcbench run as its TMPDIR.
private struct BenchTemp {
    /// With a trailing `/`, as `NSTemporaryDirectory()` returns it.
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "bench-smoke-\(UUID().uuidString.prefix(8))/"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    /// The `rpcbench-*` entries in it.
    func rpcbenchEntries() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).filter { $0.hasPrefix("rpcbench-") }.sorted()
    }

    /// Processes whose command line names a path in it (daemons rpcbench started there).
    func processesNamingIt() -> [Int32] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap(Int32.init).filter { pid in
            guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            return String(decoding: data.map { $0 == 0 ? UInt8(ascii: " ") : $0 }, as: UTF8.self).contains(path)
        }
    }

    /// Runs rpcbench with this directory as its TMPDIR.
    func runBench(_ arguments: [String], timeout: Double) throws -> ProcessOutcome {
        try runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["TMPDIR=\(path)", try Binaries.rpcbench().path] + arguments, timeout: timeout)
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }
}

/// Echoes every byte each client sends, on a thread per connection, until the client closes.
private final class EchoServer: Sendable {
    let port: Int
    private let listenFD: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var address = loopbackAddress(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, listen(fd, 16) == 0 else {
            closeOwned(fd, "EchoServer (listener)")
            throw HarnessError("bind/listen: errno \(errno)")
        }
        listenFD = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 && (errno == EINTR || errno == ECONNABORTED) { continue }
                guard client >= 0 else { break }  // the listener was shut down
                Thread.detachNewThread { Self.echo(client) }
            }
            closeOwned(fd, "EchoServer (listener)")  // here, not in stop(): no accept on a reused number
        }
    }

    private static func echo(_ fd: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0, buffer.withUnsafeBytes({ send(fd, $0.baseAddress, n, Int32(MSG_NOSIGNAL)) }) == n else { break }
        }
        closeOwned(fd, "EchoServer (client)")
    }

    /// Ends the accept loop (`shutdown` wakes the blocked `accept`), which closes the listener.
    func stop() { shutdown(listenFD, Int32(SHUT_RDWR)) }
}
