import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `coordinator = etcd:…` (issue 53): three members and a real etcd elect a leader, fail over
/// when it dies or stops, fence the old one, and the old one follows the new leader when it
/// comes back. Leases of 2 s keep each failover short.
@Suite(
    "failover on etcd: election, kill -9 and SIGSTOP of the leader, fencing, the old leader follows", .serialized,
    .enabled(if: EtcdProcess.shouldRun, "etcd is not installed: apt-get install etcd-server (CI installs it and runs these)"))
struct FailoverTests {
    static func member(
        _ etcd: EtcdProcess, _ dir: URL, listen: String = "127.0.0.1:0", _ extra: [String] = [], environment: [String: String] = [:]
    ) throws -> DaemonProcess {
        try DaemonProcess(
            listen: [listen],
            extraArguments: ["--coordinator", etcd.coordinator, "--cluster", "t", "--leader-ttl", "2"] + extra, dataDir: dir,
            environment: environment)
    }

    static func role(_ daemon: DaemonProcess) -> String? { (try? Replicas.replication(daemon))?["role"] as? String }

    /// The one member that says it is the leader, once the others follow it.
    static func settledLeader(_ members: [DaemonProcess], timeout: Double = 20) throws -> DaemonProcess {
        var leader: DaemonProcess?
        let settled = eventually(timeout: TestPace.seconds(timeout), every: 0.1) {
            let roles = members.map(Self.role)
            guard roles.filter({ $0 == "leader" }).count == 1, roles.filter({ $0 == "follower" }).count == members.count - 1 else { return false }
            leader = members[roles.firstIndex(of: "leader")!]
            return members.allSatisfy { member in
                member === leader || (try? Replicas.replication(member))?["leader"] as? String == Replicas.address(leader!)
            }
        }
        guard settled, let leader else {
            throw HarnessError("no settled leader: roles \(members.map(Self.role)); \(members.map { $0.stderrTail(1500) }.joined(separator: "\n---\n"))")
        }
        return leader
    }

    static func keyedCreate(_ n: Int) -> String {
        #"{"id":"\#(n)","method":"user.createUser","param":{"id":"w\#(n)","name":"N","email":"n@example.com"},"key":"k\#(n)"}"#
    }

    /// Sends create `n` to each member in turn until one acknowledges it (or `timeout` passes).
    static func write(_ n: Int, to members: [DaemonProcess], timeout: Double) -> DaemonProcess? {
        let watch = Stopwatch()
        while watch.seconds < timeout {
            for member in members {
                guard let client = try? LineClient(port: member.port, timeout: 5), let reply = try? client.request(Self.keyedCreate(n)) else { continue }
                if reply.contains("createUserResult") { return member }
            }
            usleep(50_000)
        }
        return nil
    }

    /// Whether `daemon` has write `n`, read on a connection that allows stale reads (a member
    /// that is not the leader answers no other).
    static func has(_ daemon: DaemonProcess, _ n: Int) -> Bool {
        guard let client = try? LineClient(port: daemon.port), (try? client.request(#"{"id":"s","method":"system.staleReads","param":{"allow":true}}"#)) != nil,
            let reply = try? client.request(Wire.getUser("g", "w\(n)"))
        else { return false }
        return reply.contains("getUserResult")
    }

    @Test("three members elect one leader; kill -9 it under keyed writes: another takes over, has every acknowledged write, and the old one restarted follows it")
    func killTheLeader() throws {
        let etcd = try EtcdProcess()
        defer { etcd.stop() }
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        var members = try dirs.map { try Self.member(etcd, $0, ["--min-sync-replicas", "1"]) }
        defer { members.forEach { $0.stop() } }
        let leader = try Self.settledLeader(members)
        #expect(try eventually(timeout: 10) { (try Replicas.replication(leader))["inSyncReplicas"] as? Int ?? 0 >= 1 })
        let follower = try LineClient(port: members.first { $0 !== leader }!.port)
        let followerReply = try follower.request(Self.keyedCreate(0))
        #expect(followerReply.contains("readOnly"), "a follower takes no writes: \(followerReply)")
        // Nor reads, unless the connection allows stale ones (its data lags the leader's).
        let read = try follower.request(Wire.getUser("r", "w0"))
        #expect(read.contains("readOnly") && read.contains("this member follows the leader at \(Replicas.address(leader))") && read.contains("system.staleReads"), "\(read)")
        #expect(try follower.request(#"{"id":"s","method":"system.staleReads","param":{"allow":true}}"#).contains(#""allow":true"#))
        #expect(try follower.request(Wire.getUser("r", "w0")).contains("notFound"))
        #expect(try LineClient(port: leader.port).request(Wire.getUser("r", "w0")).contains("notFound"), "the leader answers reads")

        var acknowledged: [Int] = []
        for n in 1...100 where Self.write(n, to: [leader], timeout: 5) != nil { acknowledged.append(n) }
        #expect(acknowledged.count == 100)
        let oldPort = leader.port
        let oldDir = leader.dataDir
        leader.kill()
        let watch = Stopwatch()
        let survivors = members.filter { $0 !== leader }
        guard let newLeader = Self.write(101, to: survivors, timeout: TestPace.seconds(30)) else {
            Issue.record("no member took a write within 30 s of the leader's death: \(survivors.map { $0.stderrTail(2000) }.joined(separator: "\n---\n"))")
            return
        }
        acknowledged.append(101)
        print("failover: the first write acknowledged by the new leader \(String(format: "%.2f", watch.seconds)) s after kill -9 (leader_ttl 2 s)")
        let missing = acknowledged.filter { !Self.has(newLeader, $0) }
        #expect(missing.isEmpty, "acknowledged writes missing on the new leader: \(missing)")
        #expect(newLeader.stderrTail().contains("elected leader of cluster t: term 2"), "\(newLeader.stderrTail())")

        // The old leader, restarted on its data and address, follows the new one.
        let restarted = try Self.member(etcd, oldDir, listen: "127.0.0.1:\(oldPort)", ["--min-sync-replicas", "1"])
        members = survivors + [restarted]
        #expect(try Self.settledLeader(members) === newLeader)
        try Replicas.waitForConvergence(leader: newLeader, followers: members.filter { $0 !== newLeader })
        #expect(acknowledged.allSatisfy { Self.has(restarted, $0) })
    }

    @Test("SIGSTOP the leader past its lease: another is elected; resumed, the old leader acknowledges nothing it was sent and follows the new leader")
    func stopTheLeader() throws {
        let etcd = try EtcdProcess()
        defer { etcd.stop() }
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let members = try dirs.map { try Self.member(etcd, $0) }
        defer {
            members.forEach { $0.signal(SIGCONT) }
            members.forEach { $0.stop() }
        }
        let leader = try Self.settledLeader(members)
        #expect(Self.write(1, to: [leader], timeout: 5) != nil)
        let client = try LineClient(port: leader.port, timeout: 30)
        leader.signal(SIGSTOP)
        // Sent while it is stopped; it reads them only once resumed, after its lease is gone.
        try client.send(Self.keyedCreate(2) + "\n")
        let survivors = members.filter { $0 !== leader }
        let newLeader = try Self.settledLeader(survivors + [], timeout: 30)
        #expect(Self.write(3, to: [newLeader], timeout: 10) != nil)
        leader.signal(SIGCONT)
        let reply = try client.expectLine()
        #expect(!reply.contains("createUserResult"), "a leader resumed past its lease acknowledged a write: \(reply)")
        #expect(reply.contains("readOnly") || reply.contains("replicationTimeout"), "\(reply)")
        #expect(try Self.settledLeader(members) === newLeader)
        try Replicas.waitForConvergence(leader: newLeader, followers: members.filter { $0 !== newLeader })
        #expect(Self.has(leader, 3))
    }

    @Test("only the last published sync set may run: a follower that fell out of it is not elected when the leader and the one in sync die; the one in sync, back, is")
    func onlyTheSyncSetRuns() throws {
        let etcd = try EtcdProcess()
        defer { etcd.stop() }
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let extra = ["--min-sync-replicas", "1", "--sync-timeout", "0.5"]
        var members = try dirs.map { try Self.member(etcd, $0, extra) }
        defer {
            members.forEach { $0.signal(SIGCONT) }
            members.forEach { $0.stop() }
        }
        let leader = try Self.settledLeader(members)
        let followers = members.filter { $0 !== leader }
        #expect(try eventually(timeout: 10) { (try Replicas.replication(leader))["inSyncReplicas"] as? Int == 2 }, "\(leader.stderrTail())")
        // One follower stops: the next writes wait for it, time out, and it leaves the sync set.
        let (kept, dropped) = (followers[0], followers[1])
        dropped.signal(SIGSTOP)
        var n = 1
        #expect(eventually(timeout: 20, every: 0.1) {
            n += 1
            return Self.write(n, to: [leader], timeout: 2) != nil
        }, "writes go on once the stopped follower left the sync set: \(leader.stderrTail())")
        #expect(leader.stderrEventually(contains: "sync set published: \(Replicas.address(kept))\n"), "\(leader.stderrTail())")
        let keptPort = kept.port
        let keptDir = kept.dataDir
        leader.kill()
        kept.kill()
        dropped.signal(SIGCONT)
        // The survivor lacks acknowledged writes: it must not take the lead.
        usleep(5_000_000)
        #expect(Self.role(dropped) != "leader", "\(dropped.stderrTail())")
        #expect(try LineClient(port: dropped.port).request(Self.keyedCreate(1000)).contains("readOnly"))
        #expect(dropped.stderrTail().contains("not in the last published sync set"), "\(dropped.stderrTail())")
        let back = try Self.member(etcd, keptDir, listen: "127.0.0.1:\(keptPort)", extra)
        members = [dropped, back]
        #expect(try Self.settledLeader(members) === back)
        try Replicas.waitForConvergence(leader: back, followers: [dropped])
        #expect((1...n).filter { Self.has(dropped, $0) }.count >= n - 1, "the survivor copied the writes it lacked")
    }

    @Test("etcd out of reach: the leader takes no writes once 2/3 of leader_ttl pass without a renewal, and says why; etcd back, a leader takes writes again")
    func fencedWithoutEtcd() throws {
        let etcd = try EtcdProcess()
        defer {
            etcd.signal(SIGCONT)
            etcd.stop()
        }
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let notify = try NotifySocket()
        let members = try [
            Self.member(etcd, dirs[0], environment: ["NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "400000"]), Self.member(etcd, dirs[1]),
        ]
        defer { members.forEach { $0.stop() } }
        let leader = try Self.settledLeader(members)
        let role = members[0] === leader ? "as leader" : "reads as follower of \(Replicas.address(leader))"
        /// The first STATUS= datagram that contains `text`, within 10 s.
        func status(containing text: String) -> String? {
            let watch = Stopwatch()
            while watch.seconds < 10 {
                if let hit = notify.waitFor("-", timeout: 0.3).first(where: { $0.contains(text) }) { return hit }
            }
            return nil
        }
        let serving = status(containing: "STATUS=serving \(role)")
        #expect(serving?.contains("; etcd: ") == true, "STATUS= names the coordinator's view: \(serving ?? "none")")
        #expect(Self.write(1, to: [leader], timeout: 5) != nil)
        etcd.signal(SIGSTOP)
        usleep(1_600_000)  // past 2/3 of the 2 s lease (the fence), short of the lease itself
        let reply = try LineClient(port: leader.port).request(Self.keyedCreate(2))
        #expect(reply.contains("readOnly") && reply.contains("has not renewed its etcd lease"), "\(reply)")
        let read = try LineClient(port: leader.port).request(Wire.getUser("g", "w1"))
        #expect(read.contains("readOnly") && read.contains("may be stale"), "a fenced leader answers reads only where stale ones are allowed: \(read)")
        #expect(try eventually(timeout: 10) { ((try Replicas.replication(leader))["coordinator"] as? String ?? "").contains("etcd unreachable") })
        #expect(status(containing: "etcd: etcd unreachable") != nil, "STATUS= says etcd is out of reach")
        #expect(Self.has(leader, 1), "stale-allowed reads go on")
        etcd.signal(SIGCONT)
        #expect(Self.write(2, to: members, timeout: TestPace.seconds(30)) != nil, "\(members.map { $0.stderrTail(1500) })")
    }

    @Test("the Swift client reads from a follower once it allows stale reads; without, the follower answers readOnly naming the leader")
    func clientStaleReads() async throws {
        let etcd = try EtcdProcess()
        defer { etcd.stop() }
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let members = try dirs.map { try Self.member(etcd, $0) }
        defer { members.forEach { $0.stop() } }
        let leader = try Self.settledLeader(members)
        #expect(Self.write(1, to: [leader], timeout: 5) != nil)
        let follower = "127.0.0.1:\(members.first { $0 !== leader }!.port)"
        let strict = try await RPCClient.connect(to: follower)
        defer { strict.close() }
        do {
            _ = try await strict.call(GetUser(userId: "w1"))
            Issue.record("a follower answered a read on a connection that did not allow stale reads")
        } catch let error as RPCClientError {
            #expect(error.code == .readOnly && error.errorMessage.contains(Replicas.address(leader)), "\(error)")
        }
        var options = RPCClientOptions()
        options.allowStaleReads = true
        let stale = try await RPCClient.connect(to: follower, options: options)
        defer { stale.close() }
        var name: String?
        for _ in 0..<100 where name == nil {
            name = try? await stale.call(GetUser(userId: "w1")).name
            if name == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(name == "N")
    }

    @Test("README's High availability example runs as written: etcd, three members, a create through rpcd call")
    func readmeExample() throws {
        let readme = try String(contentsOf: ReadmeReferenceTests.root().appendingPathComponent("README.md"), encoding: .utf8)
        guard let marker = readme.range(of: "<!-- ha-example -->\n```sh\n"), let end = readme.range(of: "\n```", range: marker.upperBound..<readme.endIndex) else {
            throw HarnessError("README has no <!-- ha-example --> sh block")
        }
        let block = String(readme[marker.upperBound..<end.lowerBound])
        let dir = JournalSupport.makeDataDir()
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { JournalSupport.remove(dir) }
        // As written, but with the binary under test (already built) and a private etcd directory;
        // every process it started is stopped at the end.
        let script = block.replacingOccurrences(of: "swift build && ", with: "")
            .replacingOccurrences(of: ".build/debug/rpcd", with: try Binaries.rpcd().path)
            .replacingOccurrences(of: "/tmp/etcd-demo", with: dir.appendingPathComponent("etcd").path)
            .replacingOccurrences(of: "/tmp/etcd.log", with: dir.appendingPathComponent("etcd.log").path)
        let wrapped = "cd '\(dir.path)'\nset -m\n\(script)\nstatus=$?\nkill $(jobs -p) 2>/dev/null; wait\nexit $status\n"
        let run = try runProcess(URL(fileURLWithPath: "/bin/bash"), ["-c", wrapped], timeout: 60)
        #expect(run.status == 0 && run.stdout.contains(#""method":"user.createUserResult""#), "\(run)")
    }

    @Test("members that advertise tls:HOST:PORT follow each other over TLS: each verifies the leader with tls_ca_file, and one that does not trust it follows nobody")
    func membersOverTLS() throws {
        let certs = try TestCertificates()
        try certs.otherCA("stranger")
        let etcd = try EtcdProcess()
        defer { etcd.stop() }
        let dirs = (0..<3).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        // Each member listens on plain TCP for this test's probes, and advertises only its TLS port.
        func member(_ dir: URL, ca: String) throws -> (DaemonProcess, String) {
            let advertised = "tls:127.0.0.1:\(try freeLoopbackPort())"
            let daemon = try DaemonProcess(
                listen: ["127.0.0.1:0", advertised],
                extraArguments: [
                    "--coordinator", etcd.coordinator, "--cluster", "t", "--leader-ttl", "2", "--advertise", advertised,
                    "--tls-cert-file", certs.serverCert, "--tls-key-file", certs.serverKey, "--tls-ca-file", ca,
                ],
                dataDir: dir)
            return (daemon, advertised)
        }
        let first = try member(dirs[0], ca: certs.ca)
        defer { first.0.stop() }
        #expect(eventually(timeout: TestPace.seconds(15), every: 0.1) { Self.role(first.0) == "leader" }, "\(first.0.stderrTail())")
        let second = try member(dirs[1], ca: certs.ca)
        defer { second.0.stop() }
        let following = eventually(timeout: TestPace.seconds(15), every: 0.1) {
            Self.role(second.0) == "follower" && (try? Replicas.replication(second.0))?["leader"] as? String == first.1
        }
        #expect(following, "the second member follows \(first.1): \((try? Replicas.replication(second.0)).map { "\($0)" } ?? "") \(second.0.stderrTail())")
        #expect(Self.write(1, to: [first.0], timeout: 10) != nil)
        #expect(eventually(timeout: TestPace.seconds(10), every: 0.1) { Self.has(second.0, 1) }, "the record reached the member that follows over TLS")

        // A member that does not trust the leader's certificate never follows it.
        let stranger = try member(dirs[2], ca: certs.path("stranger.pem"))
        defer { stranger.0.stop() }
        #expect(stranger.0.stderrEventually(contains: "certificate verify failed", timeout: TestPace.seconds(15)), "\(stranger.0.stderrTail())")
        #expect(!Self.has(stranger.0, 1), "nothing reached the member that does not trust the leader")
    }

    @Test("coordinator settings: a bad etcd address is a usage error, coordinator with follow fails the start, check-config shows them")
    func settings() throws {
        let rpcd = try Binaries.rpcd()
        let bad = try runProcess(rpcd, ["serve", "--coordinator", "etcd:nowhere"])
        #expect(bad.status == 2 && bad.stderr.contains("--coordinator 'etcd:nowhere' is not etcd:HOST:PORT"), "\(bad)")
        let ttl = try runProcess(rpcd, ["serve", "--leader-ttl", "1"])
        #expect(ttl.status == 2 && ttl.stderr.contains("--leader-ttl '1'"), "\(ttl)")
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let both = try runProcess(rpcd, ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir.path, "--coordinator", "etcd:127.0.0.1:1", "--follow", "127.0.0.1:2"])
        #expect(both.status == 2 && both.stderr.contains("coordinator and follow are both set"), "\(both)")
        let wildcard = try runProcess(rpcd, ["serve", "--listen", "0.0.0.0:0", "--data-dir", dir.path, "--coordinator", "etcd:127.0.0.1:1"])
        #expect(wildcard.status == 2 && wildcard.stderr.contains("set advertise = HOST:PORT"), "\(wildcard)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let conf = dir.appendingPathComponent("rpcd.conf").path
        try "coordinator = etcd:127.0.0.1:2379, 127.0.0.1:2380\ncluster = c1\nleader_ttl = 3\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let shown = try runProcess(rpcd, ["check-config", conf])
        #expect(shown.status == 0 && shown.stdout.contains("coordinator = etcd:127.0.0.1:2379, 127.0.0.1:2380\ncluster = c1\n"), "\(shown)")
        #expect(shown.stdout.contains("leader_ttl = 3\n"), "\(shown)")
    }
}
