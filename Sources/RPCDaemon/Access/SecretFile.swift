import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// A file that decides who gets in (the auth file) or holds a token (a follower's credentials).
/// Whoever may change it may grant themselves any role, so, as sshd and PostgreSQL do with their
/// keys, it is refused when group or others may write it or when neither root nor the user rpcd
/// runs as owns it, and a warning is logged when others may read it. Owner and mode come from
/// fstat of the descriptor the bytes are read from, so the file judged is the file read.
/// systemd's copies in `$CREDENTIALS_DIRECTORY` (0400 or 0440, root's or the service user's) pass.
struct SecretFile: Sendable {
    /// What the file is, in messages ("the auth file").
    var what: String
    /// The setting that names it ("auth_file").
    var setting: String

    static let authFile = SecretFile(what: "the auth file", setting: "auth_file")
    static let followCredentials = SecretFile(what: "the follower's credential file", setting: "follow_auth_file")

    /// The bytes of `path`, or nil if it does not exist; `warn` hears of a file others may read.
    func read(_ path: String, warn: (String) -> Void) throws(AuthFile.Problems) -> [UInt8]? {
        let file: (bytes: [UInt8], status: stat)?
        do {
            file = try FileIO.readWithStatus(path)
        } catch {
            throw AuthFile.Problems(lines: ["\(path): cannot read \(what) (\(error)); make it readable by rpcd, or fix \(setting)"])
        }
        guard let file else { return nil }
        if let problem = problem(path, mode: file.status.st_mode, owner: file.status.st_uid, user: geteuid()) {
            throw AuthFile.Problems(lines: [problem])
        }
        if let warning = warning(path, mode: file.status.st_mode) { warn(warning) }
        return file.bytes
    }

    /// Why rpcd running as `user` must not trust a file with `mode` owned by `owner`, or nil.
    func problem(_ path: String, mode: mode_t, owner: uid_t, user: uid_t) -> String? {
        if mode & 0o022 != 0 {
            return "\(path): \(what) is writable by group or others (mode \(Self.octal(mode))), so other local users "
                + "could change it; run chmod go-w \(path)"
        }
        if owner != 0 && owner != user {
            return "\(path): \(what) is owned by uid \(owner), neither root nor the user rpcd runs as (uid \(user)); "
                + "run chown \(user) \(path)"
        }
        return nil
    }

    /// A warning for a file others may read, or nil.
    func warning(_ path: String, mode: mode_t) -> String? {
        guard mode & 0o004 != 0 else { return nil }
        return "\(path): \(what) is readable by others (mode \(Self.octal(mode))); run chmod o-r \(path)"
    }

    /// The permission bits as chmod takes them, e.g. 0644.
    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
