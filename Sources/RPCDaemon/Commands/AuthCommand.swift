import Foundation
import RPCSchema
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// `rpcd auth add NAME ROLE [--file PATH] [--follow-file PATH]` and `rpcd auth check FILE`: the
/// operator's side of the auth file (`AuthFile`).
///
/// - `add` prints a fresh token once on stdout (nothing else goes there, so
///   `rpcd auth add app write > app.token` keeps it) and appends `NAME ROLE SHA-256(token)` to
///   the file, creating it with mode 0600. The file: `--file`, else `auth_file` of the config
///   `serve` would read, else `/etc/rpcd/auth`. A name already in the file is refused (exit 1);
///   so is a file with problems, which is left as it was. `--follow-file PATH` (role replicate
///   only) also writes `NAME:TOKEN` to a new file PATH, mode 0600: a follower's `follow_auth_file`.
/// - `check` prints the principals (names and roles, never hashes) or `FILE:LINE` problems (exit 2,
///   like a bad config file).
///
/// Usage errors exit 2 with one line.
enum AuthCommand {
    static let usage = "usage: rpcd auth add NAME ROLE [--file PATH] [--follow-file PATH] | rpcd auth check FILE"
    static let defaultPath = "/etc/rpcd/auth"

    static func run(_ arguments: [String]) -> Int32 {
        guard let action = arguments.first else { return usageError("auth needs add or check") }
        let rest = Array(arguments.dropFirst())
        if action == "--help" || action == "-h" || rest.contains("--help") || rest.contains("-h") {
            print(usage)
            return 0
        }
        switch action {
        case "add": return add(rest)
        case "check": return check(rest)
        default: return usageError("unknown auth command '\(action)'")
        }
    }

    // MARK: add

    static func add(_ arguments: [String]) -> Int32 {
        var positional: [String] = []
        var paths: [String: String] = [:]  // by option
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            if let option = ["--file", "--follow-file"].first(where: { argument == $0 || argument.hasPrefix($0 + "=") }) {
                let value = argument == option ? rest.popFirst() : String(argument.dropFirst(option.count + 1))
                guard let value, !value.isEmpty else { return usageError("\(option) needs a PATH") }
                paths[option] = value
            } else if argument.hasPrefix("-") && argument != "-" {
                return usageError("unknown option '\(argument)' for auth add")
            } else {
                positional.append(argument)
            }
        }
        guard positional.count == 2 else { return usageError("auth add needs NAME and ROLE, e.g. rpcd auth add app write") }
        let name = positional[0]
        if let problem = AuthFile.nameProblem(name) { return usageError(problem) }
        let role: RPCRole
        switch AuthFile.role(positional[1]) {
        case .success(let value): role = value
        case .failure(let message): return usageError("\(message)")
        }
        let followFile = paths["--follow-file"]
        if followFile != nil && role != .replicate {
            return usageError("--follow-file writes a follower's credentials, which need role replicate, not \(role.rawValue)")
        }
        let path: String
        if let file = paths["--file"] {
            path = file
        } else {
            switch configuredPath() {
            case .success(let configured): path = configured
            case .failure(let problems):
                for line in problems.lines { LogSink.stderr.write("rpcd: \(line)\n") }
                LogSink.stderr.write("rpcd: auth add reads auth_file from that config; fix it, or give --file PATH\n")
                return 2
            }
        }
        do {
            let token = try append(name: name, role: role, to: path, followFile: followFile)
            print(token)
            let written = followFile.map { " and \(name):TOKEN to \($0) (the follower's --follow-auth-file)" } ?? ""
            LogSink.stderr.write(
                "rpcd: added \"\(name)\" (role \(role.rawValue)) to \(path)\(written); the token above is shown only now. Reload rpcd to admit it "
                    + "(kill -HUP its pid; under systemd, which copies the file at start: systemctl restart rpcd)\n")
            return 0
        } catch {
            LogSink.stderr.write("rpcd: \(error.message)\n")
            return 1
        }
    }

    /// `auth_file` of the config `serve` would read (`$RPCD_CONFIG`, else /etc/rpcd/rpcd.conf if
    /// present), else `/etc/rpcd/auth`.
    static func configuredPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> Result<String, Config.Problems> {
        guard let (config, _) = Config.path(for: ServeOptions(), environment: environment) else { return .success(defaultPath) }
        return Result { () throws(Config.Problems) in try Config.load(path: config).authFile ?? defaultPath }
    }

    /// Why `add` changed nothing: one line.
    struct Failure: Error {
        var message: String

        static func followFileExists(_ path: String) -> Failure {
            Failure(message: "\(path) already exists; remove it or pick another --follow-file PATH, nothing was added")
        }
    }

    /// Adds a principal with a fresh token to `path` (created with mode 0600 if missing) and
    /// returns the token. Adds queue on a lock file beside it (`PATH.lock`, left in place: removing
    /// it would let two adds lock two files) held from the read to the rename, so each sees the
    /// lines of those before it; the file is replaced, never changed in place, so rpcd reloading it
    /// meanwhile reads the old file or the new one. The new file keeps the old one's owner and mode.
    /// With `followFile`, `NAME:TOKEN` goes to that new file (mode 0600) first: both are written, or neither.
    static func append(name: String, role: RPCRole, to path: String, followFile: String?) throws(Failure) -> String {
        if let followFile, FileIO.exists(followFile) { throw Failure.followFileExists(followFile) }
        let lockPath = path + ".lock"
        let lock: Int32
        do {
            lock = try FileIO.open(lockPath, O_RDONLY | O_CREAT, mode: 0o600)
        } catch {
            let hint = error.code == ENOENT
                ? "create its directory first (e.g. install -d -m 0755 \(FileIO.directory(of: path)))"
                : "run as the auth file's owner (root for \(defaultPath)), or give --file PATH"
            throw Failure(message: "cannot open the auth file's lock \(lockPath) (\(error)); \(hint)")
        }
        defer { FileIO.close(lock) }
        let existing: (bytes: [UInt8], status: stat)?
        do {
            try FileIO.lock(lock, path: lockPath)
            existing = try FileIO.readWithStatus(path)
        } catch {
            throw Failure(message: "cannot read the auth file \(path) (\(error)); run as its owner (root for \(defaultPath)), or give --file PATH")
        }
        let bytes = existing?.bytes ?? []
        let file: AuthFile
        do {
            file = try AuthFile(path: path, bytes: bytes)
        } catch {
            throw Failure(message: "\(error.lines.joined(separator: "; ")); fix the file first (rpcd auth check \(path)), nothing was added")
        }
        if let taken = file.principals[name] {
            throw Failure(message: "\(path):\(taken.line): \"\(name)\" is already a principal; pick another name, or delete that line to give it a new token")
        }
        let token: String
        do {
            token = try Token.generate()
        } catch {
            throw Failure(message: "cannot get random bytes (\(error)); nothing was added")
        }
        let separator = bytes.isEmpty || bytes.last == UInt8(ascii: "\n") ? "" : "\n"
        let added = bytes + Array((separator + AuthFile.line(name: name, role: role, token: token) + "\n").utf8)
        if let followFile {
            do {
                try FileIO.create(followFile, Array("\(name):\(token)\n".utf8), mode: 0o600)
            } catch where error.code == EEXIST {
                throw Failure.followFileExists(followFile)
            } catch {
                throw Failure(message: "cannot write \(followFile) (\(error)); fix --follow-file PATH, nothing was added")
            }
        }
        do {
            try FileIO.replace(
                path, with: added, mode: existing.map { $0.status.st_mode & 0o7777 } ?? 0o600,
                owner: existing.map { ($0.status.st_uid, $0.status.st_gid) })
        } catch {
            if let followFile { try? FileIO.unlink(followFile) }
            throw Failure(message: "cannot write the auth file \(path) (\(error)); nothing was added")
        }
        return token
    }

    // MARK: check

    static func check(_ arguments: [String]) -> Int32 {
        guard arguments.count == 1, let path = arguments.first, !path.hasPrefix("-") else {
            return usageError("auth check needs one FILE, e.g. rpcd auth check /etc/rpcd/auth")
        }
        // Warnings come after the principals, like check-config's; a file with problems gets only those.
        var warnings: [String] = []
        do {
            let file = try AuthFile.load(path: path) { warnings.append($0) }
            print("# \(path): OK; \(file.principals.count) principal\(file.principals.count == 1 ? "" : "s") (NAME ROLE):")
            for name in file.names { print("\(name) \(file.principals[name]!.role.rawValue)") }
            for warning in warnings { LogSink.stderr.write("rpcd: warning: \(warning)\n") }
            return 0
        } catch {
            for line in error.lines { LogSink.stderr.write("\(line)\n") }
            return 2
        }
    }

    private static func usageError(_ message: String) -> Int32 {
        LogSink.stderr.write("rpcd: \(message); \(usage)\n")
        return 2
    }
}
