import Foundation
import Testing
@testable import RPCDaemon

/// Settings files, without a daemon.
struct ConfigParsingTests {
    private func parse(_ text: String) -> Result<ServeOptions, Config.Problems> {
        Result { () throws(Config.Problems) in try Config.parse(ConfigFile(path: "t.conf", text: text)) }
    }

    @Test func emptyFileGivesTheDefaults() throws {
        #expect(try parse("\n# nothing\n   \n").get() == ServeOptions())
    }

    @Test func everyKeyIsRead() throws {
        let options = try parse("""
            listen = 127.0.0.1:1
            listen = [::1]:2   # a comment
            data_dir = "/srv/rpcd data"
            fsync = everysec
            max_frame_bytes = 64KiB
            max_output_bytes = 2M
            max_connections = 0
            idle_timeout = 5m
            log_level = warning\r
            """).get()
        #expect(options.listen == ["127.0.0.1:1", "[::1]:2"])
        #expect(options.dataDir == "/srv/rpcd data")
        #expect(options.fsync == .everysec)
        #expect(options.maxFrameBytes == 65536 && options.maxOutputBytes == 2 << 20)
        #expect(options.maxConnections == 0 && options.idleTimeout == 300)
        #expect(options.logLevel == .warning)
    }

    @Test func problemsNameTheirLineAndAreAllReported() {
        guard case .failure(let problems) = parse("""
            log_levle = info
            max_frame_bytes = -3
            listen = 10.0.0:80
            data_dir = /a
            data_dir = /b
            = x
            """)
        else {
            Issue.record("expected problems")
            return
        }
        #expect(problems.lines.count == 5, "\(problems)")
        #expect(problems.lines[0].hasPrefix("t.conf:1: unknown key \"log_levle\"; did you mean \"log_level\"?"))
        #expect(problems.lines[1].hasPrefix("t.conf:2: max_frame_bytes"))
        #expect(problems.lines[2].hasPrefix("t.conf:3: listen"))
        #expect(problems.lines[3].hasPrefix("t.conf:5: data_dir is set twice (first on line 4)"))
        #expect(problems.lines[4].hasPrefix("t.conf:6: "))
    }

    @Test func farOffKeysGetNoSuggestion() {
        #expect(Config.closestKey(to: "colour") == nil)
        #expect(Config.closestKey(to: "idle-timeout") == "idle_timeout")
        #expect(Config.closestKey(to: "LISTEN") == "listen")
    }

    @Test func valueSyntaxes() {
        #expect(ConfigValue.seconds("1.5") == 1.5 && ConfigValue.seconds("500ms") == 0.5)
        #expect(ConfigValue.seconds("2h") == 7200 && ConfigValue.seconds("-1") == nil && ConfigValue.seconds("x") == nil)
        #expect(ConfigValue.bytes("1GiB") == 1 << 30 && ConfigValue.bytes("12") == 12 && ConfigValue.bytes("1MB") == nil)
    }

    @Test func flagsWinOverTheFileOnlyForWhatTheySet() throws {
        let flags = try CommandLineParser.parseServe(["--log-level", "debug", "--max-connections", "7", "--config", "x"])
        var options = try parse("log_level = error\nmax_connections = 3\nidle_timeout = 9\nlisten = 127.0.0.1:5\n").get()
        Config.merge(flags, into: &options)
        #expect(options.logLevel == .debug && options.maxConnections == 7)
        #expect(options.idleTimeout == 9 && options.listen == ["127.0.0.1:5"])
    }

    @Test func whichFileIsRead() throws {
        var flags = ServeOptions()
        #expect(Config.path(for: flags, environment: ["RPCD_CONFIG": "/e.conf"])?.path == "/e.conf")
        flags.configPath = "/f.conf"
        #expect(Config.path(for: flags, environment: ["RPCD_CONFIG": "/e.conf"])?.path == "/f.conf")
    }

    /// The shipped file documents every key, and check-config's rendering reads back the same.
    @Test func shippedFileHasEveryKeyAndRoundTrips() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("config/rpcd.conf"), encoding: .utf8)
        let file = ConfigFile(path: "rpcd.conf", text: text)
        #expect(Set(file.entries.map(\.key)) == Set(Config.keys))
        let options = try Config.parse(file)
        #expect(try Config.parse(ConfigFile(path: "r", text: Config.render(options))) == options)
    }
}
