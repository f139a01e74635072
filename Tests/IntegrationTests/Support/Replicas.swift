import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Leaders and followers for the replication tests: real daemons on data directories the test
/// owns (so they survive kill -9 and restarts), and what the tests compare between them.
enum Replicas {
    static func leader(_ dir: URL, _ extra: [String] = [], environment: [String: String] = [:]) throws -> DaemonProcess {
        try DaemonProcess(extraArguments: extra, dataDir: dir, environment: environment)
    }

    static func follower(
        of leader: DaemonProcess, _ dir: URL, _ extra: [String] = [], environment: [String: String] = [:]
    ) throws -> DaemonProcess {
        try DaemonProcess(extraArguments: ["--follow", address(leader)] + extra, dataDir: dir, environment: environment)
    }

    /// leader -> middle -> last, on the first three of `dirs`.
    static func chain(_ dirs: [URL]) throws -> (leader: DaemonProcess, middle: DaemonProcess, last: DaemonProcess) {
        let leader = try Self.leader(dirs[0])
        let middle = try follower(of: leader, dirs[1])
        return (leader, middle, try follower(of: middle, dirs[2]))
    }

    static func address(_ daemon: DaemonProcess) -> String { "127.0.0.1:\(daemon.port)" }

    /// `system.stats` → `replication`.
    static func replication(_ daemon: DaemonProcess) throws -> [String: Any] {
        let client = try LineClient(port: daemon.port)
        let reply = try Reply(client.request(#"{"id":"s","method":"system.stats"}"#))
        guard let replication = reply.param?["replication"] as? [String: Any] else {
            throw HarnessError("system.stats has no replication: \(reply.line.prefix(600))")
        }
        return replication
    }

    /// The last sequence number `daemon` made durable (applied, on a follower).
    static func sequence(_ daemon: DaemonProcess) throws -> Int {
        guard let seq = try replication(daemon)["sequence"] as? Int else { throw HarnessError("replication without sequence") }
        return seq
    }

    /// Waits until every follower has applied the leader's last sequence number; the failure
    /// names who is behind and shows their logs.
    static func waitForConvergence(
        leader: DaemonProcess, followers: [DaemonProcess], timeout: Double = 60,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let target = try sequence(leader)
        let watch = Stopwatch()
        for follower in followers {
            var seen = -1
            while watch.seconds < timeout {
                seen = (try? sequence(follower)) ?? -1
                if seen >= target { break }
                usleep(50_000)
            }
            if seen != target {
                let logs = "--- follower stderr ---\n\(follower.stderrTail())\n--- leader stderr ---\n\(leader.stderrTail())"
                Issue.record(
                    "follower on port \(follower.port) reached sequence \(seen), the leader is at \(target)\n\(logs)",
                    sourceLocation: sourceLocation)
                throw HarnessError("no convergence")
            }
        }
    }

    /// Waits until every subscriber of `leader` acknowledged its last record: the followers have
    /// it on disk (a follower's `sequence` counts what it applied, which its journal may not hold
    /// yet), so a kill -9 now loses nothing they had.
    static func waitForAcknowledgements(_ leader: DaemonProcess, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let target = try sequence(leader)
        let acked = try eventually(timeout: 30) {
            let subscribers = try replication(leader)["subscribers"] as? [[String: Any]] ?? []
            return !subscribers.isEmpty && subscribers.allSatisfy { $0["ackedSequence"] as? Int == target }
        }
        if !acked {
            Issue.record("not every subscriber acknowledged \(target): \(try replication(leader))", sourceLocation: sourceLocation)
        }
    }

    /// Every `listUsers` and `listBuildings` reply line, paging 500 at a time: two daemons with the
    /// same state give the same lines.
    static func lists(_ daemon: DaemonProcess) throws -> [String] {
        let client = try LineClient(port: daemon.port, timeout: 30)
        var lines: [String] = []
        for (method, key) in [("user.listUsers", "users"), ("building.listBuildings", "buildings")] {
            var after: String?
            repeat {
                let param = after.map { #"{"limit":500,"after":\#(jsonString($0))}"# } ?? #"{"limit":500}"#
                let line = try client.request(Wire.request("p\(lines.count)", method, param))
                let reply = try Reply(line)
                guard reply.listIDs(key) != nil else { throw HarnessError("\(method) failed: \(line.prefix(300))") }
                lines.append(line)
                after = reply.next
            } while after != nil
        }
        return lines
    }

    /// Checks that each follower lists what the leader lists.
    static func expectSameLists(
        _ leader: DaemonProcess, _ followers: [DaemonProcess], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let expected = try lists(leader)
        for follower in followers {
            let got = try lists(follower)
            let firstDifference = zip(expected, got).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            #expect(
                got == expected,
                "follower on port \(follower.port): \(got.count) list pages, the leader \(expected.count); first difference at page \(firstDifference.map(String.init) ?? "-")",
                sourceLocation: sourceLocation)
        }
    }

    /// Waits (the follower acknowledges after its own write) until the two journals are equal byte
    /// for byte; false with both sizes when they never are.
    static func journalsEqual(_ a: URL, _ b: URL, timeout: Double = 10) -> (Bool, String) {
        let watch = Stopwatch()
        var sizes = ""
        while true {
            let x = FileManager.default.contents(atPath: JournalSupport.journal(a).path)
            let y = FileManager.default.contents(atPath: JournalSupport.journal(b).path)
            if let x, let y, x == y, !x.isEmpty { return (true, "") }
            sizes = "\(x?.count ?? -1) and \(y?.count ?? -1) bytes"
            if watch.seconds > timeout { return (false, sizes) }
            usleep(50_000)
        }
    }

    /// The sequence number `daemon`'s snapshot covers once a compaction happened and settled: the
    /// same in two looks 50 ms apart, with no `journal.next.jsonl` (a compaction under way).
    static func settledSnapshotSequence(_ daemon: DaemonProcess, timeout: Double = 20) throws -> Int {
        var last = -1
        var now = 0
        _ = try eventually(timeout: timeout) {
            let probe = try Reply(LineClient(port: daemon.port).request(#"{"id":"f","method":"replication.subscribe"}"#))
            (last, now) = (now, probe.param?["snapshotSequence"] as? Int ?? 0)
            let next = daemon.dataDir.appendingPathComponent("journal.next.jsonl").path
            // At least one compaction done: callers wrote far past --compact-after-bytes, and the
            // compaction they started may not have rotated the journal yet.
            return now > 0 && now == last && !FileManager.default.fileExists(atPath: next)
        }
        return now
    }

    /// Compactions the daemon finished (its log's `compacted:` lines).
    static func compactions(_ daemon: DaemonProcess) -> Int {
        daemon.stderrText.components(separatedBy: "compacted: snapshot at seq").count - 1
    }

    /// Whether a follower from `seq` needs the daemon's snapshot (its journal files, the one its
    /// last compaction kept included, start after `seq`). It subscribes as a daemon does, with its
    /// terms (none).
    static func needsSnapshot(_ daemon: DaemonProcess, from seq: Int) throws -> Bool {
        let reply = try Reply(LineClient(port: daemon.port).request(ChangeFeedTests.daemonSubscribe(from: seq)))
        if reply.errorCode == "snapshotRequired" { return true }
        guard reply.line.contains("subscribeResult") else { throw HarnessError("subscribe from \(seq): \(reply.line.prefix(300))") }
        return false
    }

    /// The number right after the last `text` in a daemon's log (`following HOST:PORT from sequence N`).
    static func loggedNumber(_ log: String, after text: String) -> Int? {
        guard let range = log.range(of: text, options: .backwards) else { return nil }
        return Int(log[range.upperBound...].prefix { $0.isNumber })
    }
}

/// Mixed mutations of users and buildings (creates, updates, deletes; every seventh keyed), each
/// valid for the state the ones before it built, so every one gets a `…Result`. Names carry
/// quotes, tabs and non-ASCII so journals compare escapes byte for byte. The same seed gives the
/// same lines; one value can go on against another daemon with the same state (a new leader).
struct MixedMutations {
    private var random: UInt64
    private var users: [String] = []
    private var buildings: [String] = []
    private var made = 0
    private let tag: String

    init(seed: UInt64, tag: String = "m") {
        random = seed
        self.tag = tag
    }

    /// SplitMix64.
    private mutating func next(_ bound: Int) -> Int {
        random &+= 0x9E37_79B9_7F4A_7C15
        var z = random
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return Int((z ^ (z >> 31)) % UInt64(bound))
    }

    private mutating func pick(_ list: [String]) -> String { list[next(list.count)] }

    private mutating func remove(_ list: WritableKeyPath<MixedMutations, [String]>) -> String {
        let index = next(self[keyPath: list].count)
        self[keyPath: list].swapAt(index, self[keyPath: list].count - 1)
        return self[keyPath: list].removeLast()
    }

    private mutating func name(_ n: Int) -> String {
        switch next(4) {
        case 0: "Zoë \(n)"
        case 1: "A \"quoted\" name \(n)"
        case 2: "tab\tand / slash \(n)"
        default: "plain \(n) 🏠"
        }
    }

    private mutating func residents() -> String {
        var chosen: [String] = []
        for _ in 0..<min(users.count, next(4)) {
            let id = pick(users)
            if !chosen.contains(id) { chosen.append(id) }
        }
        return "[" + chosen.map(jsonString).joined(separator: ",") + "]"
    }

    /// The next mutation line (request id `rid`).
    mutating func nextLine(rid: String) -> String {
        made += 1
        let n = made
        let key = n % 7 == 0 ? #","key":"\#(tag)-\#(n)""# : ""
        var roll = next(100)
        if users.isEmpty { roll = 0 }
        if buildings.isEmpty && roll >= 65 { roll = 50 }
        let (method, param): (String, String)
        switch roll {
        case 0..<35:
            let id = "\(tag)u\(n)"
            users.append(id)
            (method, param) = ("user.createUser", #"{"id":\#(jsonString(id)),"name":\#(jsonString(name(n))),"email":"\#(id)@example.com"}"#)
        case 35..<50:
            let id = pick(users)
            let change = next(2) == 0 ? #""newName":\#(jsonString(name(n)))"# : #""newEmail":"e\#(n)@example.com""#
            (method, param) = ("user.updateUser", #"{"userId":\#(jsonString(id)),\#(change)}"#)
        case 50..<58:
            (method, param) = ("user.deleteUser", #"{"userId":\#(jsonString(remove(\.users)))}"#)
        case 58..<65:
            let id = "\(tag)b\(n)"
            buildings.append(id)
            (method, param) = ("building.addBuilding", #"{"id":\#(jsonString(id)),"name":\#(jsonString(name(n))),"address":"\#(n) Main St","residents":\#(residents())}"#)
        case 65..<72:
            let id = "\(tag)b\(n)"
            buildings.append(id)
            (method, param) = ("building.addBuilding", #"{"id":\#(jsonString(id)),"name":"B\#(n)","address":"\#(n) Side St","residents":[]}"#)
        case 72..<92:
            let id = pick(buildings)
            (method, param) = ("building.updateBuilding", #"{"buildingId":\#(jsonString(id)),"newName":\#(jsonString(name(n))),"newResidents":\#(residents())}"#)
        default:
            (method, param) = ("building.deleteBuilding", #"{"buildingId":\#(jsonString(remove(\.buildings)))}"#)
        }
        return #"{"id":"\#(rid)","method":"\#(method)","param":\#(param)\#(key)}"#
    }

    /// Sends `count` mutations to `port`, pipelined 500 at a time; returns the replies that were
    /// not a `…Result` (none, when all is well).
    mutating func send(to port: Int, count: Int) throws -> [String] {
        let client = try LineClient(port: port, timeout: 60)
        var failures: [String] = []
        var done = 0
        while done < count {
            let batch = min(500, count - done)
            var text = ""
            for i in 0..<batch { text += nextLine(rid: "w\(done + i)") + "\n" }
            try client.send(text)
            for _ in 0..<batch {
                let line = try client.expectLine()
                if !line.contains(#"Result","param""#) || line.contains(#""method":"error.error""#) { failures.append(line) }
            }
            done += batch
        }
        return failures
    }
}
