import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Starts a program with posix_spawn(3), as `Process.run()` does, but without listing
/// /proc/self/fd: on this toolchain that listing copies each entry's whole 256-byte name and reads
/// past the end of glibc's readdir buffer (swift-corelibs-foundation PR #5472), which kills the
/// test process with SIGSEGV when the buffer ends a thread's heap (seen about one suite in five).
/// Every child the harness starts, but the socket-activated one (its descriptors are passed on purpose), starts here.
///
/// The child gets `stdin`, `stdout` and `stderr` (nil: /dev/null), no other descriptor of the
/// test process (`addclosefrom`), and a process group of its own, as `Process` gives it. Reap it
/// with `ChildExit(pid:)`.
enum Spawn {
    static func start(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil
    ) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (fd, target) in [(stdin, Int32(0)), (stdout, 1), (stderr, 2)] {
            if let fd {
                posix_spawn_file_actions_adddup2(&actions, fd, target)
            } else {
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            }
        }
        guard let closeFrom = Self.addCloseFrom else { throw HarnessError("this C library has no posix_spawn_file_actions_addclosefrom_np (glibc 2.34 or newer)") }
        _ = closeFrom(&actions, 3)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETPGROUP))

        let argv = [executable] + arguments
        let envp = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let result = withCStrings(argv) { argv in
            withCStrings(envp) { envp in posix_spawn(&pid, executable, &actions, &attributes, argv, envp) }
        }
        guard result == 0 else { throw HarnessError("cannot start \(executable): \(String(cString: strerror(result)))") }
        return pid
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), which the Glibc module does not
    /// declare.
    private static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// `body` with a NULL-terminated array of C copies of `strings`.
    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> R) -> R {
        let copies: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) } + [nil]
        defer { for copy in copies { free(copy) } }
        return body(copies)
    }
}
