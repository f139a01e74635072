import Foundation
import RPCClient
import RPCSchema
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `RPCCluster`: the members of a replicated rpcd as one client (issue 53, clients find the leader).
@Suite("RPCCluster: calls find the leader, and follow it through a failover", .serialized)
struct ClusterClientTests {
    @Test("a mutation moves past a follower's readOnly to the leader and stays there; after the leader dies and a follower is promoted, calls move to it, each mutation applied once")
    func findsAndFollowsTheLeader() async throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        defer { leader.stop() }
        var follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        let cluster = RPCCluster(members: [Replicas.address(follower), Replicas.address(leader)])
        defer { cluster.close() }

        let ada = try await cluster.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
        #expect(ada.id == "u1")
        #expect(cluster.current == Replicas.address(leader))
        #expect(try await cluster.call(GetUser(userId: "u1")).name == "Ada")
        try Replicas.waitForConvergence(leader: leader, followers: [follower])

        // The leader dies; the follower is promoted on its own port.
        leader.kill()
        _ = leader.waitForExit(timeout: 10)
        let port = follower.port
        follower.terminate()
        #expect(follower.waitForExit(timeout: 10) == 0)
        follower = try DaemonProcess(listen: ["127.0.0.1:\(port)"], dataDir: dirs[1])
        let bea = try await cluster.call(CreateUser(id: "u2", name: "Bea", email: "bea@example.com"), key: "create-u2")
        #expect(bea.id == "u2")
        #expect(cluster.current == "127.0.0.1:\(port)")
        // The same key again: the first outcome, not a conflict.
        #expect(try await cluster.call(CreateUser(id: "u2", name: "Bea", email: "bea@example.com"), key: "create-u2").id == "u2")
        #expect(try JournalSupport.userIDs(port: port) == ["u1", "u2"])
    }

    @Test("a member that lets a keyed mutation or a read time out (a stopped process) is passed for the next one; an unkeyed mutation is not sent twice")
    func movesPastAStoppedMember() async throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let stopped = try Replicas.leader(dirs[0])
        let live = try Replicas.leader(dirs[1])
        defer {
            stopped.signal(SIGCONT)
            stopped.stop()
            live.stop()
        }
        let cluster = RPCCluster(members: [Replicas.address(stopped), Replicas.address(live)])
        defer { cluster.close() }
        stopped.signal(SIGSTOP)
        let ada = try await cluster.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"), key: "k1", timeout: .after(.seconds(1)))
        #expect(ada.id == "u1" && cluster.current == Replicas.address(live))
        let reads = RPCCluster(members: [Replicas.address(stopped), Replicas.address(live)])
        defer { reads.close() }
        #expect(try await reads.call(GetUser(userId: "u1"), timeout: .after(.seconds(1))).name == "Ada")
        var options = RPCClientOptions()
        options.keyGenerator = nil
        let unkeyed = RPCCluster(members: [Replicas.address(stopped), Replicas.address(live)], options: options)
        defer { unkeyed.close() }
        await #expect(throws: RPCClientError.self) {
            try await unkeyed.call(CreateUser(id: "u2", name: "Bea", email: "bea@example.com"), timeout: .after(.seconds(1)))
        }
        // Past the stopped member only a follower: the call's outcome is unknown (the stopped
        // member may apply it), not the follower's readOnly.
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let follower = try Replicas.follower(of: live, dir)
        defer { follower.stop() }
        let past = RPCCluster(members: [Replicas.address(stopped), Replicas.address(follower)])
        defer { past.close() }
        do {
            let made = try await past.call(CreateUser(id: "u3", name: "Cy", email: "cy@example.com"), key: "k3", timeout: .after(.seconds(1)))
            Issue.record("a follower cannot create \(made.id)")
        } catch let error as RPCClientError {
            guard case .timedOut = error else { Issue.record("the stopped member's timeout, not: \(error)"); return }
        }
        stopped.signal(SIGCONT)
        #expect(try JournalSupport.userIDs(port: live.port) == ["u1"], "the unkeyed create went to the stopped member only")
    }

    @Test("an error that is the call's answer (notFound) is thrown at once, without trying the other members")
    func answersAreNotRetried() async throws {
        try await withDaemonAsync { daemon in
            let cluster = RPCCluster(members: ["127.0.0.1:\(daemon.port)", "127.0.0.1:1"])
            defer { cluster.close() }
            await #expect(throws: RPCClientError.self) { try await cluster.call(GetUser(userId: "nobody")) }
            #expect(cluster.current == "127.0.0.1:\(daemon.port)")
        }
    }
}
