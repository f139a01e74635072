import Foundation
import Testing
@testable import RPCDaemon

#if canImport(Glibc)
import Glibc
#endif

/// Which owners and modes a secret file may have (the files themselves are the integration tests').
struct SecretFileTests {
    private let file = SecretFile.authFile
    private let regular: mode_t = 0o100000

    @Test func writableByGroupOrOthersOrOwnedByAStrangerIsRefused() {
        for mode: mode_t in [0o600, 0o400, 0o640, 0o440, 0o644, 0o700] {
            #expect(file.problem("f", mode: regular | mode, owner: 1000, user: 1000) == nil, "\(String(mode, radix: 8))")
            #expect(file.problem("f", mode: regular | mode, owner: 0, user: 1000) == nil, "root's, read by another user")
        }
        for mode: mode_t in [0o620, 0o602, 0o666, 0o660, 0o777] {
            #expect(file.problem("f", mode: regular | mode, owner: 0, user: 0)?.contains("writable by group or others") == true)
        }
        #expect(file.problem("f", mode: regular | 0o666, owner: 0, user: 0)
            == "f: the auth file is writable by group or others (mode 0666), so other local users could change it; run chmod go-w f")
        #expect(file.problem("f", mode: regular | 0o600, owner: 1001, user: 1000)
            == "f: the auth file is owned by uid 1001, neither root nor the user rpcd runs as (uid 1000); run chown 1000 f")
        #expect(file.problem("f", mode: regular | 0o600, owner: 1001, user: 0) != nil, "root does not trust another user's file")
    }

    @Test func readableByOthersIsWarnedOf() {
        #expect(file.warning("f", mode: regular | 0o644) == "f: the auth file is readable by others (mode 0644); run chmod o-r f")
        for mode: mode_t in [0o600, 0o640, 0o440, 0o400] {
            #expect(file.warning("f", mode: regular | mode) == nil, "\(String(mode, radix: 8)): systemd's credentials are 0400 or 0440")
        }
    }

    @Test func theModeIsCheckedOnTheFileRead() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-secret-\(UUID().uuidString)").path
        defer { unlink(path) }
        try "x\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(chmod(path, 0o646) == 0)
        #expect(throws: AuthFile.Problems.self) { try file.read(path) { _ in } }
        #expect(chmod(path, 0o604) == 0)
        var warnings: [String] = []
        #expect(try file.read(path) { warnings.append($0) } == Array("x\n".utf8))
        #expect(warnings == ["\(path): the auth file is readable by others (mode 0604); run chmod o-r \(path)"])
        #expect(try file.read(path + ".missing") { _ in } == nil)
    }
}
