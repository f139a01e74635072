import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Watches a child's exit with waitpid(2) itself instead of trusting only Foundation.
///
/// Foundation's `Process` learns that a child exited from SIGCHLD. In a test process running many
/// children at once that signal has been seen to go missing: children left as zombies,
/// `isRunning` true for ever, `waitUntilExit()` never returning, and the whole suite hung. This
/// reaps the pid with `WNOHANG`; when Foundation reaped it first (ECHILD), Foundation's figures
/// are used.
final class ChildExit: @unchecked Sendable {
    // @unchecked: `reaped` is guarded by `lock`.
    /// The `Process` that started it, when one did (it may reap the child first; its pid is read
    /// once it runs).
    let process: Process?
    private let spawned: pid_t
    private let lock = NSLock()
    private var reaped: (code: Int32, signaled: Bool)?

    var pid: pid_t { process?.processIdentifier ?? spawned }

    init(_ process: Process) {
        self.process = process
        spawned = 0
    }

    /// A child `Spawn` started: nothing else reaps it.
    init(pid: pid_t) {
        spawned = pid
        process = nil
    }

    /// How the child ended: its exit code, or the signal that killed it; nil while it runs.
    func poll() -> (code: Int32, signaled: Bool)? {
        lock.withLock {
            if let reaped { return reaped }
            var raw: Int32 = 0
            let result = waitpid(pid, &raw, WNOHANG)
            if result == pid {
                // The wait status: a signal number in the low 7 bits, else the exit code above them.
                let signal = raw & 0x7f
                reaped = signal == 0 ? ((raw >> 8) & 0xff, false) : (signal, true)
            } else if result == -1 && errno == ECHILD, let process, !process.isRunning {
                reaped = (process.terminationStatus, process.terminationReason == .uncaughtSignal)
            }
            return reaped
        }
    }

    var isRunning: Bool { poll() == nil }

    /// Polls until the child ended or `timeout` seconds passed.
    @discardableResult
    func wait(timeout: Double) -> (code: Int32, signaled: Bool)? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let ended = poll() { return ended }
            if Date() >= deadline { return nil }
            usleep(5_000)
        }
    }
}
