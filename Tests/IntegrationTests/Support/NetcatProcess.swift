import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A real `nc HOST PORT` left running, as in a terminal: lines are typed into its stdin whenever
/// the test likes, and what it prints is collected. Killed on `stop()` and in `deinit`.
final class NetcatProcess {
    let pid: pid_t
    private let exit: ChildExit
    private let input: FileHandle
    private let output: PipeDrain
    private let errors: PipeDrain

    convenience init(nc: String, port: Int) throws {
        try self.init(executable: nc, arguments: ["127.0.0.1", "\(port)"])
    }

    /// Any line-at-a-time client, e.g. `openssl s_client -quiet …` for a TLS session.
    init(executable: String, arguments: [String]) throws {
        _ = ignoreSIGPIPEInTests
        let inPipe = Pipe()
        let outPipe = Pipe()
        let errPipe = Pipe()
        pid = try Spawn.start(
            executable, arguments, stdin: inPipe.fileHandleForReading.fileDescriptor, stdout: outPipe.fileHandleForWriting.fileDescriptor,
            stderr: errPipe.fileHandleForWriting.fileDescriptor)
        exit = ChildExit(pid: pid)
        try? inPipe.fileHandleForReading.close()
        try? outPipe.fileHandleForWriting.close()
        try? errPipe.fileHandleForWriting.close()
        input = inPipe.fileHandleForWriting
        output = PipeDrain(outPipe)
        errors = PipeDrain(errPipe)
    }

    deinit { stop() }

    /// Types `line` and Enter.
    func type(_ line: String) throws { try input.write(contentsOf: Data((line + "\n").utf8)) }

    /// The complete lines nc printed so far.
    var lines: [String] {
        var lines = output.text.components(separatedBy: "\n")
        lines.removeLast()  // the unfinished rest (empty after a newline)
        return lines
    }

    /// Waits until nc printed at least `count` lines; returns the lines printed by then.
    @discardableResult
    func waitForLines(_ count: Int, timeout: Double = 10) -> [String] {
        _ = output.wait(timeout: timeout) { $0.filter { $0 == "\n" }.count >= count }
        return lines
    }

    var stderrText: String { errors.text }

    func stop() {
        try? input.close()
        if exit.isRunning {
            kill(pid, SIGKILL)
            exit.wait(timeout: 5)
        }
    }
}
