import Foundation
import RPCSchema

/// The auth file in effect, swapped by SIGHUP: `system.auth` checks tokens against `current`,
/// `reload()` re-reads the file. A bad file keeps the previous one (and says why); a good one
/// replaces it and reports which principals were added, removed, or changed (role or secret).
///
/// Connections already authenticated keep their role until they close, except those of
/// principals that were removed or changed: they authenticated under terms that no longer hold
/// (a changed secret is usually a leaked one), so `step(revoke:)` hands their names to the server
/// to close. A client reconnects and authenticates again under the new terms.
final class AuthReloader: @unchecked Sendable {
    // @unchecked: `file` is guarded by `lock`; `path` and `warn` are immutable.
    private let lock = NSLock()
    private var file: AuthFile
    let path: String
    /// Hears of a reloaded file that others may read (the log's warnings).
    private let warn: @Sendable (String) -> Void

    /// What one reload did.
    struct Outcome: Sendable, Equatable, CustomStringConvertible {
        /// One line for the log (names only: never a token or a hash).
        var message: String
        /// false: the file had problems (or could not be read) and the previous one is kept.
        var replaced: Bool
        var added: [String] = []
        var removed: [String] = []
        /// Still there, with another role or secret.
        var changed: [String] = []
        var description: String { message }
        /// Principals whose connections should close: removed or changed.
        var revoked: [String] { (removed + changed).sorted() }
    }

    /// A reload that kept the previous file: the hook logs it at warning.
    struct Kept: Error, CustomStringConvertible {
        var description: String
    }

    init(_ initial: AuthFile, warn: @escaping @Sendable (String) -> Void) {
        file = initial
        path = initial.path
        self.warn = warn
    }

    var current: AuthFile { lock.withLock { file } }

    /// The principal `name` if `token` is its secret, in the file in effect now.
    func authenticate(name: String, token: String) -> (name: String, role: RPCRole)? {
        current.authenticate(name: name, token: token)
    }

    /// The principal a verified client certificate with `names` is, in the file in effect now.
    func principal(forCertificateNames names: [String]) -> (name: String, role: RPCRole)? {
        current.principal(forCertificateNames: names)
    }

    /// Re-reads `path`; on success the new file is in effect when this returns. A file others may
    /// write is refused like a bad one; one others may read is taken, and `warn` hears of it.
    func reload() -> Outcome {
        let loaded: AuthFile
        do {
            loaded = try AuthFile.load(path: path, warn: warn)
        } catch {
            let count = current.principals.count
            return Outcome(
                message: "auth file \(path) not reloaded, keeping the previous one (\(count) principal\(count == 1 ? "" : "s")): "
                    + error.lines.joined(separator: "; "),
                replaced: false)
        }
        let previous: AuthFile = lock.withLock {
            defer { file = loaded }
            return file
        }
        var outcome = Outcome(message: "", replaced: true)
        for (name, principal) in loaded.principals {
            guard let before = previous.principals[name] else {
                outcome.added.append(name)
                continue
            }
            if before.role != principal.role || before.secretHash != principal.secretHash { outcome.changed.append(name) }
        }
        outcome.removed = previous.principals.keys.filter { loaded.principals[$0] == nil }
        outcome.added.sort()
        outcome.removed.sort()
        outcome.changed.sort()
        var parts = ["auth file \(path) reloaded: \(loaded.principals.count) principal\(loaded.principals.count == 1 ? "" : "s")"]
        if !outcome.added.isEmpty { parts.append("added \(outcome.added.joined(separator: ", "))") }
        if !outcome.removed.isEmpty { parts.append("removed \(outcome.removed.joined(separator: ", "))") }
        if !outcome.changed.isEmpty { parts.append("changed (role or secret) \(outcome.changed.joined(separator: ", "))") }
        if parts.count == 1 { parts.append("no changes") }
        outcome.message = parts.joined(separator: "; ")
        return outcome
    }

    /// The SIGHUP step: reloads, hands the revoked principals (removed or changed) to `revoke`
    /// (e.g. `Server.close(principals:)`), and returns the log line; throws `Kept` (logged as a
    /// warning by `ReloadHook`) when the previous file stays.
    func step(revoke: @escaping @Sendable ([String]) -> Void) -> ReloadHook.Step {
        ReloadHook.Step(name: "auth file") { [self] in
            let outcome = reload()
            guard outcome.replaced else { throw Kept(description: outcome.message) }
            if !outcome.revoked.isEmpty { revoke(outcome.revoked) }
            return outcome.message
        }
    }
}
