import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The settings file, `check-config`, and the limits it sets.
@Suite(.serialized)
struct ConfigTests {
    private func write(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-\(UUID().uuidString).conf").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func checkConfigAcceptsTheShippedFile() throws {
        let root = try #require(packageRoot())
        let path = root.appendingPathComponent("config/rpcd.conf").path
        let outcome = try runProcess(try Binaries.rpcd(), ["check-config", path])
        #expect(outcome.status == 0, "stderr: \(outcome.stderr)")
        for key in ["listen", "data_dir", "fsync", "max_frame_bytes", "max_output_bytes", "max_connections", "idle_timeout", "log_level"] {
            #expect(outcome.stdout.contains("\n\(key) = "), "effective settings lack \(key): \(outcome.stdout)")
        }
    }

    @Test func checkConfigNamesEachBrokenLine() throws {
        let path = try write("""
            # comment
            listen = 127.0.0.1:7878
            max_conections = 5
            fsync = sometimes
            listen = localhost:notaport
            idle_timeout = soon
            just words
            """)
        defer { unlink(path) }
        let outcome = try runProcess(try Binaries.rpcd(), ["check-config", path])
        #expect(outcome.status == 2, "bad config exits 2, as serve does")
        let lines = outcome.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 5, "\(outcome.stderr)")
        #expect(lines.contains { $0.hasPrefix("\(path):3: ") && $0.contains("did you mean \"max_connections\"") }, "\(outcome.stderr)")
        #expect(lines.contains { $0.hasPrefix("\(path):4: ") && $0.contains("fsync") }, "\(outcome.stderr)")
        #expect(lines.contains { $0.hasPrefix("\(path):5: ") && $0.contains("HOST:PORT") }, "\(outcome.stderr)")
        #expect(lines.contains { $0.hasPrefix("\(path):6: ") && $0.contains("idle_timeout") }, "\(outcome.stderr)")
        #expect(lines.contains { $0.hasPrefix("\(path):7: ") }, "\(outcome.stderr)")

        let missing = try runProcess(try Binaries.rpcd(), ["check-config", "/nonexistent/rpcd.conf"])
        #expect(missing.status == 2 && missing.stderr.contains("/nonexistent/rpcd.conf"))
        #expect(try runProcess(try Binaries.rpcd(), ["check-config"]).status == 2)
    }

    @Test func serveRefusesABrokenFile() throws {
        let path = try write("log_level = loud\n")
        defer { unlink(path) }
        let outcome = try runProcess(try Binaries.rpcd(), ["serve", "--config", path, "--listen", "127.0.0.1:0"])
        #expect(outcome.status == 2 && outcome.stderr.contains("\(path):1: "), "\(outcome.stderr)")
    }

    /// The file beats the defaults; flags beat the file.
    @Test func flagsOverrideTheFile() throws {
        let path = try write("""
            listen = 127.0.0.1:9
            log_level = error
            max_connections = 1
            """)
        defer { unlink(path) }
        // --listen and --log-level override the file (else no `listening on` line, or port 9);
        // max_connections comes from the file.
        try withDaemon(extraArguments: ["--config", path, "--log-level", "info"]) { daemon in
            #expect(daemon.port != 9)
            let first = try LineClient(port: daemon.port)
            _ = try first.request(#"{"id":"1","method":"system.ping"}"#)
            let second = try LineClient(port: daemon.port)
            expectError(try second.readLine(), code: "overloaded", id: "")
        }
    }

    @Test func rpcdConfigEnvironmentNamesTheFile() throws {
        let path = try write("max_connections = 1\n")
        defer { unlink(path) }
        try withDaemon(environment: ["RPCD_CONFIG": path]) { daemon in
            let first = try LineClient(port: daemon.port)
            _ = try first.request(#"{"id":"1","method":"system.ping"}"#)
            let second = try LineClient(port: daemon.port)
            expectError(try second.readLine(), code: "overloaded", id: "")
        }
    }

    @Test func maxConnectionsRefusesWithOneErrorThenCloses() throws {
        try withDaemon(extraArguments: ["--max-connections", "2"]) { daemon in
            let a = try LineClient(port: daemon.port)
            let b = try LineClient(port: daemon.port)
            _ = try a.request(#"{"id":"1","method":"system.ping"}"#)
            _ = try b.request(#"{"id":"1","method":"system.ping"}"#)
            let c = try LineClient(port: daemon.port)
            expectError(try c.readLine(), code: "overloaded", id: "")
            #expect(try c.readLine() == nil, "closed after the one error")
            // Room again once one leaves.
            a.close()
            #expect(PipeWait.until(5) {
                guard let d = try? LineClient(port: daemon.port), let line = try? d.request(#"{"id":"2","method":"system.ping"}"#) else { return false }
                return line.contains("system.pingResult")
            })
            // The refused one is counted.
            let stats = try Reply(b.request(#"{"id":"s","method":"system.stats"}"#))
            #expect(((stats.param?["connections"] as? [String: Any])?["refused"] as? Int ?? 0) >= 1, "\(stats.line)")
        }
    }

    @Test func idleTimeoutClosesQuietConnections() throws {
        try withDaemon(extraArguments: ["--idle-timeout", "1"]) { daemon in
            let quiet = try LineClient(port: daemon.port)
            let busy = try LineClient(port: daemon.port)
            let start = Date()
            // The busy one sends a request every 300 ms and stays open.
            while Date().timeIntervalSince(start) < 2.5 {
                #expect(try busy.request(#"{"id":"b","method":"system.ping"}"#).contains("pingResult"))
                usleep(300_000)
            }
            let ended = quiet.drainUntilClosed(silenceTimeout: 3)
            #expect(ended.end == .eof, "the quiet connection was not closed: \(ended)")
            #expect(try busy.request(#"{"id":"b","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test func idleTimeoutZeroNeverCloses() throws {
        try withDaemon(extraArguments: ["--idle-timeout", "0"]) { daemon in
            let quiet = try LineClient(port: daemon.port)
            #expect(quiet.isSilent(for: 1.5))
            #expect(try quiet.request(#"{"id":"q","method":"system.ping"}"#).contains("pingResult"))
        }
    }
}
