import Foundation
import RPCClient
import RPCEntities
import RPCSchema
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Principals made with the real `rpcd auth add`, one per role, in an auth file of their own.
struct TestPrincipals {
    let file: String
    var tokens: [String: String] = [:]  // name -> token

    init() throws {
        file = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-auth-\(UUID().uuidString)").path
        for role in RPCRole.allCases { try add(role.rawValue, role: role) }
    }

    mutating func add(_ name: String, role: RPCRole) throws {
        let out = try runProcess(try Binaries.rpcd(), ["auth", "add", name, role.rawValue, "--file", file])
        guard out.status == 0 else { throw HarnessError("rpcd auth add \(name): \(out.stderr)") }
        tokens[name] = out.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func remove(_ name: String) throws {
        let text = try String(contentsOfFile: file, encoding: .utf8)
        let kept = text.split(separator: "\n").filter { !$0.hasPrefix(name + " ") }.joined(separator: "\n") + "\n"
        try kept.write(toFile: file, atomically: true, encoding: .utf8)
    }

    func authLine(_ name: String, id: String = "a") -> String {
        #"{"id":"\#(id)","method":"system.auth","param":{"name":"\#(name)","token":"\#(tokens[name] ?? "")"}}"#
    }

    func cleanUp() {
        unlink(file)
        unlink(file + ".lock")
    }
}

@Suite("access control: tokens and roles over TCP", .serialized)
struct AccessControlTests {
    /// A param that decodes for each method, so the answer shows the role check, not a param error.
    static func param(for method: String) -> String {
        switch method {
        case "user.createUser": #"{"id":"r1","name":"R","email":"r@x"}"#
        case "user.updateUser": #"{"userId":"r1","newName":"S"}"#
        case "user.deleteUser": #"{"userId":"nobody"}"#
        case "user.getUser": #"{"userId":"r1"}"#
        case "building.addBuilding": #"{"id":"b1","name":"B","address":"A","residents":[]}"#
        case "building.updateBuilding": #"{"buildingId":"b1","newName":"C"}"#
        case "building.deleteBuilding": #"{"buildingId":"nobody"}"#
        case "building.getBuilding": #"{"buildingId":"b1"}"#
        case "system.auth": #"{"name":"nobody","token":"x"}"#
        default: "{}"
        }
    }

    @Test("every role against every method of the table: allowed, unauthorized before auth, or forbidden")
    func everyRoleEveryMethod() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            // The live table, with each method's declared access (pinned by RoleTableTests).
            let methods = Entities.table.entries.map { ($0.method.description, $0.access) }
            #expect(methods.count >= 14)
            for role in [nil] + RPCRole.allCases {
                let c = try LineClient(port: daemon.port)
                if let role {
                    let reply = try c.request(principals.authLine(role.rawValue))
                    #expect(reply.contains(#""role":"\#(role.rawValue)""#), "\(reply)")
                }
                for (method, access) in methods where method != "system.auth" {
                    let reply = try c.request(#"{"id":"m","method":"\#(method)","param":\#(Self.param(for: method))}"#)
                    let allowed = access == .open || (role?.allows(access) ?? false)
                    // An error reply, not system.stats' list of refusals.
                    let refusal = reply.contains(#""method":"error.error""#)
                        && (reply.contains(#""code":"unauthorized""#) || reply.contains(#""code":"forbidden""#))
                    #expect(allowed != refusal, "\(role?.rawValue ?? "unauthenticated") -> \(method) (\(access)): \(reply.prefix(200))")
                    if !allowed {
                        #expect(reply.contains(role == nil ? #""code":"unauthorized""# : #""code":"forbidden""#), "\(reply)")
                    }
                }
            }
            // Tokens never reach the log.
            for token in principals.tokens.values {
                #expect(!daemon.stderrText.contains(token), "a token is in the daemon's log")
            }
        }
    }

    @Test("a wrong token or an unknown name is refused and logged without the token; three failures close the connection")
    func failures() throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let c = try LineClient(port: daemon.port)
            let wrongToken = try c.request(#"{"id":"1","method":"system.auth","param":{"name":"admin","token":"0000"}}"#)
            expectError(wrongToken, code: "unauthorized", id: "1")
            let unknown = try c.request(#"{"id":"2","method":"system.auth","param":{"name":"mallory","token":"\#(principals.tokens["admin"]!)"}}"#)
            expectError(unknown, code: "unauthorized", id: "2")
            let third = try c.request(#"{"id":"3","method":"system.auth","param":{"name":"admin","token":"1111"}}"#)
            #expect(expectError(third, code: "unauthorized", id: "3")?.errorMessage?.contains("closing") == true, "\(third)")
            #expect(try c.readLine() == nil, "the connection is closed after three failures")
            #expect(daemon.stderrEventually(contains: #"system.auth failed for name "admin""#), "\(daemon.stderrTail())")
            #expect(daemon.stderrEventually(contains: "mallory"))
            #expect(!daemon.stderrText.contains(principals.tokens["admin"]!), "the token tried is never logged")
            // A good token on a new connection still works.
            let d = try LineClient(port: daemon.port)
            #expect(try d.request(principals.authLine("admin")).contains("system.authResult"))
        }
    }

    @Test("SIGHUP re-reads the auth file: a new principal can log in, a removed one is closed; a bad file keeps the old one")
    func reloadOnSIGHUP() throws {
        var principals = try TestPrincipals()
        defer { principals.cleanUp() }
        try withDaemon(extraArguments: ["--auth-file", principals.file]) { daemon in
            let writer = try LineClient(port: daemon.port)
            #expect(try writer.request(principals.authLine("write")).contains("authResult"))
            try principals.add("late", role: .read)
            try principals.remove("write")
            daemon.signal(SIGHUP)
            #expect(daemon.stderrEventually(contains: "SIGHUP"), "\(daemon.stderrTail())")
            #expect(writer.drainUntilClosed(silenceTimeout: 3).end != .timeout, "the removed principal's connection is closed")
            let late = try LineClient(port: daemon.port)
            #expect(try late.request(principals.authLine("late")).contains(#""role":"read""#))
            let gone = try LineClient(port: daemon.port)
            expectError(try gone.request(principals.authLine("write")), code: "unauthorized", id: "a")

            // A broken file: the old principals stay.
            try "late read not-a-hash\n".write(toFile: principals.file, atomically: true, encoding: .utf8)
            daemon.signal(SIGHUP)
            #expect(daemon.stderrEventually(contains: "keeping the previous one"), "\(daemon.stderrTail())")
            let again = try LineClient(port: daemon.port)
            #expect(try again.request(principals.authLine("late")).contains("authResult"))
        }
    }

    @Test("the client library and rpcd call --auth authenticate; a bad auth file fails the start with exit 2")
    func clients() async throws {
        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        let daemon = try DaemonProcess(extraArguments: ["--auth-file", principals.file])
        defer { daemon.stop() }
        let options = RPCClientOptions(credentials: .token(name: "write", secret: principals.tokens["write"]!))
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: options)
        defer { client.close() }
        let user: User = try await client.call(CreateUser(id: "c1", name: "C", email: "c@example.com"))
        #expect(user.id == "c1")

        let tokenFile = principals.file + ".token"
        try principals.tokens["read"]!.write(toFile: tokenFile, atomically: true, encoding: .utf8)
        defer { unlink(tokenFile) }
        let call = try runProcess(try Binaries.rpcd(), ["call", "--auth", "read:\(tokenFile)", "127.0.0.1:\(daemon.port)", "user.getUser", #"{"userId":"c1"}"#])
        #expect(call.status == 0 && call.stdout.contains("getUserResult"), "\(call.stdout) \(call.stderr)")
        let noAuth = try runProcess(try Binaries.rpcd(), ["call", "127.0.0.1:\(daemon.port)", "user.getUser", #"{"userId":"c1"}"#])
        #expect(noAuth.status == 1 && noAuth.stdout.contains("unauthorized"), "\(noAuth.stdout)")

        let bad = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-badauth-\(UUID().uuidString)").path
        try "someone superuser abc\n".write(toFile: bad, atomically: true, encoding: .utf8)
        defer { unlink(bad) }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-a-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let start = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:0", "--data-dir", dir.path, "--auth-file", bad])
        #expect(start.status == 2 && start.stderr.contains("\(bad):1:"), "\(start.stderr)")
    }
}
