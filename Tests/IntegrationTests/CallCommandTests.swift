import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `rpcd call` against the real daemon.
@Suite("rpcd call")
struct CallCommandTests {
    func call(_ arguments: [String], stdin: String? = nil, timeout: Double = 15) throws -> ProcessOutcome {
        try runProcess(try Binaries.rpcd(), ["call"] + arguments, stdin: stdin, timeout: timeout)
    }

    func expectOneLineError(_ out: ProcessOutcome, sourceLocation: SourceLocation = #_sourceLocation) {
        let message = out.stderr.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!message.isEmpty && !message.contains("\n"), "stderr: \(out.stderr)", sourceLocation: sourceLocation)
        #expect(out.stdout.isEmpty, "stdout: \(out.stdout)", sourceLocation: sourceLocation)
    }

    @Test("success: the counter-request on stdout as one line, exit 0; PARAM-JSON defaults to {}; - reads stdin")
    func success() throws {
        try withDaemon { daemon in
            let address = "127.0.0.1:\(daemon.port)"
            let created = try call([address, "user.createUser", #"{"id":"u1","name":"Ada","email":"ada@example.com"}"#])
            #expect(created.status == 0, "stderr: \(created.stderr)")
            #expect(created.stdout == Wire.createUserResult("1", "u1", "Ada", "ada@example.com") + "\n")
            let listed = try call(["--timeout", "5", address, "user.listUsers"])
            #expect(listed.status == 0, "stderr: \(listed.stderr)")
            #expect(listed.stdout == Wire.result("1", "user.listUsers", #"{"users":[\#(Wire.user("u1", "Ada", "ada@example.com"))]}"#) + "\n")
            let fromStdin = try call([address, "user.getUser", "-"], stdin: #"{"userId":"u1"}"#)
            #expect(fromStdin.status == 0, "stderr: \(fromStdin.stderr)")
            #expect(fromStdin.stdout == Wire.result("1", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")) + "\n")
        }
    }

    @Test("error.error: printed on stdout, exit 1")
    func error() throws {
        try withDaemon { daemon in
            let out = try call(["127.0.0.1:\(daemon.port)", "user.getUser", #"{"userId":"nobody"}"#])
            #expect(out.status == 1, "stderr: \(out.stderr)")
            #expect(out.stdout.hasPrefix(#"{"id":"1","method":"error.error","param":{"errorMessage":"#))
            #expect(out.stdout.hasSuffix(#","code":"notFound"}}"# + "\n"))
            #expect(out.stdout.filter { $0 == "\n" }.count == 1)
            let unknown = try call(["127.0.0.1:\(daemon.port)", "user.fly"])
            #expect(unknown.status == 1)
            #expect(unknown.stdout.contains(#""code":"methodNotFound""#))
        }
    }

    @Test("bad JSON param (argument or stdin): exit 2, one line on stderr, nothing sent")
    func badParam() throws {
        try withDaemon { daemon in
            let address = "127.0.0.1:\(daemon.port)"
            for out in [
                try call([address, "user.getUser", #"{"userId":"#]),
                try call([address, "user.getUser", "-"], stdin: "not json"),
            ] {
                #expect(out.status == 2)
                expectOneLineError(out)
                #expect(out.stderr.contains("not valid JSON"))
            }
            // Nothing was created by them.
            #expect(try call([address, "user.listUsers"]).stdout.contains(#"{"users":[]}"#))
        }
    }

    @Test("usage errors exit 2 with one line on stderr", arguments: [
        [String](), ["127.0.0.1:1"], ["not-an-address", "user.listUsers"], ["127.0.0.1:1", "nodot"],
        ["--timeout", "soon", "127.0.0.1:1", "user.listUsers"], ["--bogus", "127.0.0.1:1", "user.listUsers"],
        ["127.0.0.1:1", "user.getUser", "{}", "extra"], ["127.0.0.1:1,", "user.listUsers"], ["127.0.0.1:1,nowhere", "user.listUsers"],
    ])
    func usage(_ arguments: [String]) throws {
        let out = try call(arguments, timeout: 5)
        #expect(out.status == 2, "rpcd call \(arguments): exit \(String(describing: out.status))")
        expectOneLineError(out)
    }

    @Test("a list of members: past one that cannot be reached and one that answers readOnly (a follower) to the leader, saying so on stderr")
    func membersInOrder() throws {
        let dirs = (0..<2).map { _ in JournalSupport.makeDataDir() }
        defer { dirs.forEach(JournalSupport.remove) }
        let leader = try Replicas.leader(dirs[0])
        defer { leader.stop() }
        let follower = try Replicas.follower(of: leader, dirs[1])
        defer { follower.stop() }
        let hold = try PortHold()
        let members = "127.0.0.1:\(hold.port),\(Replicas.address(follower)),\(Replicas.address(leader))"
        let created = try call(["--key", "k1", members, "user.createUser", #"{"id":"u1","name":"Ada","email":"ada@example.com"}"#])
        #expect(created.status == 0 && created.stdout.contains("createUserResult"), "\(created.stdout)\(created.stderr)")
        #expect(created.stderr.contains("127.0.0.1:\(hold.port) cannot be reached"), "\(created.stderr)")
        #expect(created.stderr.contains("\(Replicas.address(follower)) answered readOnly (a follower); trying \(Replicas.address(leader))"), "\(created.stderr)")
        // A read is answered by the first member that can: the follower, once it has the record.
        try Replicas.waitForConvergence(leader: leader, followers: [follower])
        let read = try call(["\(Replicas.address(follower)),\(Replicas.address(leader))", "user.getUser", #"{"userId":"u1"}"#])
        #expect(read.status == 0 && read.stdout.contains("getUserResult") && read.stderr.isEmpty, "\(read.stdout)\(read.stderr)")
        // Every member a follower: the last readOnly is the answer (exit 1).
        let refused = try call([Replicas.address(follower), "user.createUser", #"{"id":"u2","name":"B","email":"b@example.com"}"#])
        #expect(refused.status == 1 && refused.stdout.contains("readOnly"), "\(refused.stdout)")
    }

    @Test("a stopped member (SIGSTOP: the kernel still accepts) is left after its share of --timeout for a read or a keyed call, never for an unkeyed mutation")
    func stoppedMember() throws {
        let stopped = try DaemonProcess()
        defer {
            stopped.signal(SIGCONT)
            stopped.stop()
        }
        let live = try DaemonProcess()
        defer { live.stop() }
        stopped.signal(SIGSTOP)
        let members = "127.0.0.1:\(stopped.port),127.0.0.1:\(live.port)"
        let silent = "127.0.0.1:\(stopped.port) did not answer in its share of --timeout"

        var started = Date()
        let created = try call(["--timeout", "4", "--key", "k1", members, "user.createUser", #"{"id":"u1","name":"Ada","email":"ada@example.com"}"#])
        var elapsed = Date().timeIntervalSince(started)
        #expect(created.status == 0 && created.stdout.contains("createUserResult"), "\(created.stdout)\(created.stderr)")
        #expect(created.stderr.contains("\(silent) (stopped or overloaded?); the key makes the retry safe; trying 127.0.0.1:\(live.port)"), "\(created.stderr)")
        #expect(elapsed >= 1.9 && elapsed < 3.9, "the stopped member had half of 4 s; exited after \(elapsed) s")

        let read = try call(["--timeout", "4", members, "user.getUser", #"{"userId":"u1"}"#])
        #expect(read.status == 0 && read.stdout.contains("getUserResult"), "\(read.stdout)\(read.stderr)")
        #expect(read.stderr.contains("\(silent) (stopped or overloaded?); a read is safe to ask again"), "\(read.stderr)")

        // Without a key the stopped member may apply it once it runs again: no second member.
        started = Date()
        let unkeyed = try call(["--timeout", "2", members, "user.createUser", #"{"id":"u2","name":"B","email":"b@example.com"}"#])
        elapsed = Date().timeIntervalSince(started)
        #expect(unkeyed.status == 2 && unkeyed.stderr.contains("no reply within 2 s"), "\(unkeyed.stderr)")
        #expect(unkeyed.stderr.contains("not trying 127.0.0.1:\(live.port)") && unkeyed.stderr.contains("run it again with --key"), "\(unkeyed.stderr)")
        #expect(elapsed >= 1.9, "exited after \(elapsed) s")
        let absent = try call(["127.0.0.1:\(live.port)", "user.getUser", #"{"userId":"u2"}"#])
        #expect(absent.status == 1 && absent.stdout.contains("notFound"), "\(absent.stdout)")

        // Past the stopped member only a follower: its readOnly would say nothing applied the call,
        // but the stopped member may; the outcome is unknown (exit 2), and stderr says to ask again.
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let follower = try Replicas.follower(of: live, dir)
        defer { follower.stop() }
        let unknown = try call(["--timeout", "4", "--key", "k3", "127.0.0.1:\(stopped.port),\(Replicas.address(follower))", "user.createUser", #"{"id":"u3","name":"C","email":"c@example.com"}"#])
        #expect(unknown.status == 2 && unknown.stdout.isEmpty, "\(unknown.stdout)\(unknown.stderr)")
        #expect(
            unknown.stderr.contains("\(Replicas.address(follower)) answered readOnly (a follower), and 127.0.0.1:\(stopped.port) did not answer; run the call again with the same --key to learn its outcome"),
            "\(unknown.stderr)")
    }

    @Test("unreachable: refused port, and a peer that never answers, exit 2 within the timeout")
    func unreachable() throws {
        let peer = try FakePeer()
        let refusedPort: Int = try {
            let closed = try FakePeer()
            return closed.port  // the listener closes when `closed` goes
        }()
        var started = Date()
        let refused = try call(["--timeout", "2", "127.0.0.1:\(refusedPort)", "user.listUsers"], timeout: 10)
        #expect(refused.status == 2)
        expectOneLineError(refused)
        #expect(Date().timeIntervalSince(started) < 6)

        started = Date()
        let silent = try call(["--timeout", "1", "127.0.0.1:\(peer.port)", "user.listUsers"], timeout: 10)
        let elapsed = Date().timeIntervalSince(started)
        #expect(silent.status == 2)
        expectOneLineError(silent)
        #expect(silent.stderr.contains("no reply within 1 s"), "stderr: \(silent.stderr)")
        #expect(elapsed >= 0.9 && elapsed < 6, "exited after \(elapsed) s")
        // (Only loopback peers: tests never send traffic to other addresses.)
    }
}
