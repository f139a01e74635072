import Foundation
import RPCClient
import RPCSchema
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// What surprised a new user (issue 50's list): each test failed before its fix.
@Suite("no surprises for a new user", .serialized)
struct SurpriseTests {
    @Test("a wrong token: rpcd call and RPCClient show the daemon's system.auth answer, not a later call's refusal")
    func wrongTokenShowsTheAuthError() async throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        let authTimeout = TestPace.seconds(1)
        let daemon = try DaemonProcess(extraArguments: ["--auth-file", principals.file, "--auth-timeout", "\(authTimeout)"])
        defer { daemon.stop() }
        let tokenFile = principals.file + ".wrong"
        try "not-the-token\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
        defer { unlink(tokenFile) }
        for name in ["read", "nobody"] {
            let call = try runProcess(try Binaries.rpcd(), ["call", "--auth", "\(name):\(tokenFile)", "127.0.0.1:\(daemon.port)", "user.listUsers"])
            #expect(call.status == 1, "\(call.stdout) \(call.stderr)")
            #expect(call.stdout.contains(#"unknown name or wrong token for \"\#(name)\""#) && call.stdout.contains("unauthorized"), "\(call.stdout)")
            #expect(!call.stdout.contains("call system.auth first"), "\(call.stdout)")
        }
        let options = RPCClientOptions(credentials: .token(name: "read", secret: "not-the-token"))
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: options)
        defer { client.close() }
        do {
            _ = try await client.call(ListUsers())
            Issue.record("expected .authenticationFailed")
        } catch let error as RPCClientError {
            guard case .authenticationFailed(let name, let message, _, _) = error else {
                Issue.record("expected .authenticationFailed, got \(error)")
                return
            }
            #expect(name == "read" && message.contains("unknown name or wrong token"), "\(message)")
            #expect(error.code == .unauthorized)
        }
        // A call made after the daemon closed the connection (auth_timeout) is told the same.
        let late = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: options)
        defer { late.close() }
        try await Task.sleep(for: .seconds(authTimeout * 2))
        do {
            _ = try await late.call(ListUsers())
            Issue.record("expected .authenticationFailed")
        } catch let error as RPCClientError {
            guard case .authenticationFailed = error else {
                Issue.record("expected .authenticationFailed after the close, got \(error)")
                return
            }
        }
    }

    @Test("a JSON-RPC habit gets one error that names every problem of the request")
    func everyProblemAtOnce() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let reply = try c.request(#"{"jsonrpc":"2.0","id":1,"method":"user.getUser","params":{"userId":"u1"}}"#)
            #expect(reply.contains("invalidRequest"), "\(reply)")
            for part in [#"\"jsonrpc\" is not a field"#, #"\"params\" is not a field of a request; did you mean \"param\"?"#, "the request id must be a string"] {
                #expect(reply.contains(part), "\(part) missing from \(reply)")
            }
            // One problem: the message as before.
            let one = try c.request(#"{"id":"2","method":"user.getUser","params":{}}"#)
            #expect(one.contains(#"{"errorMessage":"\"params\" is not a field of a request; did you mean \"param\"? (a request has"#), "\(one)")
        }
    }

    @Test("rpcd call --key applies a mutation once however often the call is run; --key auto prints the key it made")
    func callWithKey() throws {
        try withDaemon { daemon in
            let address = "127.0.0.1:\(daemon.port)"
            let create = ["call", "--key", "script-1", address, "user.createUser", #"{"id":"k1","name":"K","email":"k@x"}"#]
            let first = try runProcess(try Binaries.rpcd(), create)
            let again = try runProcess(try Binaries.rpcd(), create)
            #expect(first.status == 0 && first.stdout.contains("createUserResult"), "\(first.stdout) \(first.stderr)")
            #expect(again.status == 0 && again.stdout == first.stdout, "a retry with the key gets the first outcome: \(again.stdout)")
            let plain = try runProcess(try Binaries.rpcd(), ["call", address, "user.createUser", #"{"id":"k1","name":"K","email":"k@x"}"#])
            #expect(plain.status == 1, "without a key the same create runs again and fails: \(plain.stdout)")
            let auto = try runProcess(try Binaries.rpcd(), ["call", "--key", "auto", address, "user.createUser", #"{"id":"k2","name":"K","email":"k@x"}"#])
            let key = auto.stderr.split(separator: " ").dropFirst(3).first.map(String.init) ?? ""
            #expect(auto.status == 0 && auto.stderr.hasPrefix("rpcd call: key ") && !key.isEmpty, "\(auto.stderr)")
            let retry = try runProcess(try Binaries.rpcd(), ["call", "--key", key, address, "user.createUser", #"{"id":"k2","name":"K","email":"k@x"}"#])
            #expect(retry.status == 0 && retry.stdout.contains("createUserResult"), "\(retry.stdout) \(retry.stderr)")
            let bad = try runProcess(try Binaries.rpcd(), ["call", "--key", "", address, "system.ping"])
            #expect(bad.status == 2 && bad.stderr.contains("--key"), "\(bad.stderr)")
        }
    }

    @Test("journal check says what repair will do for the damage, and --force when only that cuts it; dump --ndjson keeps keys")
    func journalToolAdvice() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let daemon = try DaemonProcess(dataDir: dir)
        try JournalSupport.createUsers(port: daemon.port, range: 0..<3)
        let keyed = try LineClient(port: daemon.port).request(#"{"id":"k","method":"user.createUser","param":{"id":"kk","name":"K","email":"k@x"},"key":"dump-key"}"#)
        #expect(keyed.contains("createUserResult"))
        daemon.stop()
        let ndjson = try runProcess(try Binaries.rpcd(), ["journal", "dump", "--ndjson", "--data-dir", dir.path])
        #expect(ndjson.stdout.contains(#""key":"dump-key""#), "\(ndjson.stdout)")

        let journal = JournalSupport.journal(dir)
        let lines = try JournalSupport.lines(journal).filter { !$0.isEmpty }
        var damaged = lines
        damaged[1] = damaged[1].replacingOccurrences(of: "User 1", with: "User 9")
        try (damaged.joined(separator: "\n") + "\n").write(to: journal, atomically: false, encoding: .utf8)
        let middle = try runProcess(try Binaries.rpcd(), ["journal", "check", "--data-dir", dir.path])
        #expect(middle.status == 1 && !middle.stdout.contains("journal check"), "it does not send the user to the command they ran: \(middle.stdout)")
        #expect(middle.stdout.contains("rpcd repair --force --data-dir \(dir.path)") && middle.stdout.contains("2 intact record(s) follow"), "\(middle.stdout)")

        try (lines.dropLast().joined(separator: "\n") + "\n" + damaged[1] + "\n").write(to: journal, atomically: false, encoding: .utf8)
        let last = try runProcess(try Binaries.rpcd(), ["journal", "check", "--data-dir", dir.path])
        #expect(last.status == 1 && last.stdout.contains("`rpcd repair --data-dir \(dir.path)` cuts") && !last.stdout.contains("--force"), "\(last.stdout)")
    }

    @Test("a keyed retry whose param has its fields in another order, other whitespace or escapes is the same mutation, across a restart")
    func keyedRetryComparesParamsAsJSON() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        let forms = [
            #"{"id":"o1","name":"N","email":"e@x"}"#,
            #"{"email":"e@x","name":"N","id":"o1"}"#,
            #"{ "name" : "\u004e", "id":"o1",  "email":"e@x" }"#,
        ]
        func create(_ c: LineClient, _ param: String, id: String) throws -> String {
            try c.request(#"{"id":"\#(id)","method":"user.createUser","param":\#(param),"key":"order-key"}"#)
        }
        var first = ""
        for round in 0..<2 {
            let daemon = try DaemonProcess(dataDir: dir)
            defer { daemon.stop() }
            let c = try LineClient(port: daemon.port)
            for (n, param) in (round == 0 ? forms : forms.reversed()).enumerated() {
                let reply = try create(c, param, id: "r")
                if first.isEmpty { first = reply }
                #expect(reply == first, "round \(round), form \(n): \(reply)")
            }
            let other = try create(c, #"{"id":"o1","name":"M","email":"e@x"}"#, id: "r")
            #expect(other.contains("keyReused"), "\(other)")
            // Outside its fields' declared order a param still builds (nested fields by their bytes).
            let building = #"{"residents":["u2","u1"],"address":"A","name":"B","id":"b1"}"#
            let b1 = try c.request(#"{"id":"b","method":"building.addBuilding","param":\#(building),"key":"bkey"}"#)
            let b2 = try c.request(#"{"id":"b","method":"building.addBuilding","param":{"id":"b1","name":"B","address":"A","residents":["u2","u1"]},"key":"bkey"}"#)
            #expect(b1 == b2 && !b1.contains("keyReused"), "\(b1) \(b2)")
        }
        #expect(first.contains("createUserResult"), "\(first)")
    }

    @Test("a keyed record journaled before params were canonical, out of declared order, still answers its identical retry")
    func keyedRetryOfAnOlderRecord() throws {
        let dir = JournalSupport.makeDataDir()
        defer { JournalSupport.remove(dir) }
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let param = #"{"email":"e@x","name":"N","id":"o1"}"#
        let record = JournalSupport.sealed(#"{"id":"r1","method":"user.createUser","param":\#(param),"key":"old-key","seq":1"#)
        try (record + "\n").write(to: JournalSupport.journal(dir), atomically: false, encoding: .utf8)
        let daemon = try DaemonProcess(dataDir: dir)
        defer { daemon.stop() }
        let c = try LineClient(port: daemon.port)
        let retry = try c.request(#"{"id":"2","method":"user.createUser","param":\#(param),"key":"old-key"}"#)
        #expect(retry.contains("createUserResult") && retry.contains(#""id":"o1""#), "\(retry)")
        let reordered = try c.request(#"{"id":"3","method":"user.createUser","param":{"id":"o1","name":"N","email":"e@x"},"key":"old-key"}"#)
        #expect(reordered.contains("keyReused"), "an older record's digest is of its own order only: \(reordered)")
    }
}
