/// rpcbench's command line.
struct Options {
    enum Workload: String, CaseIterable { case get, create, mixed }
    /// A server `--compare` runs the same load against, after rpcd.
    enum Reference: String, CaseIterable { case redis, floor }

    var connect: String?
    var spawn: String?
    var conns = 50
    var depth = 16
    var duration = 5.0
    var warmup = 1.0
    var workload = Workload.get
    var users = 1000
    var fsync: String?
    /// Whether creates carry idempotency keys: [false] (default), [true], or both (compared).
    var keyed: [Bool] = [false]
    var idle: Int?
    var recovery: Int?
    var inProcess: Int?
    /// With `--in-process`: requests staged and run in batches of this many, as the daemon answers
    /// one peer's read (nil: one at a time through `Dispatcher.handle(line:)`).
    var batch: Int?
    var listAfterInsert: Int?
    var threads = 1
    /// Requests per second at most, all threads together (`--rate`); nil: as fast as replies come.
    var rate: Double?
    /// Times to run the set of loads a ratio compares (`--keys both`, `--fsync a,b`, `--followers`).
    var rounds = 1
    var compare: [Reference] = []
    /// Follower counts to run the load with (`--followers 0,2`): one spawned leader and that many
    /// `rpcd serve --follow` daemons per run. Nil: no followers, no lag figures.
    var followers: [Int]?
    /// Passed to every daemon rpcbench spawns, after its own arguments (`--daemon-arg`).
    var daemonArguments: [String] = []
    /// Load over TLS: rpcd's tls: listener, Redis's --tls-port (certificates made with openssl).
    var tls = false
    /// `--connect-rate S`: seconds of connect, one request, close, one after another.
    var connectRate: Double?
    /// `--catch-up N`: a follower's catch-up against a leader holding N records.
    var catchUp: Int?
    /// `--memory N`: bytes per record of N users, rpcd against Redis hashes.
    var memory: Int?
    /// `--uuid-ids`: `--memory`'s and `--recovery`'s users have UUIDs for ids.
    var uuidIDs = false

    static let usage = """
        usage: rpcbench (--connect HOST:PORT | --spawn PATH_TO_RPCD) [options]
          --conns N          connections (default 50)
          --depth D          requests in flight per connection (default 16)
          --duration S       measured seconds (default 5)
          --warmup S         unmeasured seconds first (default 1)
          --workload W       get | create | mixed (90% get, 10% create) (default get)
          --users N          users created before a get/mixed run (default 1000)
          --keys MODE        no (default) | yes | both: creates carry an idempotency "key"; both runs the
                             load without and with keys and prints RATIO keyed/unkeyed
          --fsync MODE       passed to a spawned daemon (always | everysec | none); a list such as
                             always,none runs the load once per mode and prints their ratio
          --daemon-arg ARG   one more argument for every daemon it spawns, repeatable
                             (e.g. --daemon-arg --group-commit-delay --daemon-arg 2ms)
          --threads N        load threads (default 1; each runs an epoll loop over its connections)
          --rate R           at most R requests/s, spread evenly over the run (a request waits for its turn,
                             then for a free slot of --depth); rps below R means the target could not keep up
          --rounds N         run the loads a RATIO compares N times (1 to 100), in alternating order (ABBA…), and
                             print each round's ratio and their median (default 1)
          --compare LIST     after rpcd, run the same load against each of: redis (a redis-server it
                             spawns: SET key{n} value per request, AOF appendfsync always when rpcd runs
                             create with --fsync always, its default), floor (a line server inside rpcbench: raw epoll,
                             one thread, one fixed reply line per request line); prints every row,
                             then RATIO rpcd/redis and RATIO rpcd/floor
          --followers LIST   with --spawn: also spawn N followers (rpcd serve --follow, same --fsync, own
                             data directories) and run the load on the leader; reports follower lag in
                             records (p50/p99/max of the leader's subscribers[].lagRecords every 10 ms
                             while measured) and the catch-up after the load; a list such as 0,2 runs
                             the load once per count and prints RATIO followers=2/followers=0
                  --tls              run the load over TLS: a spawned rpcd gets a tls: listener, Redis its --tls-port
                             (--tls-auth-clients no), with a CA and certificate made by the openssl command;
                             with --idle, the idle connections finish a TLS handshake first
          --connect-rate S   for S seconds: connect (with --tls, handshake), one request, its reply, close,
                             one after another; prints connections/s (and Redis's with --compare redis)
          --catch-up N       a leader takes N creates and restarts on its data; then time a follower started
                             empty until in sync (against the restart), and one restarted N/5 records behind
                             (records/s, against the leader's create rate)
          --memory N         N users into a spawned daemon and into Redis (hashes): RSS bytes per record
          --uuid-ids         with --memory or --recovery: the users' ids are UUIDs (36 bytes, in no order)
          --idle N           open N idle connections to a spawned daemon, report its RSS per connection
          --recovery N       write N mutations, stop the daemon, time its restart until "listening on"
          --in-process N     no sockets: run N requests of the workload through the dispatcher on this thread
                             (for profiling the decode-dispatch-encode path; run it under valgrind --tool=callgrind);
                             mutations are journaled to memory; with --keys both, prints RATIO keyed/unkeyed
          --batch B          with --in-process: decode, stage and run the requests B at a time, as the daemon
                             answers a peer's read (reused buffers, one hold of the state lock a batch)
          --list-after-insert N  no sockets: create N users, then time rounds of createUser + listUsers {limit:1}
        Prints a table, then: RESULT workload=… conns=… depth=… rps=… p50_us=… p99_us=… p999_us=… errors=…
        (rows for --compare: RESULT target=redis|floor workload=… and the same fields; with --followers,
        RESULT … followers=N … and LAG followers=N p50_records=… p99_records=… max_records=… samples=…
        batch_est=… batch_records=… catchup_ms=…)
        Exits 1 if any request failed or any reply did not match its request.
        """

    static func parse(_ arguments: [String]) throws(UsageError) -> Options {
        var options = Options()
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            func value() throws(UsageError) -> String {
                guard let value = rest.popFirst() else { throw UsageError("\(flag) needs a value") }
                return value
            }
            func number<T: LosslessStringConvertible & Comparable & Numeric>(_: T.Type) throws(UsageError) -> T {
                let text = try value()
                guard let n = T(text), n > 0 else { throw UsageError("\(flag) '\(text)' is not a positive number") }
                return n
            }
            switch flag {
            case "--connect": options.connect = try value()
            case "--spawn": options.spawn = try value()
            case "--conns": options.conns = try number(Int.self)
            case "--depth": options.depth = try number(Int.self)
            case "--duration": options.duration = try number(Double.self)
            case "--warmup":
                let text = try value()
                guard let n = Double(text), n >= 0 else { throw UsageError("--warmup '\(text)' is not a number of seconds") }
                options.warmup = n
            case "--workload":
                let text = try value()
                guard let workload = Workload(rawValue: text) else { throw UsageError("--workload '\(text)' is not get, create or mixed") }
                options.workload = workload
            case "--users": options.users = try number(Int.self)
            case "--fsync": options.fsync = try value()
            case "--daemon-arg": options.daemonArguments.append(try value())
            case "--keys":
                switch try value() {
                case "no": options.keyed = [false]
                case "yes": options.keyed = [true]
                case "both": options.keyed = [false, true]
                case let other: throw UsageError("--keys '\(other)' is not no, yes or both")
                }
            case "--threads": options.threads = try number(Int.self)
            case "--rate": options.rate = try number(Double.self)
            case "--rounds":
                let rounds = try number(Int.self)
                guard rounds <= 100 else { throw UsageError("--rounds \(rounds) is more than 100; give 1 to 100 (each round is two loads)") }
                options.rounds = rounds
            case "--idle": options.idle = try number(Int.self)
            case "--recovery": options.recovery = try number(Int.self)
            case "--in-process": options.inProcess = try number(Int.self)
            case "--batch": options.batch = try number(Int.self)
            case "--compare":
                for name in try value().split(separator: ",") {
                    guard let reference = Reference(rawValue: String(name)) else {
                        throw UsageError("--compare '\(name)' is not redis or floor")
                    }
                    if !options.compare.contains(reference) { options.compare.append(reference) }
                }
            case "--list-after-insert": options.listAfterInsert = try number(Int.self)
            case "--followers":
                let text = try value()
                let counts = text.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
                guard !counts.isEmpty, counts.allSatisfy({ ($0 ?? -1) >= 0 && ($0 ?? 0) <= 16 }) else {
                    throw UsageError("--followers '\(text)' is not a count of followers (0 to 16) or a list such as 0,2")
                }
                options.followers = counts.compactMap { $0 }
            case "--tls": options.tls = true
            case "--connect-rate": options.connectRate = try number(Double.self)
            case "--catch-up": options.catchUp = try number(Int.self)
            case "--memory":
                let count = try number(Int.self)
                guard (1...100_000_000).contains(count) else { throw UsageError("--memory \(count): give 1 to 100000000 records") }
                options.memory = count
            case "--uuid-ids": options.uuidIDs = true
            case "--help", "-h": throw UsageError(usage)
            default: throw UsageError("unknown option '\(flag)'; see rpcbench --help")
            }
        }
        if options.connect == nil && options.spawn == nil && options.inProcess == nil && options.listAfterInsert == nil { throw UsageError("give --connect HOST:PORT or --spawn PATH_TO_RPCD") }
        if options.uuidIDs && options.memory == nil && options.recovery == nil {
            throw UsageError("--uuid-ids shapes the users of --memory and --recovery; give it with one of them")
        }
        if (options.idle != nil || options.recovery != nil) && options.spawn == nil {
            throw UsageError("--idle and --recovery need --spawn PATH_TO_RPCD (they measure the daemon's process)")
        }
        if options.followers != nil && (options.spawn == nil || options.idle != nil || options.recovery != nil || !options.compare.isEmpty) {
            throw UsageError("--followers needs --spawn PATH_TO_RPCD and a load run (not --idle, --recovery or --compare)")
        }
        if options.batch != nil && options.inProcess == nil { throw UsageError("--batch goes with --in-process N") }
        if let batch = options.batch, batch > 4096 { throw UsageError("--batch \(batch) is more than 4096; the daemon answers at most 512 requests together") }
        if !options.compare.isEmpty && (options.idle != nil || options.recovery != nil || options.inProcess != nil) {
            throw UsageError("--compare goes with a load run, not --idle, --recovery or --in-process")
        }
        if options.tls && (options.compare.contains(.floor) || options.connect != nil || options.inProcess != nil) {
            throw UsageError("--tls goes with --spawn and --compare redis: the floor and --connect speak plain TCP only")
        }
        return options
    }
}

struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}
