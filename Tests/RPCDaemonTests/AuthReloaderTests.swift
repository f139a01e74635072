import Foundation
import RPCSchema
import Testing
@testable import RPCDaemon

/// SIGHUP's auth file step: a good file replaces the old one and names who changed; a bad one is
/// refused and the old one stays in effect.
struct AuthReloaderTests {
    private final class Revoked: @unchecked Sendable {
        // @unchecked: `names` is guarded by `lock`.
        let lock = NSLock()
        var names: [[String]] = []
    }

    private func write(_ lines: [String], to path: String) throws {
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test func reloadReportsAddedRemovedAndChangedAndKeepsTheOldFileOnError() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-auth-\(UUID().uuidString)").path
        defer { unlink(path) }
        try write([
            AuthFile.line(name: "app", role: .write, token: "app-token"),
            AuthFile.line(name: "old", role: .read, token: "old-token"),
            AuthFile.line(name: "ops", role: .admin, token: "ops-token"),
            AuthFile.line(name: "same", role: .read, token: "same-token"),
        ], to: path)
        let reloader = AuthReloader(try AuthFile.load(path: path) { _ in }, warn: { _ in })
        #expect(reloader.authenticate(name: "old", token: "old-token")?.role == .read)

        // Unchanged.
        let same = reloader.reload()
        #expect(same.replaced && same.added.isEmpty && same.removed.isEmpty && same.changed.isEmpty)
        #expect(same.message == "auth file \(path) reloaded: 4 principals; no changes")

        // old removed, new added, ops demoted, app's secret rotated.
        try write([
            AuthFile.line(name: "app", role: .write, token: "app-token-2"),
            AuthFile.line(name: "new", role: .replicate, token: "new-token"),
            AuthFile.line(name: "ops", role: .read, token: "ops-token"),
            AuthFile.line(name: "same", role: .read, token: "same-token"),
        ], to: path)
        let revoked = Revoked()
        let step = reloader.step { names in revoked.lock.withLock { revoked.names.append(names) } }
        let message = try step.run()
        #expect(message == "auth file \(path) reloaded: 4 principals; added new; removed old; changed (role or secret) app, ops")
        #expect(revoked.lock.withLock { revoked.names } == [["app", "old", "ops"]])
        #expect(reloader.authenticate(name: "old", token: "old-token") == nil)
        #expect(reloader.authenticate(name: "new", token: "new-token")?.role == .replicate)
        #expect(reloader.authenticate(name: "app", token: "app-token") == nil)
        #expect(reloader.authenticate(name: "app", token: "app-token-2")?.role == .write)
        #expect(reloader.authenticate(name: "ops", token: "ops-token")?.role == .read)

        // A bad file: refused, the previous one stays, and the problem is named by FILE:LINE.
        try write([AuthFile.line(name: "new", role: .replicate, token: "new-token"), "broken admin 1234"], to: path)
        let bad = reloader.reload()
        #expect(!bad.replaced && bad.removed.isEmpty && bad.added.isEmpty)
        #expect(bad.message.hasPrefix("auth file \(path) not reloaded, keeping the previous one (4 principals): \(path):2: the secret hash of \"broken\""))
        #expect(reloader.authenticate(name: "ops", token: "ops-token")?.role == .read)
        #expect(throws: AuthReloader.Kept.self) { try step.run() }
        #expect(revoked.lock.withLock { revoked.names.count } == 1, "a refused file revokes no one")

        // A vanished file: the same.
        unlink(path)
        let gone = reloader.reload()
        #expect(!gone.replaced && gone.message.contains("no such auth file"))
        #expect(reloader.current.names == ["app", "new", "ops", "same"])
    }

    @Test func noTokenOrHashReachesTheMessages() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-auth-\(UUID().uuidString)").path
        defer { unlink(path) }
        let token = "5ecret-t0ken"
        try write([AuthFile.line(name: "app", role: .write, token: token)], to: path)
        let reloader = AuthReloader(try AuthFile.load(path: path) { _ in }, warn: { _ in })
        try write([AuthFile.line(name: "app", role: .admin, token: token), "bad read \(SHA256.hex(of: token).dropLast())"], to: path)
        let hash = SHA256.hex(of: token)
        let bad = reloader.reload()
        #expect(!bad.message.contains(token) && !bad.message.contains(hash.prefix(16)), "\(bad.message)")
        try write([AuthFile.line(name: "app", role: .admin, token: token)], to: path)
        let good = reloader.reload()
        #expect(!good.message.contains(token) && !good.message.contains(hash.prefix(16)), "\(good.message)")
    }
}
