import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An `rpcd serve` started by the benchmark on a free port and a fresh (or given) data directory.
final class SpawnedDaemon: @unchecked Sendable {
    // @unchecked: `stderrText` is guarded by `condition`; the rest is set in init.
    let process = Process()
    let dataDir: String
    private(set) var port = 0
    /// The `tls:` listener's port with `--tls` (0 without).
    private(set) var tlsPort = 0
    /// Seconds from start to the `listening on` line.
    private(set) var startSeconds = 0.0
    private let condition = NSCondition()
    private var stderrText = ""
    private var stderrClosed = false

    /// Runs `binary serve` with `extraArguments`, then every `--daemon-arg` of the command line.
    init(binary: String, dataDir: String, extraArguments: [String]) throws {
        self.dataDir = dataDir
        process.executableURL = URL(fileURLWithPath: binary)
        var tlsArguments: [String] = []
        if options.tls {
            let tls = BenchTLS.shared
            tlsArguments = ["--listen", "tls:127.0.0.1:0", "--tls-cert-file", tls.certificateFile, "--tls-key-file", tls.keyFile]
        }
        process.arguments = ["serve", "--listen", "127.0.0.1:0"] + tlsArguments + ["--data-dir", dataDir, "--log-level", "info"] + extraArguments
            + options.daemonArguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        let pipe = Pipe()
        process.standardError = pipe
        let started = Date()
        try process.run()
        Cleanup.track(process)
        try? pipe.fileHandleForWriting.close()
        let reader = pipe.fileHandleForReading
        Thread.detachNewThread { [self] in
            while true {
                let data = reader.availableData
                condition.lock()
                if data.isEmpty { stderrClosed = true } else { stderrText += String(decoding: data, as: UTF8.self) }
                condition.broadcast()
                condition.unlock()
                if data.isEmpty { return }
            }
        }
        let deadline = Date().addingTimeInterval(120)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let range = stderrText.range(of: #"listening on [^\s]+:(\d+)"#, options: .regularExpression),
                let colon = stderrText[range].lastIndex(of: ":"), let port = Int(stderrText[range][stderrText.index(after: colon)...]),
                !options.tls || stderrText.contains(" (TLS)")
            {
                self.port = port
                if options.tls, let line = stderrText.split(separator: "\n").first(where: { $0.hasSuffix(" (TLS)") }),
                    let colon = line.dropLast(6).lastIndex(of: ":")
                {
                    tlsPort = Int(line[line.index(after: colon)..<line.index(line.endIndex, offsetBy: -6)]) ?? 0
                }
                startSeconds = Date().timeIntervalSince(started)
                return
            }
            if stderrClosed || !condition.wait(until: deadline) {
                throw UsageError("rpcd did not print 'listening on' (stderr: \(stderrText.suffix(500)))")
            }
        }
    }

    var pid: Int32 { process.processIdentifier }

    /// Resident set size of the daemon in KiB.
    func rssKiB() -> Int { ProcessStats.rssKiB(pid: pid) }

    /// CPU seconds the daemon used so far (user + system).
    func cpuSeconds() -> Double { ProcessStats.cpuSeconds(pid: pid) }

    /// SIGTERM and wait for the exit.
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
    }

    func kill() {
        if process.isRunning { Glibc.kill(pid, SIGKILL) }
        process.waitUntilExit()
    }
}
