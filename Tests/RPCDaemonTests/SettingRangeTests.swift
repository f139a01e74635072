import Foundation
import Testing
@testable import RPCDaemon

/// Every numeric flag and config key has a range; outside it is a usage error naming the range
/// (issue 10, items 1 and 2). Without a daemon.
struct SettingRangeTests {
    /// (flag, config key or nil, values refused, values accepted with what they give)
    static let cases: [(flag: String, key: String?, refused: [String], accepted: [(String, Double)])] = [
        ("--max-frame-bytes", "max_frame_bytes",
         ["9223372036854775807", "99999999999999999999", "63", "0", "-1", "65MiB", "8GiB", "1.5", "1e3", "x", "", "nan"],
         [("64", 64), ("64MiB", 67_108_864), ("67108864", 67_108_864), ("1MiB", 1_048_576)]),
        ("--max-output-bytes", "max_output_bytes",
         ["9223372036854775807", "1023", "0", "-8", "2GiB", "1TiB", "8M8"],
         [("1KiB", 1024), ("1GiB", 1_073_741_824), ("256KiB", 262_144)]),
        ("--max-connections", "max_connections",
         ["1000001", "9223372036854775807", "9223372036854775808", "-1", "1.0", "1e6", "many"],
         [("0", 0), ("1000000", 1_000_000), ("+7", 7)]),
        ("--idle-timeout", "idle_timeout",
         ["2e10", "1e300", "1e308h", "2592001", "721h", "-1", "-0.5s", "nan", "inf", "-inf", "1e-300", "0.0009", "soon", ""],
         [("0", 0), ("-0", 0), ("0.001", 0.001), ("1ms", 0.001), ("2592000", 2_592_000), ("720h", 2_592_000), ("5m", 300)]),
        ("--group-commit-delay", "group_commit_delay",
         ["0.2", "1s", "101ms", "0.00005", "0.09ms", "-1ms", "nan", "inf", "1e300", "soon", ""],
         [("0", 0), ("0.0001", 0.0001), ("0.1ms", 0.0001), ("2ms", 0.002), ("100ms", 0.1), ("0.1", 0.1)]),
        ("--busy-poll", "busy_poll",
         ["2ms", "0.0011", "1e-7", "0.5us", "-1us", "nan", "inf", "1e300", "soon", ""],
         [("0", 0), ("50us", 0.000_05), ("1us", 0.000_001), ("1µs", 0.000_001), ("0.001", 0.001), ("1ms", 0.001)]),
        ("--event-loops", "event_loops",
         ["257", "-1", "1.5", "9223372036854775808", "two", ""],
         [("0", 0), ("1", 1), ("256", 256)]),
        ("--compact-after-bytes", nil,
         ["0", "4095", "2TiB", "9223372036854775807", "-1"],
         [("4KiB", 4096), ("20000", 20_000), ("1TiB", Double(1 << 40))]),
    ]

    @Test func flagsOutsideTheirRangeAreUsageErrorsNamingTheRange() {
        for c in Self.cases {
            for value in c.refused {
                do {
                    _ = try CommandLineParser.parseServe([c.flag, value])
                    Issue.record("\(c.flag) '\(value)' was accepted")
                } catch {
                    #expect(error.message.hasPrefix("\(c.flag) '\(value)' "), "\(error.message)")
                    #expect(error.message.contains("allowed: "), "no range in: \(error.message)")
                    #expect(!error.message.contains("\n"))
                }
            }
        }
    }

    @Test func flagsAtTheEdgesOfTheirRangeAreAccepted() throws {
        for c in Self.cases {
            for (value, expected) in c.accepted {
                let options = try CommandLineParser.parseServe(["\(c.flag)=\(value)"])
                let got: Double
                switch c.flag {
                case "--max-frame-bytes": got = Double(options.maxFrameBytes)
                case "--max-output-bytes": got = Double(options.maxOutputBytes)
                case "--max-connections": got = Double(options.maxConnections)
                case "--idle-timeout": got = options.idleTimeout
                case "--group-commit-delay": got = options.groupCommitDelay
                case "--busy-poll": got = options.busyPoll
                case "--event-loops": got = Double(options.eventLoops)
                default: got = Double(options.compactAfterBytes)
                }
                #expect(got == expected, "\(c.flag) \(value)")
            }
        }
    }

    @Test func configKeysOutsideTheirRangeAreReportedWithTheirLine() {
        for c in Self.cases {
            guard let key = c.key else { continue }
            // Repeated keys are a problem of their own: check one file per value.
            for (number, value) in c.refused.enumerated() {
                let file = ConfigFile(path: "t.conf", text: "# \(number)\n\(key) = \"\(value)\"\n")
                do {
                    _ = try Config.parse(file)
                    Issue.record("\(key) = \(value) was accepted")
                } catch {
                    #expect(error.lines.count == 1 && error.lines[0].hasPrefix("t.conf:2: \(key) \"\(value)\" "), "\(error.lines)")
                    #expect(error.lines.first?.contains("allowed: ") == true, "\(error.lines)")
                }
            }
            for (value, _) in c.accepted {
                #expect((try? Config.parse(ConfigFile(path: "t.conf", text: "\(key) = \(value)\n"))) != nil, "\(key) = \(value)")
            }
        }
    }

    @Test func rangesReadTheSameEverywhere() {
        #expect(SettingRanges.describe(bytes: SettingRanges.maxFrameBytes) == "64 to 67108864 bytes (64 B to 64 MiB)")
        #expect(SettingRanges.describe(seconds: SettingRanges.idleTimeout, zero: "never")
            == "0 (never) or 0.001 to 2592000 seconds (1 ms to 30 days)")
        #expect(SettingRanges.describe(count: SettingRanges.maxConnections, zero: "no limit") == "0 (no limit) to 1000000")
        #expect(CommandLineParser.help.contains(SettingRanges.describe(bytes: SettingRanges.maxOutputBytes)))
        #expect(CommandLineParser.help.contains(SettingRanges.describe(bytes: SettingRanges.compactAfterBytes)))
        #expect(CommandLineParser.help.contains(SettingRanges.describe(seconds: SettingRanges.groupCommitDelay, zero: "none")))
        #expect(CommandLineParser.help.contains(SettingRanges.describe(count: SettingRanges.eventLoops, zero: "half the cores")))
        #expect(CommandLineParser.help.contains(SettingRanges.describe(seconds: SettingRanges.busyPoll, zero: "never")))
        #expect(SettingRanges.describe(seconds: SettingRanges.busyPoll, zero: "never") == "0 (never) or 1e-06 to 0.001 seconds (1 µs to 1 ms)")
        // The default renders as the file writes it, and reads back the same.
        #expect(Config.render(ServeOptions()).contains("\nbusy_poll = 50us\n"))
        #expect(CallCommand.help.contains(SettingRanges.describe(seconds: SettingRanges.callTimeout, zero: nil)))
        for bad in ["1e300", "0", "-1", "nan", "inf", "2592001"] {
            #expect(throws: UsageError.self, "--timeout \(bad)") {
                _ = try CallCommand.parse(["--timeout", bad, "127.0.0.1:1", "system.ping"], stdin: { Data() })
            }
        }
        #expect((try? CallCommand.parse(["--timeout", "2592000", "127.0.0.1:1", "system.ping"], stdin: { Data() }))?.timeout == 2_592_000)
    }

    /// 0 (the default) runs half the cores' worth of loops, never none; a number runs that many.
    @Test func eventLoopsDefaultToHalfTheCores() throws {
        let automatic = ServeOptions()
        #expect([1, 2, 3, 4, 8, 64].map { automatic.loopCount(cores: $0) } == [1, 1, 1, 2, 4, 32])
        #expect(automatic.loopCount(cores: 0) == 1)
        let three = try CommandLineParser.parseServe(["--event-loops", "3"])
        #expect(three.loopCount(cores: 2) == 3)
        #expect(three.setByFlags.contains("event_loops"))
        var fromFile = try Config.parse(ConfigFile(path: "t.conf", text: "event_loops = 5\n"))
        #expect(fromFile.loopCount(cores: 64) == 5)
        Config.merge(three, into: &fromFile)
        #expect(fromFile.eventLoops == 3, "the flag wins over the file")
        #expect(Config.render(fromFile).contains("\nevent_loops = 3\n"))
    }
}

@Suite struct InputShareTests {
    @Test func anEvenSplitThatFitsALineIsKept() {
        let split = Server.inputShare(maxInputBytes: 256 << 20, loops: 4, maxFrameBytes: 1 << 20)
        #expect(split.share == 64 << 20 && !split.raised)
    }

    @Test func aSplitBelowOneLineIsRaisedToOneLine() {
        let split = Server.inputShare(maxInputBytes: 1 << 20, loops: 4, maxFrameBytes: 1 << 20)
        #expect(split.share == (1 << 20) + 2 && split.raised)
        let many = Server.inputShare(maxInputBytes: 1 << 20, loops: 256, maxFrameBytes: 64 << 20)
        #expect(many.share == (64 << 20) + 2 && many.raised)
    }

    @Test func extremesNeitherTrapNorDivideByZero() {
        #expect(Server.inputShare(maxInputBytes: .max, loops: 0, maxFrameBytes: .max).share == .max)
        #expect(Server.inputShare(maxInputBytes: 0, loops: 1, maxFrameBytes: 64).share == 66)
    }
}
