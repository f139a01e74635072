import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Every `serve` flag has a config key and the other way round, and flags always win over the file.
@Suite("settings: flags and config keys")
struct SettingsParityTests {
    /// `--some-flag` -> `some_flag`
    static func key(_ flag: String) -> String { String(flag.dropFirst(2)).replacingOccurrences(of: "-", with: "_") }

    @Test("rpcd serve --help and config/rpcd.conf list the same settings")
    func helpAndConfigAgree() throws {
        let help = try runProcess(try Binaries.rpcd(), ["serve", "--help"]).stdout
        let options = help.components(separatedBy: "Options of serve:").last ?? ""
        let flags = Set(options.split(separator: "\n").compactMap { line -> String? in
            let word = line.trimmingCharacters(in: .whitespaces).split(separator: " ").first.map(String.init) ?? ""
            return word.hasPrefix("--") ? word : nil
        })
        let root = try #require(packageRoot())
        let conf = try String(contentsOf: root.appendingPathComponent("config/rpcd.conf"), encoding: .utf8)
        let keys = Set(conf.split(separator: "\n").compactMap { line -> String? in
            guard !line.hasPrefix("#"), let equals = line.firstIndex(of: "=") else { return nil }
            return line[..<equals].trimmingCharacters(in: .whitespaces)
        })
        #expect(!flags.isEmpty && !keys.isEmpty)
        let settingFlags = flags.subtracting(["--config"])
        #expect(Set(settingFlags.map(Self.key)) == keys, "flags \(settingFlags.sorted()) vs keys \(keys.sorted())")
    }

    @Test("--compact-after-bytes wins over a config file, which has the key too")
    func compactAfterBytesFlagWins() throws {
        let conf = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-\(UUID().uuidString).conf").path
        try "compact_after_bytes = 1GiB\n".write(toFile: conf, atomically: true, encoding: .utf8)
        defer { unlink(conf) }
        try withDaemon(extraArguments: ["--config", conf, "--compact-after-bytes", "4096"]) { daemon in
            let c = try LineClient(port: daemon.port)
            for i in 0..<100 {
                #expect(try c.request(Wire.createUser("\(i)", "c\(i)", "Compact", "c@example.com")).contains("createUserResult"))
            }
            let snapshot = daemon.dataDir.appendingPathComponent("snapshot.jsonl").path
            let watch = Stopwatch()
            while !FileManager.default.fileExists(atPath: snapshot) && watch.seconds < 10 { usleep(50_000) }
            #expect(FileManager.default.fileExists(atPath: snapshot), "no compaction at 4096 bytes: the flag lost to the file")
        }
        // And the key alone is honoured.
        let check = try runProcess(try Binaries.rpcd(), ["check-config", conf])
        #expect(check.stdout.contains("compact_after_bytes = 1073741824"), "\(check.stdout)")
    }
}
