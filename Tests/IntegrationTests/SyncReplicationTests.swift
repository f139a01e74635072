import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `min_sync_replicas` (issue 53): a mutation is acknowledged only once a follower in sync has
/// journaled it; refused before it runs while none is; timed out, and safely retried, when the
/// follower stops confirming.
@Suite("synchronous replication: min_sync_replicas, notEnoughReplicas, replicationTimeout, no acknowledged write lost", .serialized)
struct SyncReplicationTests {
    static func keyedCreate(_ rid: String, _ id: String, key: String) -> String {
        #"{"id":"\#(rid)","method":"user.createUser","param":{"id":"\#(id)","name":"N","email":"n@example.com"},"key":"\#(key)"}"#
    }

    static func inSync(_ daemon: DaemonProcess) throws -> Int? {
        try Replicas.replication(daemon)["inSyncReplicas"] as? Int
    }

    /// A leader with `min_sync_replicas 1` and `syncTimeout`, and a follower of it in its sync set.
    static func leaderWithFollowerInSync(_ dirs: [URL], syncTimeout: String) throws -> (leader: DaemonProcess, follower: DaemonProcess) {
        let leader = try Replicas.leader(dirs[0], ["--min-sync-replicas", "1", "--sync-timeout", syncTimeout])
        let follower = try Replicas.follower(of: leader, dirs[1])
        #expect(try eventually(timeout: 10) { try Self.inSync(leader) == 1 }, "\(leader.stderrTail())")
        return (leader, follower)
    }

    @Test("without a follower in sync a mutation is refused before it runs (and its key is not remembered); once one is, the same call succeeds")
    func refusedUntilInSync() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--min-sync-replicas", "1"])
        defer { leader.stop() }
        let c = try LineClient(port: leader.port)
        let refused = expectError(try c.request(Self.keyedCreate("1", "u1", key: "k1")), code: "notEnoughReplicas", id: "1")
        #expect(refused?.errorMessage?.contains("0 followers are in sync and min_sync_replicas is 1") == true, "\(refused?.line ?? "")")
        expectError(try c.request(Wire.getUser("2", "u1")), code: "notFound", id: "2")
        #expect(try Replicas.replication(leader)["minSyncReplicas"] as? Int == 1 && Self.inSync(leader) == 0)

        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        #expect(try eventually(timeout: 10) { try Self.inSync(leader) == 1 }, "\(leader.stderrTail())")
        #expect(try c.request(Self.keyedCreate("3", "u1", key: "k1")).contains("createUserResult"))
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        let subscribers = try Replicas.replication(leader)["subscribers"] as? [[String: Any]] ?? []
        #expect(subscribers.first?["inSync"] as? Bool == true, "\(subscribers)")
    }

    @Test("a stopped follower: the mutation gets replicationTimeout and the follower leaves the sync set; resumed, it rejoins, and a retry with the key returns the first outcome, applied once")
    func timeoutAndRetry() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let (leader, follower) = try Self.leaderWithFollowerInSync(dirs, syncTimeout: "1")
        defer {
            follower.signal(SIGCONT)
            follower.stop()
            leader.stop()
        }
        let c = try LineClient(port: leader.port, timeout: 20)
        #expect(try c.request(Self.keyedCreate("1", "before", key: "k0")).contains("createUserResult"))

        follower.signal(SIGSTOP)
        let watch = Stopwatch()
        let timedOut = expectError(try c.request(Self.keyedCreate("2", "during", key: "k1")), code: "replicationTimeout", id: "2")
        #expect(watch.seconds >= 0.9, "answered after \(watch.seconds) s, before sync_timeout")
        #expect(timedOut?.errorMessage?.contains("retry a mutation with the same idempotency key") == true, "\(timedOut?.line ?? "")")
        #expect(leader.stderrEventually(contains: "leaves the sync set"), "\(leader.stderrTail())")
        expectError(try c.request(Self.keyedCreate("3", "other", key: "k2")), code: "notEnoughReplicas", id: "3")

        follower.signal(SIGCONT)
        #expect(try eventually(timeout: 10) { try Self.inSync(leader) == 1 }, "\(leader.stderrTail())")
        let retried = try c.request(Self.keyedCreate("4", "during", key: "k1"))
        #expect(retried == #"{"id":"4","method":"user.createUserResult","param":{"id":"during","name":"N","email":"n@example.com"}}"#, "\(retried)")
        // Applied once: a create without the key finds it there.
        expectError(try c.request(Wire.createUser("5", "during", "N", "n@example.com")), code: "conflict", id: "5")
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        #expect(try JournalSupport.userIDs(port: follower.port) == ["before", "during"])
    }

    @Test("a read does not show a change no follower has confirmed: it waits for the confirmation, as the change's own reply does")
    func readsWaitForConfirmation() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let (leader, follower) = try Self.leaderWithFollowerInSync(dirs, syncTimeout: "5")
        defer {
            follower.signal(SIGCONT)
            follower.stop()
            leader.stop()
        }
        let writer = try LineClient(port: leader.port, timeout: 10)
        let reader = try LineClient(port: leader.port, timeout: 10)
        // A read of a confirmed state is answered at once.
        expectError(try reader.request(Wire.getUser("0", "pending")), code: "notFound", id: "0")

        follower.signal(SIGSTOP)
        try writer.sendLine(Self.keyedCreate("1", "pending", key: "p1"))
        usleep(200_000)
        try reader.sendLine(Wire.getUser("2", "pending"))
        #expect(reader.isSilent(for: 0.6), "the read answered before any follower confirmed the create")
        #expect(writer.isSilent(for: 0.1), "the create answered before any follower confirmed it")
        follower.signal(SIGCONT)
        #expect(try writer.expectLine().contains("createUserResult"))
        #expect(try reader.expectLine().contains("getUserResult"))
    }

    @Test("no acknowledged write is lost: kill -9 the leader under load, promote the follower, every acknowledged create is there")
    func noAcknowledgedWriteLost() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--min-sync-replicas", "1"])
        var follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        #expect(try eventually(timeout: 10) { try Self.inSync(leader) == 1 }, "\(leader.stderrTail())")
        // Pipelined creates, 16 in flight, until the leader dies under them.
        let c = try LineClient(port: leader.port, timeout: 20)
        var acknowledged: [String] = []
        var sent = 0
        let pid = leader.pid
        let killer = Thread {
            usleep(300_000)
            Glibc.kill(pid, SIGKILL)
        }
        killer.start()
        outer: while sent < 200_000 {
            var batch = ""
            for i in sent..<(sent + 16) { batch += Wire.createUser("\(i)", "w\(i)", "N", "n@example.com") + "\n" }
            guard (try? c.send(batch)) != nil else { break }
            for i in sent..<(sent + 16) {
                guard let line = try? c.readLine() else { break outer }
                if line.contains("createUserResult") { acknowledged.append("w\(i)") }
            }
            sent += 16
        }
        _ = leader.waitForExit(timeout: 10)
        #expect(acknowledged.count > 100, "only \(acknowledged.count) creates were acknowledged before the kill")
        follower.terminate()
        #expect(follower.waitForExit(timeout: 10) == 0)
        follower = try Replicas.leader(dirs[1])
        let reader = try LineClient(port: follower.port, timeout: 30)
        try reader.send(acknowledged.map { Wire.getUser($0, $0) + "\n" }.joined())
        let lost = try acknowledged.filter { id in try !reader.expectLine().contains("getUserResult") }
        #expect(lost.isEmpty, "\(lost.count) of \(acknowledged.count) acknowledged creates are not on the promoted follower: \(lost.prefix(5))")
    }
}
