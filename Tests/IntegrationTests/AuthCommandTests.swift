import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `rpcd auth add|check` and `rpcd check-config` on the auth file, with the real binary.
@Suite(.serialized)
struct AuthCommandTests {
    private func temporaryDirectory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-auth-it-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// SHA-256 by coreutils, independently of rpcd's own.
    private func sha256sum(_ text: String) throws -> String {
        let outcome = try runProcess(URL(fileURLWithPath: "/usr/bin/sha256sum"), [], stdin: text)
        return String(outcome.stdout.prefix(64))
    }

    private func mode(_ path: String) -> mode_t {
        var info = stat()
        return stat(path, &info) == 0 ? info.st_mode & 0o777 : 0
    }

    @Test func addPrintsATokenOnceAndAppendsItsHash() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/auth"
        let rpcd = try Binaries.rpcd()

        let first = try runProcess(rpcd, ["auth", "add", "app", "write", "--file", path])
        #expect(first.status == 0, "\(first.stderr)")
        let token = first.stdout.trimmingCharacters(in: .newlines)
        #expect(first.stdout == token + "\n", "stdout holds the token and nothing else")
        #expect(token.count == 64 && token.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "\(token)")
        #expect(first.stderr.contains("added \"app\" (role write) to \(path)") && !first.stderr.contains(token))
        #expect(mode(path) == 0o600, "created with mode 0600, found \(String(mode(path), radix: 8))")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text == "app write \(try sha256sum(token))\n", "the line holds SHA-256(token): \(text)")
        #expect(!text.contains(token))

        // A second principal: another token, appended; the first line stays.
        let second = try runProcess(rpcd, ["auth", "add", "--file=\(path)", "follower-1", "replicate"])
        let other = second.stdout.trimmingCharacters(in: .newlines)
        #expect(second.status == 0 && other.count == 64 && other != token)
        #expect(try String(contentsOfFile: path, encoding: .utf8)
            == "app write \(try sha256sum(token))\nfollower-1 replicate \(try sha256sum(other))\n")

        // The same name again: refused with one line, exit 1, the file unchanged.
        let before = try String(contentsOfFile: path, encoding: .utf8)
        let duplicate = try runProcess(rpcd, ["auth", "add", "app", "read", "--file", path])
        #expect(duplicate.status == 1 && duplicate.stdout.isEmpty, "\(duplicate)")
        #expect(duplicate.stderr == "rpcd: \(path):1: \"app\" is already a principal; pick another name, or delete that line to give it a new token\n")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == before)

        // A file without a final newline gets one before the new line.
        try (before + "# no newline").write(toFile: path, atomically: true, encoding: .utf8)
        let third = try runProcess(rpcd, ["auth", "add", "ops", "admin", "--file", path])
        #expect(third.status == 0)
        #expect(try String(contentsOfFile: path, encoding: .utf8).hasSuffix("# no newline\nops admin \(try sha256sum(third.stdout.trimmingCharacters(in: .newlines)))\n"))

        let check = try runProcess(rpcd, ["auth", "check", path])
        #expect(check.status == 0 && check.stdout == "# \(path): OK; 3 principals (NAME ROLE):\napp write\nfollower-1 replicate\nops admin\n", "\(check)")
    }

    /// Each argument list run by `rpcd` at once, each from a thread of its own.
    private func runAtOnce(_ argumentLists: [[String]]) throws -> [ProcessOutcome] {
        let rpcd = try Binaries.rpcd()
        let outcomes = Locked([ProcessOutcome?](repeating: nil, count: argumentLists.count))
        #expect(runOnThreads(argumentLists.count) { index in
            let outcome = try? runProcess(rpcd, argumentLists[index])
            outcomes.withLock { $0[index] = outcome }
        })
        return try outcomes.current.map { outcome in
            guard let outcome else { throw HarnessError("rpcd did not run") }
            return outcome
        }
    }

    @Test func concurrentAddsOfOneNameIssueOneToken() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rpcd = try Binaries.rpcd()
        for round in 0..<4 {
            let path = directory + "/auth-\(round)"
            let outcomes = try runAtOnce(Array(repeating: ["auth", "add", "same", "admin", "--file", path], count: 6))
            let added = outcomes.filter { $0.status == 0 }
            #expect(added.count == 1, "round \(round): \(outcomes)")
            for refused in outcomes where refused.status != 0 {
                #expect(refused.status == 1 && refused.stdout.isEmpty, "round \(round): \(refused)")
                #expect(refused.stderr.contains("\"same\" is already a principal"), "round \(round): \(refused.stderr)")
            }
            let token = added.first?.stdout.trimmingCharacters(in: .newlines) ?? ""
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "same admin \(try sha256sum(token))\n", "round \(round)")
            let check = try runProcess(rpcd, ["auth", "check", path])
            #expect(check.status == 0, "round \(round): \(check)")
        }
    }

    @Test func concurrentAddsOfDifferentNamesAllLand() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/auth"
        let names = (1...6).map { "app-\($0)" }
        let outcomes = try runAtOnce(names.map { ["auth", "add", $0, "write", "--file", path] })
        #expect(outcomes.allSatisfy { $0.status == 0 }, "\(outcomes)")
        let check = try runProcess(try Binaries.rpcd(), ["auth", "check", path])
        #expect(check.status == 0 && check.stdout.hasPrefix("# \(path): OK; 6 principals"), "\(check)")
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        for (name, outcome) in zip(names, outcomes) {
            let line = "\(name) write \(try sha256sum(outcome.stdout.trimmingCharacters(in: .newlines)))"
            #expect(lines.filter { $0 == line }.count == 1, "\(name): \(lines)")
        }
        #expect(lines.count == 6)
    }

    @Test func addReplacesTheFileKeepingItsMode() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/auth"
        let rpcd = try Binaries.rpcd()
        #expect(try runProcess(rpcd, ["auth", "add", "app", "write", "--file", path]).status == 0)
        #expect(chmod(path, 0o640) == 0)
        var before = stat()
        #expect(stat(path, &before) == 0)
        #expect(try runProcess(rpcd, ["auth", "add", "ops", "admin", "--file", path]).status == 0)
        var after = stat()
        #expect(stat(path, &after) == 0)
        #expect(after.st_ino != before.st_ino, "written beside it and renamed over it, not changed in place")
        #expect(mode(path) == 0o640 && after.st_uid == before.st_uid && after.st_gid == before.st_gid)
        let left = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(left == ["auth", "auth.lock"], "no temporary file left: \(left)")
    }

    @Test func addRefusesUsageErrorsAndBrokenFiles() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/auth"
        let rpcd = try Binaries.rpcd()
        for arguments in [
            ["auth"], ["auth", "remove", "x"], ["auth", "add", "app"], ["auth", "add", "app", "write", "extra", "--file", path],
            ["auth", "add", "app", "amdin", "--file", path], ["auth", "add", "bad name", "read", "--file", path],
            ["auth", "add", "app", "read", "--file"], ["auth", "add", "app", "read", "--bogus"], ["auth", "check"],
        ] {
            let outcome = try runProcess(rpcd, arguments)
            #expect(outcome.status == 2 && outcome.stdout.isEmpty, "\(arguments): \(outcome)")
            #expect(outcome.stderr.hasPrefix("rpcd: ") && outcome.stderr.filter { $0 == "\n" }.count == 1, "\(arguments): \(outcome.stderr)")
        }
        let typo = try runProcess(rpcd, ["auth", "add", "app", "amdin", "--file", path])
        #expect(typo.stderr.contains("did you mean \"admin\"?"))
        #expect(!FileManager.default.fileExists(atPath: path), "no usage error creates the file")

        try "app write 1234\n".write(toFile: path, atomically: true, encoding: .utf8)
        let broken = try runProcess(rpcd, ["auth", "add", "ops", "admin", "--file", path])
        #expect(broken.status == 1 && broken.stdout.isEmpty, "no token for a principal that was not added")
        #expect(broken.stderr.hasPrefix("rpcd: \(path):1: the secret hash of \"app\""), "\(broken.stderr)")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "app write 1234\n")
        let check = try runProcess(rpcd, ["auth", "check", path])
        #expect(check.status == 2 && check.stderr.hasPrefix("\(path):1: the secret hash of \"app\""), "\(check)")

        let missingDirectory = try runProcess(rpcd, ["auth", "add", "ops", "admin", "--file", directory + "/nope/auth"])
        #expect(missingDirectory.status == 1 && missingDirectory.stderr.contains("create its directory first"), "\(missingDirectory)")
    }

    /// A config in `directory` naming an auth file that `rpcd auth add` made with one principal,
    /// app (write), and its token.
    private func authConfig(in directory: String) throws -> (auth: String, conf: String, token: String) {
        let auth = directory + "/auth"
        let conf = directory + "/rpcd.conf"
        try "auth_file = \(auth)\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let token = try runProcess(try Binaries.rpcd(), ["auth", "add", "app", "write", "--file", auth]).stdout.trimmingCharacters(in: .newlines)
        return (auth, conf, token)
    }

    @Test func checkConfigNamesABadAuthFileLine() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (auth, conf, token) = try authConfig(in: directory)
        let rpcd = try Binaries.rpcd()
        let good = try runProcess(rpcd, ["check-config", conf])
        #expect(good.status == 0 && good.stdout.contains("\nauth_file = \(auth)\n"), "\(good)")
        #expect(good.stdout.contains("# auth_file \(auth): OK; 1 principal(s): app"), "\(good.stdout)")
        let hash = try sha256sum(token)
        #expect(!good.stdout.contains(token) && !good.stdout.contains(hash))

        let file = try String(contentsOfFile: auth, encoding: .utf8)
        try (file + "\n# ops\nops admn \(try sha256sum("x"))\napp read \(try sha256sum("y"))\n").write(toFile: auth, atomically: true, encoding: .utf8)
        let bad = try runProcess(rpcd, ["check-config", conf])
        #expect(bad.status == 2, "a bad auth file is a bad config: \(bad)")
        let lines = bad.stderr.split(separator: "\n").map(String.init)
        #expect(lines == [
            "\(auth):4: role \"admn\" is not one of read, write, replicate, admin; did you mean \"admin\"?",
            "\(auth):5: name \"app\" is already on line 1; keep one line per name",
        ], "\(bad.stderr)")

        try "auth_file = \(directory)/missing\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let missing = try runProcess(rpcd, ["check-config", conf])
        #expect(missing.status == 2 && missing.stderr.hasPrefix("\(directory)/missing: no such auth file"), "\(missing)")
    }

    /// A config in `directory` naming a follower's credential file, and that file.
    private func followerConfig(in directory: String) throws -> (follow: String, conf: String) {
        let follow = directory + "/follow"
        let conf = directory + "/rpcd.conf"
        try "follow_auth_file = \(follow)\n".write(toFile: conf, atomically: true, encoding: .utf8)
        try "follower-1:s3cr3t-t0ken\n".write(toFile: follow, atomically: true, encoding: .utf8)
        return (follow, conf)
    }

    @Test func checkConfigReadsTheFollowerCredentialsWithoutShowingTheToken() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (follow, conf) = try followerConfig(in: directory)
        let good = try runProcess(try Binaries.rpcd(), ["check-config", conf])
        #expect(good.status == 0 && good.stdout.contains("# follow_auth_file \(follow): OK; authenticates as follower-1"), "\(good)")
        #expect(!good.stdout.contains("s3cr3t") && !good.stderr.contains("s3cr3t"))
        try "s3cr3t-t0ken\n".write(toFile: follow, atomically: true, encoding: .utf8)
        let bad = try runProcess(try Binaries.rpcd(), ["check-config", conf])
        #expect(bad.status == 2 && bad.stderr.hasPrefix("\(follow):1: expected NAME:TOKEN"), "\(bad)")
        #expect(!bad.stderr.contains("s3cr3t"))
    }

    // MARK: secret files other local users could change are refused; ones they could read are warned of

    private func serve(_ directory: String, _ arguments: [String]) throws -> ProcessOutcome {
        try runProcess(try Binaries.rpcd(), ["serve", "--listen", "127.0.0.1:0", "--data-dir", directory + "/data"] + arguments)
    }

    @Test func anAuthFileOthersMayWriteIsRefusedOneOthersMayReadIsWarnedOf() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (auth, conf, token) = try authConfig(in: directory)
        let rpcd = try Binaries.rpcd()

        #expect(chmod(auth, 0o666) == 0)
        let refusal = "\(auth): the auth file is writable by group or others (mode 0666), so other local users could change it; run chmod go-w \(auth)"
        let start = try serve(directory, ["--auth-file", auth])
        #expect(start.status == 2 && start.stderr == "rpcd: \(refusal)\n", "\(start)")
        let check = try runProcess(rpcd, ["check-config", conf])
        #expect(check.status == 2 && check.stderr == refusal + "\n", "\(check)")
        #expect(chmod(auth, 0o620) == 0)
        #expect(try serve(directory, ["--auth-file", auth]).stderr.contains("writable by group or others (mode 0620)"))

        #expect(chmod(auth, 0o644) == 0)
        let warning = "\(auth): the auth file is readable by others (mode 0644); run chmod o-r \(auth)"
        let readable = try DaemonProcess(extraArguments: ["--auth-file", auth])
        #expect(readable.stderrText.contains("warning \(warning)"), "\(readable.stderrTail())")
        readable.stop()
        let noted = try runProcess(rpcd, ["check-config", conf])
        #expect(noted.status == 0 && noted.stdout.contains("# warning: \(warning)\n"), "\(noted)")

        #expect(chmod(auth, 0o600) == 0)
        let quiet = try DaemonProcess(extraArguments: ["--auth-file", auth])
        defer { quiet.stop() }
        #expect(!quiet.stderrText.contains(auth + ":") && !quiet.stderrText.contains(" warning "), "\(quiet.stderrTail())")
        #expect(try LineClient(port: quiet.port).request(
            #"{"id":"a","method":"system.auth","param":{"name":"app","token":"\#(token)"}}"#).contains("system.authResult"))

        // SIGHUP: a file others may write is not taken; the previous one stays in effect.
        #expect(try runProcess(rpcd, ["auth", "add", "late", "read", "--file", auth]).status == 0)
        #expect(chmod(auth, 0o666) == 0)
        quiet.signal(SIGHUP)
        #expect(quiet.stderrEventually(contains: "keeping the previous one (1 principal): \(refusal)"), "\(quiet.stderrTail())")
        #expect(chmod(auth, 0o604) == 0)
        quiet.signal(SIGHUP)
        #expect(quiet.stderrEventually(contains: "SIGHUP: \(auth): the auth file is readable by others (mode 0604)"), "\(quiet.stderrTail())")
        #expect(quiet.stderrEventually(contains: "reloaded: 2 principals; added late"), "\(quiet.stderrTail())")
    }

    @Test func aFollowerCredentialFileOthersMayWriteIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (follow, conf) = try followerConfig(in: directory)
        #expect(chmod(follow, 0o666) == 0)
        let refusal = "\(follow): the follower's credential file is writable by group or others (mode 0666), so other local users could change it; "
            + "run chmod go-w \(follow)"
        let start = try serve(directory, ["--follow", "127.0.0.1:1", "--follow-auth-file", follow])
        #expect(start.status == 2 && start.stderr == "rpcd: \(refusal)\n", "\(start)")
        let check = try runProcess(try Binaries.rpcd(), ["check-config", conf])
        #expect(check.status == 2 && check.stderr == refusal + "\n", "\(check)")
        #expect(chmod(follow, 0o600) == 0)
        let good = try runProcess(try Binaries.rpcd(), ["check-config", conf])
        #expect(good.status == 0 && !good.stdout.contains("# warning"), "\(good)")
    }
}

extension AuthCommandTests {
    // MARK: --follow-file

    @Test func addFollowFileWritesTheFollowersCredentialFile() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (auth, conf, _) = try authConfig(in: directory)
        let follow = directory + "/follow"
        let rpcd = try Binaries.rpcd()
        let added = try runProcess(rpcd, ["auth", "add", "replica-1", "replicate", "--file", auth, "--follow-file", follow])
        #expect(added.status == 0, "\(added)")
        let token = added.stdout.trimmingCharacters(in: .newlines)
        #expect(try String(contentsOfFile: follow, encoding: .utf8) == "replica-1:\(token)\n")
        #expect(mode(follow) == 0o600, "found \(String(mode(follow), radix: 8))")
        #expect(try String(contentsOfFile: auth, encoding: .utf8).hasSuffix("replica-1 replicate \(try sha256sum(token))\n"))
        try "follow_auth_file = \(follow)\n".write(toFile: conf, atomically: true, encoding: .utf8)
        let check = try runProcess(rpcd, ["check-config", conf])
        #expect(check.status == 0 && check.stdout.contains("# follow_auth_file \(follow): OK; authenticates as replica-1\n"), "\(check)")
        #expect(!check.stdout.contains("# warning"), "\(check)")

        // An existing PATH is refused, and nothing is added.
        let before = try String(contentsOfFile: auth, encoding: .utf8)
        let again = try runProcess(rpcd, ["auth", "add", "replica-2", "replicate", "--file", auth, "--follow-file", follow])
        #expect(again.status == 1 && again.stdout.isEmpty, "\(again)")
        #expect(again.stderr == "rpcd: \(follow) already exists; remove it or pick another --follow-file PATH, nothing was added\n")
        let nowhere = try runProcess(rpcd, ["auth", "add", "replica-2", "replicate", "--file", auth, "--follow-file", directory + "/nope/follow"])
        #expect(nowhere.status == 1 && nowhere.stdout.isEmpty && nowhere.stderr.filter { $0 == "\n" }.count == 1, "\(nowhere)")
        #expect(try String(contentsOfFile: auth, encoding: .utf8) == before)
        #expect(try String(contentsOfFile: follow, encoding: .utf8) == "replica-1:\(token)\n")

        // Another role: a usage error.
        let write = try runProcess(rpcd, ["auth", "add", "app-2", "write", "--file", auth, "--follow-file=\(directory)/other"])
        #expect(write.status == 2 && write.stdout.isEmpty && write.stderr.filter { $0 == "\n" }.count == 1, "\(write)")
        #expect(write.stderr.hasPrefix("rpcd: --follow-file writes a follower's credentials, which need role replicate, not write;"), "\(write)")
        #expect(try String(contentsOfFile: auth, encoding: .utf8) == before && !FileManager.default.fileExists(atPath: directory + "/other"))
        let left = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        #expect(left == ["auth", "auth.lock", "follow", "rpcd.conf"], "no temporary file left: \(left)")
    }

}
