import Foundation
import RPCClient
import RPCSchema
import RPCTransport
import Testing
@testable import RPCDaemon

/// auth_file, protected_mode, unix_roles and follow_auth_file: file keys, flags, the systemd
/// credential fallback, and the policy built from them.
struct AccessSettingsTests {
    private func parse(_ text: String) -> Result<ServeOptions, Config.Problems> {
        Result { () throws(Config.Problems) in try Config.parse(ConfigFile(path: "t.conf", text: text)) }
    }

    private func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-access-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func defaults() {
        let options = ServeOptions()
        #expect(options.authFile == nil && options.protectedMode && options.unixRoles.isEmpty && options.followAuthFile == nil)
    }

    @Test func everyKeyIsRead() throws {
        let options = try parse("""
            auth_file = /etc/rpcd/auth
            protected_mode = no
            unix_roles = root:admin ,1000:write
            follow_auth_file = "/etc/rpcd/leader auth"
            """).get()
        #expect(options.authFile == "/etc/rpcd/auth" && !options.protectedMode)
        #expect(options.followAuthFile == "/etc/rpcd/leader auth")
        #expect(options.unixRoles == [UnixRole(uid: 0, role: .admin), UnixRole(uid: 1000, role: .write)])
    }

    @Test func emptyValuesMeanNone() throws {
        let options = try parse("auth_file =\nunix_roles =\nfollow_auth_file =\n").get()
        #expect(options == ServeOptions())
    }

    @Test func badValuesNameTheirLine() {
        guard case .failure(let problems) = parse("""
            protected_mode = maybe
            unix_roles = 1000:amdin
            unix_roles = 5
            auth_fiel = /x
            """)
        else {
            Issue.record("expected problems")
            return
        }
        #expect(problems.lines.count == 4, "\(problems)")
        #expect(problems.lines[0].hasPrefix("t.conf:1: protected_mode \"maybe\" is not yes or no"))
        #expect(problems.lines[1] == "t.conf:2: unix_roles \"1000:amdin\" has \"1000:amdin\": role \"amdin\" is not one of read, write, replicate, admin; did you mean \"admin\"?")
        #expect(problems.lines[2].hasPrefix("t.conf:3: unix_roles is set twice"))
        #expect(problems.lines[3].hasPrefix("t.conf:4: unknown key \"auth_fiel\"; did you mean \"auth_file\"?"))
    }

    @Test func unixRolesResolveNamesAndRefuseUnknownUsersAndRepeats() throws {
        let users: [String: UInt32] = ["alice": 1000, "www-data": 33]
        let lookup: (String) throws(Errno) -> UInt32? = { users[$0] }
        #expect(try UnixRole.parseList("alice:write, 33:read,0:admin", lookup: lookup).get()
            == [UnixRole(uid: 1000, role: .write), UnixRole(uid: 33, role: .read), UnixRole(uid: 0, role: .admin)])
        #expect(try UnixRole.parseList("", lookup: lookup).get() == [])
        #expect(try UnixRole.parseList(" , ", lookup: lookup).get() == [])
        func reason(_ text: String) -> String {
            guard case .failure(let problem) = UnixRole.parseList(text, lookup: lookup) else { return "accepted" }
            return problem.reason
        }
        #expect(reason("bob:read") == "names user \"bob\", who does not exist here; give a uid or an existing user name")
        #expect(reason("alice:write, 1000:read") == "gives uid 1000 two roles (as \"alice\" and \"1000\"); keep one")
        #expect(reason("alice").hasPrefix("has \"alice\", which is not UID_OR_USERNAME:ROLE"))
        #expect(reason(":read").hasPrefix("has \":read\", which is not UID_OR_USERNAME:ROLE"))
        #expect(reason("4294967295:read").hasPrefix("has uid 4294967295, which is out of range"))
        #expect(reason("99999999999:read").hasPrefix("has uid 99999999999, which is out of range"))
        #expect(reason("alice:superuser").hasPrefix("has \"alice:superuser\": role \"superuser\" is not one of"))
    }

    @Test func getpwnamFindsRootAndNotAnInventedUser() throws {
        #expect(try Syscall.userID(named: "root") == 0)
        #expect(try Syscall.userID(named: "rpcd-no-such-user-\(UInt32.random(in: 0...UInt32.max))") == nil)
    }

    @Test func flagsSetTheSameAndWinOverTheFile() throws {
        let flags = try CommandLineParser.parseServe([
            "--auth-file", "/flag/auth", "--protected-mode=no", "--unix-roles", "root:read", "--follow-auth-file", "/flag/follow",
        ])
        #expect(flags.setByFlags.isSuperset(of: ["auth_file", "protected_mode", "unix_roles", "follow_auth_file"]))
        var options = try parse("auth_file = /file/auth\nprotected_mode = yes\nunix_roles = 0:admin\nfollow_auth_file = /file/f\n").get()
        Config.merge(flags, into: &options)
        #expect(options.authFile == "/flag/auth" && !options.protectedMode)
        #expect(options.unixRoles == [UnixRole(uid: 0, role: .read)] && options.followAuthFile == "/flag/follow")
        // A file key no flag set stays.
        var partial = try parse("auth_file = /file/auth\nprotected_mode = no\n").get()
        Config.merge(try CommandLineParser.parseServe(["--unix-roles", "0:write"]), into: &partial)
        #expect(partial.authFile == "/file/auth" && !partial.protectedMode && partial.unixRoles == [UnixRole(uid: 0, role: .write)])
    }

    @Test func badFlagsAreUsageErrors() {
        for (arguments, message) in [
            (["--protected-mode", "on"], "--protected-mode 'on' is not yes or no"),
            (["--unix-roles", "0:boss"], "--unix-roles '0:boss' has \"0:boss\": role \"boss\" is not one of"),
            (["--auth-file="], "--auth-file needs a PATH"),
            (["--follow-auth-file"], "--follow-auth-file needs a value"),
        ] {
            #expect(throws: UsageError.self) { try CommandLineParser.parseServe(arguments) }
            do {
                _ = try CommandLineParser.parseServe(arguments)
            } catch {
                #expect(error.message.hasPrefix(message), "\(arguments): \(error.message)")
            }
        }
    }

    @Test func renderReadsBack() throws {
        var options = ServeOptions()
        options.authFile = "/etc/rpcd/auth"
        options.protectedMode = false
        options.unixRoles = [UnixRole(uid: 0, role: .admin), UnixRole(uid: 1000, role: .replicate)]
        options.followAuthFile = "/etc/rpcd/follow"
        let text = Config.render(options)
        #expect(text.contains("\nunix_roles = 0:admin, 1000:replicate\n"))
        #expect(try Config.parse(ConfigFile(path: "r", text: text)) == options)
        #expect(try Config.parse(ConfigFile(path: "r", text: Config.render(ServeOptions()))) == ServeOptions())
    }

    @Test func theSystemdCredentialIsTheFallback() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["CREDENTIALS_DIRECTORY": directory]
        // No credential file: none.
        #expect(try Config.effective(ServeOptions(), environment: environment).authFile == nil)
        try "".write(toFile: directory + "/auth", atomically: true, encoding: .utf8)
        #expect(try Config.effective(ServeOptions(), environment: environment).authFile == directory + "/auth")
        #expect(try Config.effective(ServeOptions(), environment: ["CREDENTIALS_DIRECTORY": directory + "/"]).authFile == directory + "/auth")
        #expect(try Config.effective(ServeOptions(), environment: [:]).authFile == nil)
        // A flag or the file names another: that one wins.
        let flags = try CommandLineParser.parseServe(["--auth-file", "/flag/auth"])
        #expect(try Config.effective(flags, environment: environment).authFile == "/flag/auth")
        let conf = directory + "/rpcd.conf"
        try "auth_file = /file/auth\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(try Config.effective(ServeOptions(), environment: environment.merging(["RPCD_CONFIG": conf]) { $1 }).authFile == "/file/auth")
        // An empty auth_file in the file is none: the credential is used.
        try "auth_file =\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(try Config.effective(ServeOptions(), environment: environment.merging(["RPCD_CONFIG": conf]) { $1 }).authFile == directory + "/auth")
    }

    /// `rpcd auth add` without --file: auth_file of the config serve would read, else /etc/rpcd/auth.
    @Test func authAddsDefaultFile() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let conf = directory + "/rpcd.conf"
        try "auth_file = /srv/auth\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(try AuthCommand.configuredPath(environment: ["RPCD_CONFIG": conf]).get() == "/srv/auth")
        try "log_level = info\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(try AuthCommand.configuredPath(environment: ["RPCD_CONFIG": conf]).get() == "/etc/rpcd/auth")
        try "log_levle = info\n".write(toFile: conf, atomically: true, encoding: .utf8)
        #expect(throws: Config.Problems.self) { try AuthCommand.configuredPath(environment: ["RPCD_CONFIG": conf]).get() }
    }

    @Test func thePolicyLoadsTheAuthFile() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/auth"
        try (AuthFile.line(name: "app", role: .write, token: "t0k3n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        var options = ServeOptions()
        options.unixRoles = [UnixRole(uid: 1000, role: .read)]
        let none = try AccessPolicy.load(options) { _ in }
        #expect(none.authFile == nil && none.protectedMode && none.unixRoles == [1000: .read])
        #expect(none.connectionAccess.tokensConfigured == false && none.connectionAccess.unixRoles == [1000: .read])
        #expect(none.summary == "no auth file, protected mode on, unix roles 1000:read")
        options.authFile = path
        options.protectedMode = false
        let policy = try AccessPolicy.load(options) { _ in }
        #expect(policy.authFile?.authenticate(name: "app", token: "t0k3n")?.role == .write)
        #expect(policy.connectionAccess.tokensConfigured && !policy.connectionAccess.protectedMode)
        #expect(policy.summary == "auth file \(path) (1 principal), unix roles 1000:read")
        options.authFile = directory + "/missing"
        #expect(throws: AuthFile.Problems.self) { try AccessPolicy.load(options) { _ in } }
    }

    @Test func followCredentialsAreNameColonToken() throws {
        let good = Array("# the leader's principal\n\nfollower-1:0123abcd\r\n".utf8)
        #expect(try FollowCredentials.parse(path: "f", bytes: good) == .token(name: "follower-1", secret: "0123abcd"))
        func problems(_ text: String) -> [String] {
            do {
                _ = try FollowCredentials.parse(path: "f", bytes: Array(text.utf8))
                return []
            } catch {
                return error.lines
            }
        }
        #expect(problems("") == ["f: holds no NAME:TOKEN line; write the leader's principal there"])
        #expect(problems("just-a-token\n").first?.hasPrefix("f:1: expected NAME:TOKEN") == true)
        #expect(problems("a:b\nc:d\n") == ["f:2: a second NAME:TOKEN line (the first is line 1); keep one"])
        #expect(problems("a b:secret\n").first?.hasPrefix("f:1: name \"a b\" is not") == true)
        #expect(problems("a:\n").first?.hasPrefix("f:1: the token after \"a:\" is empty") == true)
        // The token never appears in a problem.
        #expect(problems("x:s3cr3t tail\n").allSatisfy { !$0.contains("s3cr3t") })
    }
}
