import CounterEntity
import Foundation
import RPCClient
import RPCSchema
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A third entity, `counter`, declared in its own test target (Tests/CounterEntity) and registered
/// with one line (Tests/counterd): served, journaled, snapshotted, replayed, described, counted,
/// fed to a follower and decoded by the typed client, with no edit anywhere else in the package.
@Suite("a third entity from one declaration", .serialized)
struct ThirdEntityTests {
    static func counterd() throws -> URL { try Binaries.locate("counterd") }

    static func start(_ dir: URL, _ extra: [String] = []) throws -> DaemonProcess {
        try DaemonProcess(extraArguments: ["--compact-after-bytes", "4096"] + extra, dataDir: dir, binary: counterd())
    }

    /// What the test sent: each counter's value.
    static func increments() -> [(name: String, by: Int)] {
        (0..<120).map { n in (["visits", "errors", "é", "e\u{301}"][n % 4], n % 7 + 1) }
    }

    /// Each counter's value by its name's bytes (`String` keys would take "é" and "e\u{301}" for one).
    static func expected() -> [[UInt8]: Int] {
        increments().reduce(into: [:]) { $0[Array($1.name.utf8), default: 0] += $1.by }
    }

    static func value(_ name: String) -> Int { expected()[Array(name.utf8)] ?? 0 }

    @Test("counter is served, journaled, snapshotted, replayed after kill -9, described and counted")
    func servedJournaledSnapshottedReplayed() async throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        var leader = try Self.start(dir)
        let client = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        var last: [[UInt8]: Int] = [:]
        for step in Self.increments() {
            let reply = try await client.call(IncrementCounter(name: step.name, by: step.by))
            #expect(reply.name == step.name)
            last[Array(step.name.utf8)] = reply.value
        }
        // "é" and "e\u{301}" are canonically equivalent strings, and two counters: names are bytes.
        #expect(last == Self.expected() && last.count == 4)
        let refused = await #expect(throws: RPCClientError.self) { try await client.call(IncrementCounter(name: "visits", by: 0)) }
        #expect(refused?.code == .invalidParams)
        let missing = await #expect(throws: RPCClientError.self) { try await client.call(GetCounter(name: "nobody")) }
        #expect(missing?.code == .notFound)

        // Described and counted like the built-in entities.
        let entities = try await client.call(SystemDescribe())
        let counter = try #require(entities.first { $0.name == "counter" })
        #expect(counter.methods.map(\.name).sorted() == ["get", "increment"])
        #expect(counter.methods.first { $0.name == "increment" }?.mutation == true)
        #expect(counter.methods.first { $0.name == "increment" }?.access == .write)
        #expect(counter.methods.first { $0.name == "get" }?.access == .read)
        let stats = try await client.call(SystemStats())
        #expect(stats.state?.entities == ["counter": 4])
        client.close()

        // The journal passed --compact-after-bytes: the snapshot holds the counters as increments.
        let snapshot = dir.appendingPathComponent("snapshot.jsonl")
        let compacted = eventually(timeout: 10) { FileManager.default.fileExists(atPath: snapshot.path) }
        #expect(compacted, "no snapshot.jsonl after \(Self.increments().count) increments: \(leader.stderrTail())")
        let snapshotText = (try? String(contentsOf: snapshot, encoding: .utf8)) ?? ""
        #expect(snapshotText.contains(#""method":"counter.increment""#), "\(snapshotText.prefix(400))")

        // kill -9 and restart on the same data: snapshot and journal replay to the same values.
        leader.kill()
        leader.stop()
        leader = try Self.start(dir)
        defer { leader.stop() }
        let again = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        defer { again.close() }
        for (name, value) in Self.expected() {
            let name = String(decoding: name, as: UTF8.self)
            #expect(try await again.call(GetCounter(name: name)).value == value, "\(name) after a restart")
        }
        #expect(try await again.call(IncrementCounter(name: "visits", by: 1)).value == Self.value("visits") + 1)

        // `rpcd call` reads the method from the same table.
        let call = try runProcess(Self.counterd(), ["call", "127.0.0.1:\(leader.port)", "counter.get", #"{"name":"errors"}"#])
        #expect(call.status == 0 && call.stdout.contains(#""value":\#(Self.value("errors"))"#), "\(call)")
    }

    @Test("a follower mirrors counter from the snapshot and the feed; the typed client reads its changes")
    func followedAndFed() async throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Self.start(dirs[0])
        defer { leader.stop() }
        let client = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        defer { client.close() }
        let half = Self.increments().count / 2
        for step in Self.increments()[..<half] { _ = try await client.call(IncrementCounter(name: step.name, by: step.by)) }
        // Started after a compaction: the follower installs the snapshot, then follows the feed.
        #expect(eventually(timeout: 10) { FileManager.default.fileExists(atPath: dirs[0].appendingPathComponent("snapshot.jsonl").path) })
        let follower = try DaemonProcess(extraArguments: ["--follow", Replicas.address(leader)], dataDir: dirs[1], binary: Self.counterd())
        defer { follower.stop() }
        for step in Self.increments()[half...] { _ = try await client.call(IncrementCounter(name: step.name, by: step.by)) }
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        let mirror = try await RPCClient.connect(host: "127.0.0.1", port: follower.port)
        defer { mirror.close() }
        for (name, value) in Self.expected() {
            let name = String(decoding: name, as: UTF8.self)
            #expect(try await mirror.call(GetCounter(name: name)).value == value, "\(name) on the follower")
        }
        let refused = await #expect(throws: RPCClientError.self) { try await mirror.call(IncrementCounter(name: "visits", by: 1)) }
        #expect(refused?.code == .readOnly)

        // The typed client decodes the feed's counter changes with the entity's own call type.
        let feed = try await RPCClient.connect(host: "127.0.0.1", port: leader.port)
        var sums: [[UInt8]: Int] = [:]
        var snapshotRecords = 0
        let target = try Replicas.sequence(leader)
        for try await event in feed.changes(from: 0, snapshot: true) {
            if let increment = event.change.as(IncrementCounter.self) {
                sums[Array(increment.name.utf8), default: 0] += increment.by
                if event.isSnapshotRecord { snapshotRecords += 1 }
            }
            if !event.isSnapshotRecord && event.sequence == target { break }
        }
        #expect(sums == Self.expected())
        #expect(snapshotRecords == 4, "a snapshot holds one increment per counter")
    }

    @Test("README's Adding a method and Adding an entity show what Tests/CounterEntity and Tests/counterd do")
    func readmeShowsTheDeclaration() throws {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let entity = try String(contentsOf: root.appendingPathComponent("Tests/CounterEntity/Counter.swift"), encoding: .utf8)
        let daemon = try String(contentsOf: root.appendingPathComponent("Tests/counterd/main.swift"), encoding: .utf8)
        guard let marker = readme.range(of: "<!-- entity-example -->\n```swift\n"),
            let end = readme.range(of: "\n```", range: marker.upperBound..<readme.endIndex)
        else { throw HarnessError("README has no <!-- entity-example --> followed by a ```swift block") }
        let block = readme[marker.upperBound..<end.lowerBound].split(separator: "\n")
        #expect(block.count > 5)
        let sources = (entity + "\n" + daemon).split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        for line in block {
            // A line with `…` elides a body; a trailing comment is README's own.
            let code = line.components(separatedBy: "   //")[0].trimmingCharacters(in: .whitespaces)
            if code.contains("…") {
                let head = code.components(separatedBy: "{ …")[0].trimmingCharacters(in: .whitespaces)
                #expect(sources.contains { $0.hasPrefix(head) }, "README's entity example: \(line)")
            } else {
                #expect(sources.contains(code), "README's entity example shows a line the declaration does not have: \(line)")
            }
        }
        // Adding a method: step 2's form is how the entity registers its methods.
        let steps = try #require(readme.range(of: "### Adding a method\n")).upperBound
        let section = readme[steps...].prefix(800)
        #expect(section.contains("`table.on(NewCall.self) { state, p in … }`"))
        #expect(entity.contains("table.on(IncrementCounter.self) { state, p") && entity.contains("table.on(GetCounter.self) { state, p"))
        #expect(daemon.split(separator: "\n").filter { $0.contains("Entities.register(") }.count == 1, "one registration line")
    }
}
