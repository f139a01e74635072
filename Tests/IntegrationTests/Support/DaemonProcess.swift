import Foundation
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The real `rpcd serve` on `127.0.0.1:0` with a fresh data directory. Killed (SIGKILL) on `stop()`
/// and in `deinit`, so no daemon outlives its test.
final class DaemonProcess {
    /// The daemon's exit, reaped by the test itself (see `ChildExit`).
    private let exit: ChildExit
    let dataDir: URL
    /// Every `listening on HOST:PORT` seen, in order.
    let listeners: [(host: String, port: Int)]
    var port: Int { listeners[0].port }
    let pid: Int32
    private let stderrDrain: PipeDrain
    /// Whether `deinit` removes `dataDir` (only the fresh one it made itself).
    private let ownsDataDir: Bool

    /// Starts the daemon and waits (up to `timeout` seconds) until it printed `expectedListeners`
    /// `listening on` lines.
    init(
        listen: [String] = ["127.0.0.1:0"],
        extraArguments: [String] = [],
        expectedListeners: Int? = nil,
        timeout: Double = 20,
        dataDir givenDataDir: URL? = nil,
        environment: [String: String] = [:],
        binary givenBinary: URL? = nil
    ) throws {
        let binary = try givenBinary ?? Binaries.rpcd()
        ownsDataDir = givenDataDir == nil
        dataDir = givenDataDir ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("rpcd-it-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: dataDir, withIntermediateDirectories: true)

        var arguments = ["serve"]
        for address in listen { arguments += ["--listen", address] }
        arguments += ["--data-dir", dataDir.path]
        arguments += extraArguments

        let errPipe = Pipe()
        do {
            pid = try Spawn.start(
                binary.path, arguments, environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { $1 },
                stderr: errPipe.fileHandleForWriting.fileDescriptor)
        } catch {
            if ownsDataDir { try? FileManager.default.removeItem(at: dataDir) }
            throw HarnessError("could not start \(binary.path): \(error)")
        }
        exit = ChildExit(pid: pid)
        // Our copy of the write end must go, or the drain never sees EOF.
        try? errPipe.fileHandleForWriting.close()
        stderrDrain = PipeDrain(errPipe)

        let want = expectedListeners ?? listen.count
        let timeout = TestPace.seconds(timeout)
        let found = stderrDrain.wait(timeout: timeout) { DaemonProcess.parseListeners($0).count >= want }
        let seen = DaemonProcess.parseListeners(stderrDrain.text)
        if !found || seen.count < want {
            let text = stderrDrain.text
            let state = exit.poll().map { "exited with \($0.code)" } ?? "still running"
            if exit.isRunning { Glibc.kill(pid, SIGKILL) }
            if ownsDataDir { try? FileManager.default.removeItem(at: dataDir) }
            throw HarnessError(
                "rpcd \(arguments.joined(separator: " ")) did not print \(want) `listening on HOST:PORT` "
                    + "line(s) within \(timeout) s (\(state)). stderr:\n\(text)")
        }
        listeners = seen
    }

    deinit {
        if exit.isRunning {
            Glibc.kill(pid, SIGKILL)
            exit.wait(timeout: 5)  // reaped: no zombie left behind
        }
        if ownsDataDir { try? FileManager.default.removeItem(at: dataDir) }
    }

    static func parseListeners(_ text: String) -> [(host: String, port: Int)] {
        var result: [(host: String, port: Int)] = []
        let regex = try! NSRegularExpression(pattern: #"listening on (\S+):(\d+)"#)
        let ns = text as NSString
        for match in regex.matches(in: text, range: NSRange(location: 0, length: ns.length)) {
            let host = ns.substring(with: match.range(at: 1))
            if let port = Int(ns.substring(with: match.range(at: 2))) { result.append((host, port)) }
        }
        return result
    }

    var stderrText: String { stderrDrain.text }

    /// Stops reading the daemon's stderr, as a terminal or journald that stalls would; its pipe
    /// fills after at most 64 KiB (plus the one read in progress). `resumeStderr()` reads again.
    func pauseStderr() { stderrDrain.pause() }
    func resumeStderr() { stderrDrain.resume() }

    /// Whether stderr contains `text` within `timeout` seconds (stderr reaches the test through a
    /// pipe drained on another thread, so a line logged just before a reply may not be here yet).
    func stderrEventually(contains text: String, timeout: Double = 5) -> Bool {
        stderrDrain.wait(timeout: timeout) { $0.contains(text) }
    }

    /// The last `maxBytes` of stderr, for failure messages.
    func stderrTail(_ maxBytes: Int = 4000) -> String {
        let text = stderrText
        return text.count <= maxBytes ? text : "…" + String(text.suffix(maxBytes))
    }

    var isRunning: Bool { exit.isRunning }

    func terminate() { signal(SIGTERM) }
    func interrupt() { signal(SIGINT) }
    func kill() { signal(SIGKILL) }
    /// Sends `sig`. For SIGSTOP, returns once every thread of the daemon is stopped (kill(2)
    /// returns before a running thread has stopped; a test that then queues work for a stopped
    /// daemon would race it), or after 5 s.
    func signal(_ sig: Int32) {
        guard exit.isRunning else { return }
        _ = Glibc.kill(pid, sig)
        guard sig == SIGSTOP else { return }
        let watch = Stopwatch()
        while !Self.allThreadsStopped(pid) && watch.seconds < 5 { usleep(1_000) }
    }

    /// Whether every thread in /proc/PID/task is in state T (stopped).
    private static func allThreadsStopped(_ pid: Int32) -> Bool {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"), !tasks.isEmpty else { return false }
        return tasks.allSatisfy { task in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            // "pid (comm) S ...": the state follows the command name's closing parenthesis.
            return stat[close...].dropFirst(2).first == "T"
        }
    }

    /// The exit status once the process exited within `timeout` seconds, else nil. A death by signal
    /// is reported shell-style as 128 + signal number.
    func waitForExit(timeout: Double) -> Int32? {
        guard exit.wait(timeout: timeout) != nil else { return nil }
        return exitDescription.code
    }

    /// (code, text) for a process that exited; code is 128 + signal for a death by signal.
    var exitDescription: (code: Int32, text: String) {
        guard let ended = exit.poll() else { return (-1, "still running") }
        return ended.signaled ? (128 + ended.code, "killed by signal \(ended.code)") : (ended.code, "exit \(ended.code)")
    }

    /// Kills the daemon and waits for it to go.
    func stop() {
        kill()
        _ = waitForExit(timeout: 5)
    }

    /// Resident set size (VmRSS) in KiB.
    func rssKiB() -> Int? { statusField("VmRSS") }
    /// Peak resident set size (VmHWM) in KiB.
    func peakRSSKiB() -> Int? { statusField("VmHWM") }

    private func statusField(_ name: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            let digits = line.dropFirst(name.count + 1).split(whereSeparator: { $0 == " " || $0 == "\t" }).first
            return digits.flatMap { Int($0) }
        }
        return nil
    }

    /// The names of the daemon's threads (/proc/PID/task/*/comm).
    func threadNames() -> [String] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { task in
            (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    /// Number of open file descriptors (entries of /proc/PID/fd).
    func openFDCount() -> Int? {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd"))?.count
    }

    /// utime + stime in clock ticks, from /proc/PID/stat.
    func cpuTicks() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        // Fields after ")": state(3) ppid(4) ... utime(14) stime(15); index 0 here is field 3.
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let utime = Int(fields[11]), let stime = Int(fields[12]) else { return nil }
        return utime + stime
    }
}

/// Starts a daemon, runs `body`, then checks the daemon did not die on its own during the test and
/// kills it. Thrown errors get the daemon's stderr tail attached.
func withDaemon<R>(
    listen: [String] = ["127.0.0.1:0"],
    extraArguments: [String] = [],
    environment: [String: String] = [:],
    _ body: (DaemonProcess) throws -> R
) throws -> R {
    let daemon = try DaemonProcess(listen: listen, extraArguments: extraArguments, environment: environment)
    defer { daemon.stop() }
    let result: R
    do {
        result = try body(daemon)
    } catch {
        throw HarnessError("\(error)\n--- rpcd stderr (tail) ---\n\(daemon.stderrTail())")
    }
    if !daemon.isRunning {
        throw HarnessError(
            "rpcd died during the test (\(daemon.exitDescription.text)).\n--- rpcd stderr (tail) ---\n\(daemon.stderrTail())")
    }
    return result
}
