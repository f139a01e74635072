import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What rpcbench undoes however it ends (return, `exit`, `fail`, SIGINT, SIGTERM): the processes it
/// started (rpcd, redis-server) are killed and waited for, then the temporary directories it made
/// are removed. `exit` skips `defer`, so this runs from `atexit` and from the signal handlers.
enum Cleanup {
    private static let state = CleanupState()

    /// Installs the `atexit` hook and the SIGINT/SIGTERM handlers; call once, before anything is started.
    static func install() {
        atexit { Cleanup.atExit() }
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { Cleanup.exit(onSignal: signalNumber) }
            source.resume()
            state.withLock { $0.signalSources.append(source) }
        }
    }

    /// Makes an empty directory `rpcbench-[tag-]PID-RANDOM` under the temporary directory, removed at exit.
    static func makeTemporaryDirectory(tag: String? = nil) -> String {
        let name = "rpcbench-" + (tag.map { "\($0)-" } ?? "") + "\(getpid())-\(UUID().uuidString.prefix(8))"
        let path = NSTemporaryDirectory() + name
        state.withLock { $0.directories.append(path) }
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// Removes a directory made by `makeTemporaryDirectory` now (its processes must be gone).
    static func removeDirectory(_ path: String) {
        state.withLock { $0.directories.removeAll { $0 == path } }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Kills `process` at exit if it is still running. Call right after `run()`.
    static func track(_ process: Process) {
        let closed = state.withLock { state in
            state.processes.append(process)
            return state.closed
        }
        // A process started while a signal's cleanup ran would outlive it.
        if closed { Glibc.kill(process.processIdentifier, SIGKILL) }
    }

    /// Kills every tracked process still running, waits until each is gone, removes every tracked
    /// directory. Holds the lock throughout, so a second caller (exit while a signal is handled)
    /// returns only when the first is done.
    static func run() {
        state.withLock { state in
            state.closed = true
            for process in state.processes where process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            for process in state.processes { waitUntilGone(process.processIdentifier) }
            state.processes.removeAll()
            for path in state.directories { try? FileManager.default.removeItem(atPath: path) }
            state.directories.removeAll()
        }
    }

    /// The `atexit` hook. An `exit` racing a signal's cleanup (the main thread fails once the daemon
    /// it loads is killed) waits for that cleanup to end the process by the signal.
    private static func atExit() {
        if state.withLock({ $0.signalled }) {
            while true { pause() }
        }
        run()
    }

    /// Cleans up, then dies of `signalNumber` as if it had not been caught (so a shell sees 130 or 143).
    private static func exit(onSignal signalNumber: Int32) -> Never {
        FileHandle.standardError.write(Data("rpcbench: interrupted by signal \(signalNumber); stopping\n".utf8))
        state.withLock { $0.signalled = true }
        run()
        // libdispatch blocks the signal to read it from a signalfd: unblock it on this thread, then
        // raise it here with its default action.
        signal(signalNumber, SIG_DFL)
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signalNumber)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        raise(signalNumber)
        _exit(128 + signalNumber)
    }

    /// Waits (up to 2 s) until `pid` is a zombie or reaped: a directory removed earlier could
    /// meet a process still writing into it.
    private static func waitUntilGone(_ pid: Int32) {
        let deadline = nowNanoseconds() + 2_000_000_000
        while nowNanoseconds() < deadline {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.first == "Z" || fields.first == "X" { return }
            usleep(1_000)
        }
    }
}

/// The processes and directories to clean up, behind a lock.
private final class CleanupState: @unchecked Sendable {
    // @unchecked: `contents` is only touched with `lock` held.
    struct Contents {
        var processes: [Process] = []
        var directories: [String] = []
        var signalSources: [any DispatchSourceSignal] = []
        /// Set once cleanup ran: whatever is started later is killed at once.
        var closed = false
        /// Set when a signal's cleanup starts: that thread ends the process.
        var signalled = false
    }

    private let lock = NSLock()
    private var contents = Contents()

    func withLock<T>(_ body: (inout Contents) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(&contents)
    }
}
