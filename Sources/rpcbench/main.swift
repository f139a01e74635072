// rpcbench: loads rpcd the way its users do and reports throughput, latency, memory and recovery.
import Foundation
import RPCSchema
import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

signal(SIGPIPE, SIG_IGN)
// Every exit path (return, exit, fail, SIGINT, SIGTERM) kills the processes rpcbench started and
// removes their temporary directories.
Cleanup.install()

let options: Options
do {
    options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
} catch {
    if error.message == Options.usage {
        print(Options.usage)
        exit(0)
    }
    FileHandle.standardError.write(Data("rpcbench: \(error.message)\n".utf8))
    exit(2)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("rpcbench: \(message)\n".utf8))
    exit(2)
}

/// An empty data directory for a spawned daemon, removed at exit if not before.
func freshDataDir() -> String { Cleanup.makeTemporaryDirectory() }

func spawnArguments() -> [String] {
    options.fsync.map { ["--fsync", String($0.split(separator: ",").first ?? "")] } ?? []
}

/// Raises this process's open-file limit to its hard limit (idle runs open thousands of sockets).
func raiseFileLimit() {
    var limit = rlimit()
    getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    limit.rlim_cur = limit.rlim_max
    setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
}

/// Sends `lines` on one connection (pipelined) and waits for as many replies; returns the error replies.
func pipeline(host: String, port: Int, lines: [[UInt8]]) throws -> Int {
    let fd = try openConnection(host: host, port: port)
    defer { close(fd) }
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
    var errors = 0
    var received = 0
    var pendingTail: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 256 * 1024)
    let batch = 2000
    var sent = 0
    while received < lines.count {
        if sent < lines.count && sent - received < batch {
            let chunk = lines[sent..<min(lines.count, sent + batch)].flatMap { $0 }
            var offset = 0
            while offset < chunk.count {
                let n = chunk.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { throw UsageError("send failed while preloading") }
                offset += n
            }
            sent = min(lines.count, sent + batch)
        }
        let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { throw UsageError("daemon closed the connection while preloading") }
        pendingTail += buffer[0..<n]
        // Lines counted in place and the read ones dropped once a read: dropping each line from
        // the front moved the rest of the buffer per line, which made this loop, not the daemon,
        // the limit of a run whose reads came back full.
        var start = 0
        while let newline = pendingTail[start...].firstIndex(of: 0x0A) {
            if isErrorReply(pendingTail[start..<newline]) { errors += 1 }
            start = newline + 1
            received += 1
        }
        pendingTail.removeFirst(start)
    }
    return errors
}

/// Whether a reply line calls `error.error`.
private func isErrorReply(_ line: ArraySlice<UInt8>) -> Bool {
    let method = errorMethod
    guard line.count >= method.count else { return false }
    var i = line.startIndex
    while i + method.count <= line.endIndex {
        if line[i] == method[0] && line[i..<(i + method.count)].elementsEqual(method) { return true }
        i += 1
    }
    return false
}

private let errorMethod = Array(#""method":"error.error""#.utf8)

func createUsersLines(_ count: Int, prefix: String, uuidIDs: Bool = false) -> [[UInt8]] {
    (0..<count).map { i in
        Array((#"{"id":"p\#(i)","method":"user.createUser","param":{"id":"\#(userID(i, prefix: prefix, uuid: uuidIDs))","name":"Bench","email":"bench@example.com"}}"# + "\n").utf8)
    }
}

/// The id `createUsersLines` gives user `i`.
func userID(_ i: Int, prefix: String, uuid: Bool) -> String { uuid ? uuidID(i) : "\(prefix)\(i)" }

/// Record `n`'s id for `--uuid-ids`: a UUID's shape, 36 bytes, its first ones scattered (ids that
/// do not come in order).
func uuidID(_ n: Int) -> String {
    String(format: "%08x-%04x-4%03x-9%03x-%012x", UInt32(truncatingIfNeeded: n &* 2_654_435_761), n & 0xFFFF, n % 4096, (n / 7) % 4096, n)
}

func run() throws -> Never {
    if let count = options.inProcess { runInProcess(count: count, options: options) }
    if let users = options.listAfterInsert { runListAfterInsert(users: users) }
    if let seconds = options.connectRate, let binary = options.spawn { try runConnectRate(seconds: seconds, binary: binary) }
    if let records = options.catchUp, let binary = options.spawn { try runCatchUp(records: records, binary: binary) }
    if let records = options.memory, let binary = options.spawn { try runMemory(records: records, uuidIDs: options.uuidIDs, binary: binary) }
    // MARK: - Idle connections

    if let idle = options.idle, let binary = options.spawn {
        raiseFileLimit()
        // Room for the idle connections and the check connection past the default max_connections.
        let daemon = try SpawnedDaemon(
            binary: binary, dataDir: freshDataDir(), extraArguments: spawnArguments() + ["--max-connections", "\(idle + 16)"])
        defer { daemon.kill() }
        Thread.sleep(forTimeInterval: 0.5)
        let before = daemon.rssKiB()
        var fds: [Int32] = []
        var sessions: [TLSSession] = []
        for _ in 0..<idle {
            do {
                let fd = try openConnection(host: "127.0.0.1", port: options.tls ? daemon.tlsPort : daemon.port)
                fds.append(fd)
                if options.tls { sessions.append(try BenchTLS.shared.handshake(fd)) }
            } catch {
                fail("after \(fds.count) connections: \(error)")
            }
        }
        // Make sure the daemon accepted them all: one round trip on a fresh connection after them.
        let refused = try pipeline(host: "127.0.0.1", port: daemon.port, lines: [Array((#"{"id":"x","method":"user.listUsers","param":{"limit":1}}"# + "\n").utf8)])
        guard refused == 0 else { fail("the daemon refused the check connection after \(idle) idle ones") }
        Thread.sleep(forTimeInterval: 1)
        let after = daemon.rssKiB()
        let perConnection = Double(after - before) * 1024 / Double(idle)
        print("idle connections   \(idle)\(options.tls ? " (TLS, handshake done)" : "")")
        print("daemon RSS before  \(before) KiB")
        print("daemon RSS after   \(after) KiB")
        print("per connection     \(String(format: "%.0f", perConnection)) bytes (\(String(format: "%.2f", perConnection / 1024)) KiB)")
        print("RESULT idle=\(idle) rss_before_kib=\(before) rss_after_kib=\(after) bytes_per_conn=\(Int(perConnection)) errors=0")
        for fd in fds { close(fd) }
        exit(0)
    }

    // MARK: - Recovery

    if let mutations = options.recovery, let binary = options.spawn {
        let dataDir = freshDataDir()
        let writer = try SpawnedDaemon(binary: binary, dataDir: dataDir, extraArguments: options.fsync == nil ? ["--fsync", "none"] : spawnArguments())
        let started = Date()
        let errors = try pipeline(host: "127.0.0.1", port: writer.port, lines: createUsersLines(mutations, prefix: "r", uuidIDs: options.uuidIDs))
        let writeSeconds = Date().timeIntervalSince(started)
        writer.stop()
        let journalBytes = (try? FileManager.default.subpathsOfDirectory(atPath: dataDir))?.reduce(0) { total, name in
            total + ((try? FileManager.default.attributesOfItem(atPath: dataDir + "/" + name)[.size] as? Int) ?? 0)
        } ?? 0
        let restarted = try SpawnedDaemon(binary: binary, dataDir: dataDir, extraArguments: [])
        let seconds = restarted.startSeconds
        let check = try pipeline(host: "127.0.0.1", port: restarted.port, lines: [Array((#"{"id":"x","method":"user.getUser","param":{"userId":"\#(userID(mutations - 1, prefix: "r", uuid: options.uuidIDs))"}}"# + "\n").utf8)])
        restarted.kill()
        Cleanup.removeDirectory(dataDir)
        print("mutations written  \(mutations) in \(String(format: "%.2f", writeSeconds)) s (\(errors) errors)")
        print("data dir size      \(journalBytes / 1024) KiB")
        print("restart until listening: \(String(format: "%.3f", seconds)) s")
        print("last record present after restart: \(check == 0 ? "yes" : "NO")")
        print("RESULT recovery=\(mutations) restart_ms=\(Int(seconds * 1000)) errors=\(errors + check)")
        exit(errors + check == 0 ? 0 : 1)
    }

    // MARK: - Load

    if options.compare.contains(.redis) && RedisServer.locate() == nil {
        fail("--compare redis needs redis-server on PATH (apt-get install redis-server)")
    }
    // `--fsync always,none` runs the load once per policy (a fresh daemon each) and compares them.
    // `--keys both` runs it without and with idempotency keys.
    let policies: [String?] = options.fsync.map { $0.split(separator: ",").map { String($0) } } ?? [nil]
    // `--followers 0,2` runs it once per follower count.
    let followerCounts: [Int?] = options.followers ?? [nil]
    var variants: [(policy: String?, keyed: Bool, followers: Int?, label: String)] = []
    for policy in policies {
        for keyed in options.keyed {
            for followers in followerCounts {
                var label: [String] = []
                if policies.count > 1 { label.append(policy ?? "?") }
                if options.keyed.count > 1 { label.append(keyed ? "keyed" : "unkeyed") }
                if followerCounts.count > 1 { label.append("followers=\(followers ?? 0)") }
                variants.append((policy, keyed, followers, label.isEmpty ? policy ?? "?" : label.joined(separator: "-")))
            }
        }
    }
    // `--rounds N` runs the set N times, every other round in reverse order, so a machine that
    // drifts (another tenant, a warming cache) weighs on every variant alike.
    var rps = [[Int]](repeating: [], count: variants.count)
    // Each round's rows of `--compare`, for the medians printed after the last round.
    var compareRounds = RoundRatios()
    var errors = 0
    var first = true
    for round in 0..<options.rounds {
        let order = round % 2 == 0 ? Array(variants.indices) : variants.indices.reversed()
        for index in order {
            if !first { print("") }
            first = false
            let variant = variants[index]
            // With --compare, every other round runs the references first (ABBA across rounds).
            let (rate, failed, rows) = try runLoad(
                fsync: variant.policy, keyed: variant.keyed, followers: variant.followers, referencesFirst: round % 2 == 1)
            compareRounds.add(rows)
            rps[index].append(rate)
            errors += failed
        }
    }
    if options.rounds > 1 && !options.compare.isEmpty && variants.count == 1 {
        print("")
        compareRounds.printMedians()
    }
    RecordCosts.printLeaderRatios()
    if variants.count > 1 {
        print("")
        let base = variants[0].label
        for index in variants.indices.dropFirst() {
            let label = variants[index].label
            let ratios = zip(rps[index], rps[0]).map { $1 > 0 ? Double($0) / Double($1) : 0 }
            if options.rounds == 1 {
                print("RATIO \(label)/\(base) = \(String(format: "%.2f", ratios[0])) (\(rps[index][0]) / \(rps[0][0]) requests/s)")
            } else {
                print(medianRatioLine(label, rps[index], base, rps[0]))
            }
        }
    }
    exit(errors == 0 ? 0 : 1)
}

/// `RATIO a/b = M (median of N rounds: r1 r2 …; requests/s A / B)`: the median of the rounds'
/// ratios, each round's, and each side's median rate.
func medianRatioLine(_ label: String, _ rates: [Int], _ base: String, _ baseRates: [Int]) -> String {
    let ratios = zip(rates, baseRates).map { $1 > 0 ? Double($0) / Double($1) : 0 }
    let each = ratios.map { String(format: "%.2f", $0) }.joined(separator: " ")
    return "RATIO \(label)/\(base) = \(String(format: "%.2f", median(ratios))) (median of \(ratios.count) rounds: \(each); "
        + "requests/s \(Int(median(rates.map(Double.init)))) / \(Int(median(baseRates.map(Double.init)))))"
}

/// The middle value (the mean of the middle two for an even count).
func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return 0 }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

do {
    try run()
} catch let error as UsageError {
    fail(error.message)
} catch {
    fail("\(error)")
}

/// One load run against rpcd (`--connect`, or a daemon spawned with `fsync`), and the `--compare`
/// rows: prints each row's table and RESULT line; returns rpcd's rate, the errors of every row, and
/// the rows of a comparison (rpcd's first; none without `--compare`).
/// `referencesFirst`: the `--compare` rows run before the rpcd row (every other round, so that a
/// machine that drifts within a round weighs on both sides alike).
func runLoad(
    fsync: String?, keyed: Bool = false, followers: Int? = nil, referencesFirst: Bool = false
) throws -> (rps: Int, errors: Int, rows: [Measurement]) {
    guard !options.compare.isEmpty else {
        let rpcd = try measureRPCD(fsync: fsync, keyed: keyed, followers: followers)
        return (rpcd.rps, rpcd.errors, [])
    }
    var references: [Measurement] = []
    if referencesFirst { references = try measureReferences(fsync: fsync, options: options) }
    let rpcd = try measureRPCD(fsync: fsync, keyed: keyed, followers: followers)
    if !referencesFirst { references = try measureReferences(fsync: fsync, options: options) }
    printComparison([rpcd] + references, fsync: fsync, options: options)
    return (rpcd.rps, references.reduce(rpcd.errors) { $0 + $1.errors }, [rpcd] + references)
}


/// The rpcd row: spawns the daemon (and `followers` following it; removed again before returning)
/// or reaches `--connect`, creates the users a get or mixed load reads, runs the load, prints the
/// table and the RESULT line (and, with followers, their lag and the LAG line).
func measureRPCD(fsync: String?, keyed: Bool = false, followers: Int? = nil) throws -> Measurement {
    var target = LoadTarget(name: "rpcd", port: 0)
    var daemon: SpawnedDaemon?
    var followerSet: FollowerSet?
    if let binary = options.spawn {
        let spawned = try SpawnedDaemon(binary: binary, dataDir: freshDataDir(), extraArguments: fsync.map { ["--fsync", $0] } ?? [])
        daemon = spawned
        target.port = spawned.port
        target.cpuSeconds = { spawned.cpuSeconds() }
        if options.tls { target.tlsPort = spawned.tlsPort }
        if let followers {
            followerSet = try FollowerSet(binary: binary, leaderPort: spawned.port, count: followers, extraArguments: fsync.map { ["--fsync", $0] } ?? [])
        }
    } else if let connect = options.connect {
        guard let colon = connect.lastIndex(of: ":"), let p = Int(connect[connect.index(after: colon)...]) else {
            fail("--connect '\(connect)' is not HOST:PORT")
        }
        target.host = String(connect[..<colon])
        if target.host == "localhost" { target.host = "127.0.0.1" }
        target.port = p
    }
    defer {
        followerSet?.kill()
        if let daemon {
            daemon.kill()
            Cleanup.removeDirectory(daemon.dataDir)
        }
    }

    if options.workload != .create {
        // Existing users for getUser; conflicts from an earlier run against the same daemon are fine.
        _ = try pipeline(host: target.host, port: target.port, lines: createUsersLines(options.users, prefix: "bench-u"))
    }

    raiseFileLimit()
    let load = RPCDLoad(workload: options.workload, users: options.users, runTag: String(UUID().uuidString.prefix(8)), keyed: keyed)
    // Lag is sampled over the measured seconds only (the load's connections open first: close enough).
    let sampler = try followerSet.map { try LagSampler(leaderPort: target.port, followerPorts: $0.ports) }
    let followersCPUBefore = followerSet?.cpuSeconds() ?? 0
    let costs = try followerSet.map { try RecordCosts(followers: $0) }
    // Each loop's time and the group commit over the run, from `system.stats` before and after
    // (a daemon on this machine).
    let statsProbe = target.host == "127.0.0.1" ? try? StatsProbe(port: target.port) : nil
    let statsBefore = try? statsProbe?.stats()
    let loadStart = nowNanoseconds()
    sampler?.start(from: loadStart + UInt64(options.warmup * 1e9), until: loadStart + UInt64((options.warmup + options.duration) * 1e9))
    var rpcd = try measure(load, against: target, options: options)
    let statsAfter = try? statsProbe?.stats()
    let loopSeconds = Double(nowNanoseconds() - loadStart) / 1e9
    let lag = sampler?.stop()
    let followersCPU = (followerSet?.cpuSeconds() ?? 0) - followersCPUBefore
    let followerCosts = try costs?.measure()
    let threadCount = max(1, min(options.threads, options.conns))
    print("workload    \(options.workload.rawValue)\(fsync.map { " (fsync \($0))" } ?? "")\(keyed ? ", keyed creates" : "")")
    print("conns       \(options.conns) x depth \(options.depth), \(threadCount) load thread(s)")
    print("measured    \(String(format: "%.1f", options.duration)) s after \(String(format: "%.1f", options.warmup)) s warmup")
    rpcd.printFigures(
        errorsLine: "\(rpcd.errorReplies) error replies, \(rpcd.mismatches) replies with another id or method",
        serverLabel: "daemon CPU", serverNote: daemon.map { "; RSS \($0.rssKiB()) KiB" } ?? "")
    if let loopsBefore = statsBefore?.loops, let loopsAfter = statsAfter?.loops, loopsBefore.count == loopsAfter.count {
        printLoopFigures(before: loopsBefore, after: loopsAfter, seconds: loopSeconds)
    }
    var batchRecords: Double?
    if let was = statsBefore?.journal, let now = statsAfter?.journal {
        batchRecords = printJournalFigures(before: was, after: now, seconds: loopSeconds)
    }
    if let followers, let sampler, let lag {
        let writes = options.workload == .create ? rpcd.rps : options.workload == .mixed ? rpcd.rps / 10 : 0
        rpcd.errorReplies += printFollowerFigures(
            lag, catchUp: followers > 0 ? try sampler.catchUp() : nil, followers: followers, leaderPort: target.port,
            writesPerSecond: writes, batchRecords: batchRecords, cpuPercent: followersCPU / max(rpcd.elapsed, 0.001) * 100)
        if let followerCosts, options.workload == .create {
            RecordCosts.print(followerCosts, followers: followers, writesPerSecond: rpcd.rps, leaderCPU: rpcd.serverCPU, elapsed: rpcd.elapsed)
        }
    }
    let followersField = followers.map { " followers=\($0)" } ?? ""
    rpcd.printResult(
        "workload=\(options.workload.rawValue)\(fsync.map { " fsync=\($0)" } ?? "")\(keyed ? " keys=yes" : "")\(followersField)", options: options)
    return rpcd
}

/// The group commit over the run, when the daemon journaled anything: batches (writes) a second,
/// records a batch, fsyncs a second, and the last fsync's latency. Returns the records a batch.
func printJournalFigures(before: JournalStats, after: JournalStats, seconds: Double) -> Double? {
    let batches = after.batches &- before.batches
    guard seconds > 0, batches > 0 else { return nil }
    let records = Double(after.records &- before.records) / Double(batches)
    let fsyncs = Double(after.fsyncs &- before.fsyncs) / seconds
    print("journal     " + String(format: "%.0f batches/s of %.1f records, %.0f fsyncs/s (last %d µs)", Double(batches) / seconds, records, fsyncs, after.lastFsyncMicroseconds))
    return records
}

/// One line per event loop: the share of the run it spent serving (a loop near 100% is the
/// daemon's bottleneck; CPU left idle elsewhere cannot help it) and lingering (of which polling,
/// `busy_poll`), and its turns.
func printLoopFigures(before: [LoopStats], after: [LoopStats], seconds: Double) {
    guard seconds > 0 else { return }
    for (index, (was, now)) in zip(before, after).enumerated() {
        let serving = (now.servingSeconds - was.servingSeconds) / seconds * 100
        let lingering = (now.lingeringSeconds - was.lingeringSeconds) / seconds * 100
        let polling = (now.pollingSeconds - was.pollingSeconds) / seconds * 100
        let turns = Double(now.turns - was.turns) / seconds
        print("loop \(index)".padding(toLength: 12, withPad: " ", startingAt: 0)
            + String(format: "serving %.0f%% of the run, lingering %.0f%% (polling %.0f%%), %.0f turns/s", serving, lingering, polling, turns))
    }
}
