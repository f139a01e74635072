import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `--catch-up N`: how fast a follower gets in sync. A leader takes N creates (compacting into a
/// snapshot as it goes) and is restarted on its data (its own restart time, the reference); then
/// (1) a follower started empty is timed until it holds the leader's last record; (2) that
/// follower is stopped, N/5 more creates are written, and it is timed from its restart until in
/// sync again, and from its `listening on` (its own restart on its files done: what it fetches
/// from the leader and applies after that is the catch-up) until in sync, in records per second
/// against the leader's own create rate.
func runCatchUp(records: Int, binary: String) throws -> Never {
    let leaderDir = freshDataDir()
    let arguments = spawnArguments()
    var leader = try SpawnedDaemon(binary: binary, dataDir: leaderDir, extraArguments: arguments)
    let writeStart = Date()
    var errors = try pipeline(host: "127.0.0.1", port: leader.port, lines: createUsersLines(records, prefix: "c"))
    let leaderRate = Double(records) / Date().timeIntervalSince(writeStart)
    leader.stop()
    leader = try SpawnedDaemon(binary: binary, dataDir: leaderDir, extraArguments: arguments)
    let restart = leader.startSeconds
    let target = try StatsProbe(port: leader.port).stats().replication?.sequence ?? 0

    let followerDir = freshDataDir()
    let started = Date()
    var follower = try SpawnedDaemon(binary: binary, dataDir: followerDir, extraArguments: arguments + ["--follow", "127.0.0.1:\(leader.port)"])
    let empty = try waitForSequence(target, port: follower.port) ?? -1
    let emptySeconds = empty < 0 ? -1 : Date().timeIntervalSince(started)
    follower.stop()

    let more = max(1, records / 5)
    errors += try pipeline(host: "127.0.0.1", port: leader.port, lines: createUsersLines(more, prefix: "d"))
    let target2 = try StatsProbe(port: leader.port).stats().replication?.sequence ?? 0
    let restarted = Date()
    follower = try SpawnedDaemon(binary: binary, dataDir: followerDir, extraArguments: arguments + ["--follow", "127.0.0.1:\(leader.port)"])
    let behind = try waitForSequence(target2, port: follower.port) ?? -1
    let behindSeconds = behind < 0 ? -1 : Date().timeIntervalSince(restarted)
    let ownRestart = follower.startSeconds
    follower.kill()
    leader.kill()
    Cleanup.removeDirectory(followerDir)
    Cleanup.removeDirectory(leaderDir)

    let behindRate = behindSeconds > 0 ? Double(more) / behindSeconds : 0
    let fetching = behindSeconds - ownRestart
    let fetchRate = fetching > 0 ? Double(more) / fetching : 0
    print("leader             \(records) creates at \(Int(leaderRate))/s (\(options.fsync ?? rpcdDefaultFsync)); restart on its data \(String(format: "%.2f", restart)) s")
    print("follower, empty    in sync with \(target) records after \(String(format: "%.2f", emptySeconds)) s (\(String(format: "%.2f", emptySeconds / max(restart, 0.001))) x the leader's restart)")
    print("follower, behind   \(more) records behind, in sync \(String(format: "%.2f", behindSeconds)) s after its restart: \(Int(behindRate)) records/s (\(String(format: "%.1f", behindRate / max(leaderRate, 1))) x the leader's create rate)")
    print("                   of which its own restart on its files \(String(format: "%.2f", ownRestart)) s; caught up in \(String(format: "%.2f", fetching)) s after: \(Int(fetchRate)) records/s (\(String(format: "%.1f", fetchRate / max(leaderRate, 1))) x the leader's create rate)")
    print(
        "RESULT catchup=\(records) restart_ms=\(Int(restart * 1000)) empty_ms=\(Int(emptySeconds * 1000)) behind=\(more) behind_ms=\(Int(behindSeconds * 1000)) "
            + "behind_rps=\(Int(behindRate)) own_restart_ms=\(Int(ownRestart * 1000)) catchup_rps=\(Int(fetchRate)) leader_rps=\(Int(leaderRate)) errors=\(errors + (empty < 0 || behind < 0 ? 1 : 0))")
    exit(errors == 0 && empty >= 0 && behind >= 0 ? 0 : 1)
}

/// Polls `system.stats` until the daemon's sequence reaches `target` (within 10 minutes); the
/// sequence reached, or nil on timeout.
private func waitForSequence(_ target: Int, port: Int) throws -> Int? {
    let probe = try StatsProbe(port: port)
    let deadline = Date().addingTimeInterval(600)
    while Date() < deadline {
        if let seq = try probe.stats().replication?.sequence, seq >= target { return seq }
        usleep(5_000)
    }
    return nil
}
