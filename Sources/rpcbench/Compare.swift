import Foundation

/// `--compare`: the same load (threads, connections, depth, warmup, duration) against each
/// reference in turn, one server at a time, printing each row. Returns the references' rows;
/// the caller runs the rpcd row before or after them (`--rounds` alternates) and prints the rows
/// side by side (`printComparison`).
func measureReferences(fsync: String?, options: Options) throws -> [Measurement] {
    // Durable rows: Redis fsyncs its AOF before every reply where rpcd's creates wait for their fsync.
    // Without --fsync rpcd runs its default, `always` (a spawned daemon; one reached with --connect
    // is taken to run it too): creates compared with a Redis that persists nothing ran 0.66-0.73.
    let durable = options.workload == .create && (fsync ?? rpcdDefaultFsync) == "always"
    var rows: [Measurement] = []
    for reference in options.compare {
        print("")
        switch reference {
        case .redis: rows.append(try measureRedis(durable: durable, options: options))
        case .floor: rows.append(try measureFloor(options: options))
        }
    }
    print("")
    return rows
}

/// The per-round ratios of `--compare` with `--rounds`, by reference, and each side's rates.
struct RoundRatios {
    private(set) var rpcd: [Int] = []
    private(set) var references: [(target: String, rps: [Int])] = []

    mutating func add(_ rows: [Measurement]) {
        guard let first = rows.first else { return }
        rpcd.append(first.rps)
        for (index, row) in rows.dropFirst().enumerated() {
            if index == references.count { references.append((row.target, [])) }
            references[index].rps.append(row.rps)
        }
    }

    /// `RATIO rpcd/<reference> = M (median of N rounds: …; requests/s …)`, one line per reference.
    func printMedians() {
        for reference in references { print(medianRatioLine("rpcd", rpcd, reference.target, reference.rps)) }
    }
}

/// Redis on the load: `SET key{n} value` for every request, `+OK` the only good reply.
func measureRedis(durable: Bool, options: Options) throws -> Measurement {
    guard let binary = RedisServer.locate() else { throw UsageError("--compare redis needs redis-server on PATH") }
    let redis = try RedisServer(binary: binary, durable: durable)
    defer { redis.stop() }
    let load = RedisLoad(workload: options.workload, users: options.users, conns: options.conns)
    var target = LoadTarget(name: "redis", port: redis.port, cpuSeconds: { redis.cpuSeconds() })
    if options.tls { target.tlsPort = redis.tlsPort }
    let row = try measure(load, against: target, options: options)
    print("redis       SET key{n} value as inline commands, \(durable ? "appendonly yes, appendfsync always" : "no persistence")\(options.tls ? ", over TLS" : "")")
    row.printFigures(
        errorsLine: "\(row.errorReplies) replies other than +OK, \(row.mismatches) unexpected replies",
        serverLabel: "redis CPU", serverNote: "; RSS \(redis.rssKiB()) KiB")
    row.printResult("target=redis workload=\(options.workload.rawValue)\(durable ? " appendfsync=always" : "")", options: options)
    return row
}

/// The floor on the load: rpcd's request lines, one fixed line back for each.
func measureFloor(options: Options) throws -> Measurement {
    let floor = try FloorServer()
    defer { floor.stop() }
    let load = FloorLoad(requests: RPCDLoad(workload: options.workload, users: options.users, runTag: "floor"))
    let row = try measure(load, against: LoadTarget(name: "floor", port: floor.port, cpuSeconds: { floor.cpuSeconds() }, inProcess: true), options: options)
    print("floor       one fixed reply line per request line: raw epoll, one thread of rpcbench, no parsing")
    row.printFigures(
        errorsLine: "\(row.errors) requests lost (any line back counts as a reply)",
        serverLabel: "floor CPU", serverNote: " (not in bench CPU)")
    row.printResult("target=floor workload=\(options.workload.rawValue)", options: options)
    return row
}

/// The fsync policy `rpcd serve` runs without `--fsync`.
let rpcdDefaultFsync = "always"

/// The rows side by side, then `RATIO rpcd/<reference> = X (rpcd rps / reference rps; p50 …)`.
func printComparison(_ rows: [Measurement], fsync: String?, options: Options) {
    let threads = max(1, min(options.threads, options.conns))
    let policy = fsync.map { " (rpcd fsync \($0))" } ?? (options.workload == .create ? " (rpcd fsync \(rpcdDefaultFsync), its default)" : "")
    print("compare     \(options.workload.rawValue)\(policy), \(options.conns) conns x depth \(options.depth), \(threads) load thread(s), \(String(format: "%.1f", options.duration)) s measured each")
    func column(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }
    print("target" + column("requests/s", 14) + column("p50 µs", 9) + column("p99 µs", 9) + column("server CPU", 12) + column("errors", 8))
    for row in rows {
        let cpu = row.serverCPU.map { String(format: "%.0f%%", $0 / row.elapsed * 100) } ?? "-"
        print(row.target.padding(toLength: 6, withPad: " ", startingAt: 0) + column("\(row.rps)", 14) + column("\(row.p50)", 9)
            + column("\(row.p99)", 9) + column(cpu, 12) + column("\(row.errors)", 8))
    }
    guard let rpcd = rows.first else { return }
    for reference in rows.dropFirst() {
        let ratio = reference.rps > 0 ? String(format: "%.2f", Double(rpcd.rps) / Double(reference.rps)) : "n/a"
        print("RATIO rpcd/\(reference.target) = \(ratio) (\(rpcd.rps) / \(reference.rps) requests/s; p50 \(rpcd.p50) / \(reference.p50) µs)")
    }
}
