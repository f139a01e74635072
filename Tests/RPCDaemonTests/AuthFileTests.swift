import Foundation
import RPCSchema
import Testing
@testable import RPCDaemon

/// The auth file's format, its problems (each with FILE:LINE), and token checks.
struct AuthFileTests {
    static let appToken = "3f1c0a9be2d74c55a1e06f7d28b94c3e5a6b7c8d9e0f1a2b3c4d5e6f70819203"
    static let opsToken = "not-hex-at-all but any UTF-8 works: ☃"

    private func parse(_ text: String) -> Result<AuthFile, AuthFile.Problems> {
        Result { () throws(AuthFile.Problems) in try AuthFile(path: "auth", bytes: Array(text.utf8)) }
    }

    private func problems(_ text: String) -> [String] {
        guard case .failure(let problems) = parse(text) else {
            Issue.record("expected problems in:\n\(text)")
            return []
        }
        return problems.lines
    }

    @Test func principalsCommentsAndBlankLines() throws {
        let file = try parse("""
            # who may call rpcd
            \(AuthFile.line(name: "app", role: .write, token: Self.appToken))

            \t\(AuthFile.line(name: "ops.team_1", role: .admin, token: Self.opsToken))   # the on-call\r
            follower-2 replicate \(SHA256.hex(of: "f"))
            """).get()
        #expect(file.names == ["app", "follower-2", "ops.team_1"])
        #expect(file.principals["app"]?.role == .write && file.principals["app"]?.line == 2)
        #expect(file.principals["ops.team_1"]?.role == .admin && file.principals["ops.team_1"]?.line == 4)
        #expect(file.principals["follower-2"]?.secretHash == SHA256.hash(Array("f".utf8)))
    }

    @Test func anEmptyFileHasNoPrincipals() throws {
        #expect(try parse("").get().names.isEmpty)
        #expect(try parse("# nobody yet\n\n").get().names.isEmpty)
    }

    @Test func theLineHoldsTheTokensSHA256() {
        let line = AuthFile.line(name: "app", role: .read, token: "abc")
        #expect(line == "app read ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func authenticateChecksNameAndToken() throws {
        let file = try parse("""
            \(AuthFile.line(name: "app", role: .write, token: Self.appToken))
            \(AuthFile.line(name: "ops", role: .admin, token: Self.opsToken))
            """).get()
        #expect(file.authenticate(name: "app", token: Self.appToken)?.role == .write)
        #expect(file.authenticate(name: "ops", token: Self.opsToken)?.role == .admin)
        #expect(file.authenticate(name: "ops", token: Self.opsToken)?.name == "ops")
        #expect(file.authenticate(name: "app", token: Self.opsToken) == nil, "another principal's token")
        #expect(file.authenticate(name: "app", token: String(Self.appToken.dropLast())) == nil)
        #expect(file.authenticate(name: "app", token: Self.appToken.uppercased()) == nil)
        #expect(file.authenticate(name: "app", token: "") == nil)
        #expect(file.authenticate(name: "nobody", token: Self.appToken) == nil, "unknown name")
        #expect(file.authenticate(name: "APP", token: Self.appToken) == nil, "names are case-sensitive")
        // The stored hash is not a token: presenting it fails.
        let hash = Hex.encode(Token.hash(Self.appToken))
        #expect(file.authenticate(name: "app", token: hash) == nil)
    }

    @Test func everyProblemNamesItsLine() {
        let good = SHA256.hex(of: "t")
        let lines = problems("""
            app write \(good)
            app read \(good)
            two fields
            bad/name read \(good)
            ok amdin \(good)
            short read abc123
            upper read \(good.uppercased())
            x read \(good) extra
            \(String(repeating: "n", count: 65)) read \(good)
            fine superuser \(good)
            """)
        #expect(lines.count == 9, "\(lines)")
        #expect(lines.contains("auth:2: name \"app\" is already on line 1; keep one line per name"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:3: expected NAME ROLE SECRET-HASH (3 fields), found 2;") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:4: name \"bad/name\" is not 1 to 64 of A-Z a-z 0-9 . _ -") }, "\(lines)")
        #expect(lines.contains("auth:5: role \"amdin\" is not one of read, write, replicate, admin; did you mean \"admin\"?"), "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:6: the secret hash of \"short\" is not 64 lowercase hex digits") && $0.contains("found 6 characters") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:7: the secret hash of \"upper\" has uppercase digits; write it in lowercase") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:8: expected NAME ROLE SECRET-HASH (3 fields), found 4;") }, "\(lines)")
        #expect(lines.contains { $0.hasPrefix("auth:9: name \"nnn") }, "\(lines)")
        #expect(lines.contains("auth:10: role \"superuser\" is not one of read, write, replicate, admin"), "no suggestion when none is near: \(lines)")
        #expect(lines.allSatisfy { !$0.contains("\n") })
        // A token in the role's column is not repeated (problems are logged on SIGHUP).
        let token = "3f1c0a9be2d74c55a1e06f7d28b94c3e5a6b7c8d9e0f1a2b3c4d5e6f70819203"
        #expect(problems("app \(token) \(good)") == ["auth:1: the role (64 characters) is not one of read, write, replicate, admin"])
    }

    @Test func notUTF8IsAProblemOfItsLine() {
        var bytes = Array("# fine\n".utf8)
        bytes += [0x61, 0xff, 0x20, 0x72, 0x65, 0x61, 0x64, 0x0a]
        let result = Result { () throws(AuthFile.Problems) in try AuthFile(path: "/etc/rpcd/auth", bytes: bytes) }
        guard case .failure(let problems) = result else {
            Issue.record("expected a problem")
            return
        }
        #expect(problems.lines.count == 1 && problems.lines[0].hasPrefix("/etc/rpcd/auth:2: not UTF-8 text"), "\(problems)")
    }

    @Test func namesAllowedAndRefused() {
        for name in ["a", "app-1", "A.b_c-D", String(repeating: "x", count: 64)] {
            #expect(AuthFile.nameProblem(name) == nil, "\(name)")
        }
        for name in ["", "a b", "a:b", "é", "a#", String(repeating: "x", count: 65)] {
            #expect(AuthFile.nameProblem(name) != nil, "\(name)")
        }
    }

    @Test func loadNamesAMissingOrUnreadableFile() throws {
        let missing = "/nonexistent/rpcd-auth-\(UUID().uuidString)"
        #expect(throws: AuthFile.Problems.self) { try AuthFile.load(path: missing) { _ in } }
        do {
            _ = try AuthFile.load(path: missing) { _ in }
        } catch {
            #expect(error.lines == ["\(missing): no such auth file; create it with rpcd auth add NAME ROLE --file \(missing), or fix auth_file"])
        }
        let directory = FileManager.default.temporaryDirectory.path
        do {
            _ = try AuthFile.load(path: directory) { _ in }
            Issue.record("a directory loaded as an auth file")
        } catch {
            #expect(error.lines.count == 1 && error.lines[0].hasPrefix("\(directory): cannot read the auth file"), "\(error)")
        }
    }
}
