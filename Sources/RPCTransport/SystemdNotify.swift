#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The service manager's notification socket (`$NOTIFY_SOCKET`), spoken without libsystemd:
/// one datagram of `KEY=VALUE` lines per message (`READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`).
///
/// Sending never blocks and never fails loudly: systemd not listening must not stop the daemon.
public final class SystemdNotifier: Sendable {
    public let path: String
    private let fd: Int32

    /// Nil when `$NOTIFY_SOCKET` is unset or empty (not run by systemd with Type=notify).
    public init?(environment: [String: String]) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty,
            let fd = try? Syscall.socket(domain: AF_UNIX, type: Int32(SOCK_DGRAM.rawValue))
        else { return nil }
        self.path = path
        self.fd = fd
    }

    deinit { Syscall.close(fd) }

    /// Sends `state` (e.g. "READY=1\nSTATUS=serving"); returns the error, if any, for the caller to log.
    @discardableResult
    public func notify(_ state: String) -> Errno? {
        do {
            try Syscall.sendDatagram(fd, Array(state.utf8), toUnixPath: path)
            return nil
        } catch {
            return error
        }
    }

    /// The watchdog interval asked for by `$WATCHDOG_USEC` (for this process, per `$WATCHDOG_PID`);
    /// pings go at half of it. Nil when no watchdog is set.
    public static func watchdogInterval(environment: [String: String]) -> Double? {
        guard let text = environment["WATCHDOG_USEC"], let usec = UInt64(text), usec > 0 else { return nil }
        if let pid = environment["WATCHDOG_PID"], !pid.isEmpty, pid != String(getpid()) { return nil }
        return Double(usec) / 1_000_000
    }
}
