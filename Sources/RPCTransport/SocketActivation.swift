#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Sockets passed by systemd (socket activation): when `$LISTEN_PID` is this process, fds
/// 3 ..< 3 + `$LISTEN_FDS` are listening sockets to serve instead of binding our own.
public enum SocketActivation {
    public static let firstFD: Int32 = 3

    /// The inherited listening fds (empty when not socket-activated). Unsets `LISTEN_PID`,
    /// `LISTEN_FDS` and `LISTEN_FDNAMES` so nothing started later believes they are its own.
    /// Throws when an inherited fd is not a listening stream socket.
    public static func takeListeners() throws(Errno) -> [Int32] {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pidText = getenv("LISTEN_PID").map({ String(cString: $0) }), Int32(pidText) == getpid(),
            let countText = getenv("LISTEN_FDS").map({ String(cString: $0) }), let count = Int32(countText), count > 0
        else { return [] }
        let fds = Array(firstFD..<(firstFD + count))
        for fd in fds {
            let type = try Syscall.intOption(fd, level: SOL_SOCKET, name: SO_TYPE)
            let listening = try Syscall.intOption(fd, level: SOL_SOCKET, name: SO_ACCEPTCONN)
            guard type == Int32(SOCK_STREAM.rawValue), listening != 0 else {
                throw Errno(ENOTSOCK, call: "socket activation: fd \(fd) is not a listening stream socket")
            }
        }
        return fds
    }
}
