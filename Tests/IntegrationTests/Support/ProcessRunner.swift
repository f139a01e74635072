import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct ProcessOutcome {
    /// Exit status, 128 + signal for a death by signal, nil if it had to be killed after the timeout.
    let status: Int32?
    let stdout: String
    let stderr: String
}

/// Runs `executable arguments` to completion (killed after `timeout` seconds), feeding `stdin`
/// and collecting stdout and stderr through continuously drained pipes.
func runProcess(
    _ executable: URL, _ arguments: [String], stdin: String? = nil, timeout: Double = 10, maxOutputBytes: Int = PipeDrain.defaultCap
) throws -> ProcessOutcome {
    _ = ignoreSIGPIPEInTests
    let outPipe = Pipe()
    let errPipe = Pipe()
    let inPipe = Pipe()
    let pid = try Spawn.start(
        executable.path, arguments, stdin: stdin == nil ? nil : inPipe.fileHandleForReading.fileDescriptor,
        stdout: outPipe.fileHandleForWriting.fileDescriptor, stderr: errPipe.fileHandleForWriting.fileDescriptor)
    try? outPipe.fileHandleForWriting.close()
    try? errPipe.fileHandleForWriting.close()
    let out = PipeDrain(outPipe, cap: maxOutputBytes)
    let err = PipeDrain(errPipe)
    try? inPipe.fileHandleForReading.close()
    if let stdin {
        let writer = inPipe.fileHandleForWriting
        try? writer.write(contentsOf: Data(stdin.utf8))
        try? writer.close()
    }
    let exit = ChildExit(pid: pid)
    var status: Int32?
    if let ended = exit.wait(timeout: timeout) {
        status = ended.signaled ? 128 + ended.code : ended.code
    } else {
        kill(pid, SIGKILL)
        exit.wait(timeout: 10)
    }
    out.waitForEOF(timeout: 2)
    err.waitForEOF(timeout: 2)
    return ProcessOutcome(status: status, stdout: out.text, stderr: err.text)
}

/// Writing a child's stdin after it exited must fail with EPIPE, not kill the test runner.
let ignoreSIGPIPEInTests: Void = {
    _ = signal(SIGPIPE, SIG_IGN)
}()
