import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Followers beyond one leader and its mirrors: chains, data that diverged, access control and
/// systemd's status line.
@Suite("followers: chains, divergence, the replicate role, STATUS=", .serialized)
struct FollowerTopologyTests {
    @Test("a chain: leader -> follower -> follower converges, and the middle one lists its subscriber")
    func chain() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let (leader, middle, last) = try Replicas.chain(dirs)
        defer { [leader, middle, last].forEach { $0.stop() } }
        var mutations = MixedMutations(seed: 6)
        #expect(try mutations.send(to: leader.port, count: 3_000).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [middle, last])
        try Replicas.expectSameLists(leader, [middle, last])
        for dir in dirs.dropFirst() {
            let (equal, sizes) = Replicas.journalsEqual(dirs[0], dir)
            #expect(equal, "journals differ along the chain (\(sizes))")
        }
        let replication = try Replicas.replication(middle)
        #expect(replication["role"] as? String == "follower")
        #expect((replication["subscribers"] as? [[String: Any]])?.count == 1, "\(replication)")
        #expect(try Replicas.replication(last)["leader"] as? String == Replicas.address(middle))
    }

    @Test("a chain heals: the middle follower catches up through a snapshot, and the last one through the middle's")
    func chainThroughSnapshots() throws {
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0], ["--compact-after-bytes", "64KiB"])
        var middle = try Replicas.follower(of: leader, dirs[1])
        let last = try Replicas.follower(of: middle, dirs[2])
        defer { [leader, last].forEach { $0.stop() } }
        var mutations = MixedMutations(seed: 7)
        #expect(try mutations.send(to: leader.port, count: 500).isEmpty)
        try Replicas.waitForConvergence(leader: leader, followers: [middle, last])
        let middlePort = middle.port
        middle.kill()
        _ = middle.waitForExit(timeout: 10)
        #expect(try mutations.send(to: leader.port, count: 5_000).isEmpty)
        // The same port, so the last follower finds the middle one again.
        middle = try DaemonProcess(
            listen: ["127.0.0.1:\(middlePort)"], extraArguments: ["--follow", Replicas.address(leader)], dataDir: dirs[1])
        defer { middle.stop() }
        #expect(middle.stderrEventually(contains: "caught up through a snapshot", timeout: 30), "\(middle.stderrTail())")
        try Replicas.waitForConvergence(leader: leader, followers: [middle, last])
        try Replicas.expectSameLists(leader, [middle, last])
        // Its journal holds the snapshot's sequence (what convergence reads) a moment before it logs.
        #expect(last.stderrEventually(contains: "caught up through a snapshot", timeout: 30), "\(last.stderrTail())")
    }

    /// A leader on `dirs[0]` with users `lead0..<leading`, and a follower of it on `dirs[1]`, where
    /// a daemon of its own first created users `own0..<own`: a history the leader never had. The
    /// follower's directory is made one from before origins (no `ORIGIN`), which cannot tell at
    /// subscribe that its history began apart (TermTests has the case that can).
    static func strangers(_ dirs: [URL], own: Int, leading: Int) throws -> (DaemonProcess, DaemonProcess) {
        let alone = try Replicas.leader(dirs[1])
        try JournalSupport.createUsers(port: alone.port, prefix: "own", range: 0..<own)
        alone.terminate()
        #expect(alone.waitForExit(timeout: 10) == 0)
        try FileManager.default.removeItem(at: dirs[1].appendingPathComponent("ORIGIN"))
        let leader = try Replicas.leader(dirs[0])
        try JournalSupport.createUsers(port: leader.port, prefix: "lead", range: 0..<leading)
        return (leader, try Replicas.follower(of: leader, dirs[1]))
    }

    @Test("a follower whose data holds records its leader does not have stops following with a clear log line, and keeps serving reads")
    func divergence() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let (leader, follower) = try Self.strangers(dirs, own: 3, leading: 3)
        defer { [leader, follower].forEach { $0.stop() } }
        #expect(follower.stderrEventually(contains: "following \(Replicas.address(leader)) from sequence 3"), "\(follower.stderrTail())")
        // Record 4 changes a user only the leader has: it cannot apply on the follower.
        let c = try LineClient(port: leader.port)
        #expect(try c.request(Wire.request("u", "user.updateUser", #"{"userId":"lead0","newName":"L"}"#)).contains("updateUserResult"))
        #expect(follower.stderrEventually(contains: "stopped following \(Replicas.address(leader)): record 4 (user.updateUser) does not apply here"),
            "\(follower.stderrTail())")
        #expect(follower.stderrText.contains("diverged"))
        // It says so once, applies nothing more, and still serves what it has, read-only.
        #expect(try c.request(Wire.createUser("n", "lead9", "N", "n@example.com")).contains("createUserResult"))
        usleep(300_000)
        #expect(follower.stderrText.components(separatedBy: "stopped following").count == 2, "one line with the cause: \(follower.stderrTail())")
        let replication = try Replicas.replication(follower)
        #expect(replication["state"] as? String == "stopped" && (replication["reason"] as? String)?.contains("does not apply here") == true, "\(replication)")
        #expect(try Replicas.sequence(follower) == 3)
        #expect(try JournalSupport.userIDs(port: follower.port) == ["own0", "own1", "own2"])
        expectError(try LineClient(port: follower.port).request(Wire.createUser("x", "x", "X", "x@example.com")), code: "readOnly", id: "x")
        #expect(follower.isRunning)
    }

    @Test("a follower with more records than its leader, in a term no lower than the leader's, stops following, keeps its records and says what to do")
    func followerAheadOfLeader() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let (leader, follower) = try Self.strangers(dirs, own: 5, leading: 2)
        defer { [leader, follower].forEach { $0.stop() } }
        let said = "holds records 3...5 that the leader at \(Replicas.address(leader)) does not have"
        #expect(follower.stderrEventually(contains: said, timeout: 10), "\(follower.stderrTail())")
        #expect(follower.stderrText.contains("neither history is newer"), "\(follower.stderrTail())")
        #expect(try JournalSupport.userIDs(port: follower.port) == ["own0", "own1", "own2", "own3", "own4"])
        let replication = try Replicas.replication(follower)
        #expect(replication["connected"] as? Bool == false && replication["state"] as? String == "stopped", "\(replication)")
        // What the leader said, not an estimate from the follower's own records.
        #expect(replication["leaderSequence"] == nil && replication["lagRecords"] == nil, "\(replication)")
        #expect((replication["reason"] as? String)?.contains(said) == true, "\(replication)")
    }

    @Test("a follower pointed at nothing says it never reached the leader; one pointed at itself does not start")
    func followNothingOrItself() throws {
        let hold = try PortHold()
        try withDaemon(extraArguments: ["--follow", "127.0.0.1:\(hold.port)"]) { follower in
            Thread.sleep(forTimeInterval: 0.5)
            let replication = try Replicas.replication(follower)
            #expect(replication["state"] as? String == "never reached the leader" && replication["leaderSequence"] == nil, "\(replication)")
            #expect(replication["reason"] as? String != nil, "\(replication)")
        }
        for (listen, follow) in [("127.0.0.1:7999", "127.0.0.1:7999"), ("*:7999", "127.0.0.1:7999"), ("127.0.0.1:7999", "localhost:7999")] {
            let dir = JournalSupport.makeDataDir()
            defer { JournalSupport.remove(dir) }
            let out = try runProcess(try Binaries.rpcd(), ["serve", "--listen", listen, "--follow", follow, "--data-dir", dir.path])
            #expect(out.status == 2 && out.stderr.contains("cannot follow itself"), "\(listen) \(follow): \(out.stderr)")
        }
    }

    @Test("with an auth file on the leader, a follower subscribes as a replicate principal (--follow-auth-file, written by auth add --follow-file); read may not subscribe")
    func replicateRole() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let credentials = dirs[2].path + ".follow"
        defer { unlink(credentials) }
        let added = try runProcess(try Binaries.rpcd(), ["auth", "add", "replica-1", "replicate", "--file", principals.file, "--follow-file", credentials])
        #expect(added.status == 0, "\(added)")

        let leader = try Replicas.leader(dirs[0], ["--auth-file", principals.file])
        defer { leader.stop() }
        let follower = try Replicas.follower(of: leader, dirs[1], ["--follow-auth-file", credentials])
        defer { follower.stop() }
        let writer = try LineClient(port: leader.port)
        #expect(try writer.request(principals.authLine("write")).contains("system.authResult"))
        #expect(try writer.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")).contains("createUserResult"))
        #expect(try eventually {
            let c = try LineClient(port: follower.port)
            return try c.request(Wire.getUser("g", "u1")).contains("getUserResult")
        }, "\(follower.stderrTail())")
        // With credentials for its leader and no auth file of its own, it serves the leader's data
        // to whoever reaches it: it says so at start and in system.stats.
        #expect(follower.stderrText.contains("has no auth_file of its own"), "\(follower.stderrTail())")
        let stats = try LineClient(port: follower.port).request(#"{"id":"s","method":"system.stats"}"#)
        #expect(stats.contains(#""warnings":["this follower authenticates to its leader but has no auth_file"#), "\(stats.prefix(400))")

        let reader = try LineClient(port: leader.port)
        #expect(try reader.request(principals.authLine("read")).contains("system.authResult"))
        expectError(try reader.request(#"{"id":"s","method":"replication.subscribe"}"#), code: "forbidden", id: "s")
        let replicator = try LineClient(port: leader.port)
        #expect(try replicator.request(principals.authLine("replicate")).contains("system.authResult"))
        expectError(try replicator.request(Wire.createUser("w", "u2", "B", "b@example.com")), code: "forbidden", id: "w")
        #expect(try replicator.request(#"{"id":"s","method":"replication.subscribe"}"#).contains("replication.subscribeResult"))

        // Without credentials a follower is refused, and keeps saying why.
        let anonymous = try Replicas.follower(of: leader, dirs[2])
        defer { anonymous.stop() }
        #expect(anonymous.stderrEventually(contains: "cannot follow \(Replicas.address(leader))"), "\(anonymous.stderrTail())")
        #expect(anonymous.stderrText.contains("unauthorized"), "\(anonymous.stderrTail())")
    }

    @Test("systemd's STATUS= line shows the role and the lag")
    func statusLine() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leaderNotify = try NotifySocket()
        let followerNotify = try NotifySocket()
        let leader = try Replicas.leader(dirs[0], environment: ["NOTIFY_SOCKET": leaderNotify.address, "WATCHDOG_USEC": "400000"])
        let follower = try Replicas.follower(
            of: leader, dirs[1], environment: ["NOTIFY_SOCKET": followerNotify.address, "WATCHDOG_USEC": "400000"])
        defer { [leader, follower].forEach { $0.stop() } }
        try JournalSupport.createUsers(port: leader.port, range: 0..<5)
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        let want = "reads as follower of \(Replicas.address(leader)), seq 5, lag 0"
        let followerSaid = eventually(timeout: 10) {
            followerNotify.waitFor("WATCHDOG=1", timeout: 1)
            return followerNotify.messages.contains { $0.contains(want) }
        }
        #expect(followerSaid, "follower STATUS lines: \(followerNotify.messages.suffix(3))")
        let leaderSaid = eventually(timeout: 10) {
            leaderNotify.waitFor("WATCHDOG=1", timeout: 1)
            return leaderNotify.messages.contains { $0.contains("as leader, seq 5, 1 subscriber (max lag 0)") }
        }
        #expect(leaderSaid, "leader STATUS lines: \(leaderNotify.messages.suffix(3))")
    }
}
