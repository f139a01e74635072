#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An errno value from a failed system call.
public struct Errno: Error, Hashable, Sendable, CustomStringConvertible {
    public var code: Int32
    /// The call that failed, for messages.
    public var call: String

    public init(_ code: Int32, call: String) {
        self.code = code
        self.call = call
    }

    public var description: String { "\(call): \(String(cString: strerror(code))) (errno \(code))" }
}

/// A non-blocking call either did something or would have blocked (swift-nio `IOResult`).
public enum IOResult<T: Sendable>: Sendable {
    case processed(T)
    case wouldBlock
}

/// The one place libc is called from: -1 becomes a thrown `Errno`, EINTR is retried
/// (swift-system `valueOrErrno`). Callers never read `errno` themselves.
public enum Syscall {
    /// Runs a libc call: -1 becomes a thrown `Errno` naming `call`, EINTR is retried. For calls
    /// outside this file too (the daemon's file I/O), so every libc error is built the same way.
    @inline(__always)
    public static func retrying<T: FixedWidthInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(Errno) -> T {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = errno
            if code == EINTR { continue }
            throw Errno(code, call: call())
        }
    }

    @inline(__always)
    static func nonBlocking<T: FixedWidthInteger & Sendable>(_ call: String, _ body: () -> T) throws(Errno) -> IOResult<T> {
        while true {
            let result = body()
            if result != -1 { return .processed(result) }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            throw Errno(code, call: call)
        }
    }

    public static func socket(domain: Int32, type: Int32) throws(Errno) -> Int32 {
        #if canImport(Glibc)
        let type = type | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        return try retrying("socket") { Glibc.socket(domain, type, 0) }
        #else
        let fd = try retrying("socket") { Darwin.socket(domain, type, 0) }
        try setNonBlocking(fd)
        return fd
        #endif
    }

    public static func setNonBlocking(_ fd: Int32) throws(Errno) {
        let flags = try retrying("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        _ = try retrying("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        _ = try retrying("fcntl(F_SETFD)") { fcntl(fd, F_SETFD, FD_CLOEXEC) }
    }

    public static func setOption(_ fd: Int32, level: Int32, name: Int32, value: Int32) throws(Errno) {
        var value = value
        _ = try retrying("setsockopt") {
            setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size))
        }
    }

    public static func bind(_ fd: Int32, _ address: SocketAddress) throws(Errno) {
        _ = try address.withSockAddr { pointer, length throws(Errno) in
            try retrying("bind") { stdBind(fd, pointer, length) }
        }
    }

    public static func listen(_ fd: Int32, backlog: Int32) throws(Errno) {
        _ = try retrying("listen") { stdListen(fd, backlog) }
    }

    public static func connect(_ fd: Int32, _ address: SocketAddress) throws(Errno) -> IOResult<Int32> {
        do {
            return try address.withSockAddr { pointer, length throws(Errno) in
                try nonBlocking("connect") { stdConnect(fd, pointer, length) }
            }
        } catch let error where error.code == EINPROGRESS {
            return .wouldBlock
        }
    }

    /// Accepts one connection; the new fd is non-blocking and close-on-exec.
    public static func accept(_ fd: Int32) throws(Errno) -> IOResult<(Int32, SocketAddress?)> {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = try withUnsafeMutablePointer(to: &storage) { pointer throws(Errno) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(Errno) in
                try nonBlocking("accept") { stdAccept(fd, address, &length) }
            }
        }
        guard case .processed(let client) = result else { return .wouldBlock }
        do {
            try setNonBlocking(client)
        } catch {
            close(client)
            throw error
        }
        return .processed((client, SocketAddress(storage: storage)))
    }

    /// Reads a socket into `buffer`; `.processed(0)` is end of file. recv(2), not read(2): the
    /// same bytes, without the file layer read(2) passes through first (`vfs_read`'s checks and
    /// its fsnotify hook), ~2% of the daemon's CPU at get 50 × 1.
    public static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> IOResult<Int> {
        try nonBlocking("recv") { stdRecv(fd, buffer.baseAddress, buffer.count, 0) }
    }

    /// Sends without raising SIGPIPE.
    public static func send(_ fd: Int32, _ buffer: UnsafeRawBufferPointer) throws(Errno) -> IOResult<Int> {
        try nonBlocking("send") { stdSend(fd, buffer.baseAddress, buffer.count, noSignal) }
    }

    public static func shutdown(_ fd: Int32, how: Int32) throws(Errno) {
        _ = try retrying("shutdown") { stdShutdown(fd, how) }
    }

    /// Closes `fd`. EINTR counts as closed (Linux releases the fd either way); never retried.
    public static func close(_ fd: Int32) {
        _ = stdClose(fd)
    }

    public static func localAddress(_ fd: Int32) throws(Errno) -> SocketAddress {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = try withUnsafeMutablePointer(to: &storage) { pointer throws(Errno) in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address throws(Errno) in
                try retrying("getsockname") { getsockname(fd, address, &length) }
            }
        }
        guard let address = SocketAddress(storage: storage) else { throw Errno(EAFNOSUPPORT, call: "getsockname") }
        return address
    }

    /// Raises the soft open-file limit to the hard one (every connection is an fd); returns the new limit.
    @discardableResult
    public static func raiseFileLimit() -> UInt64 {
        var limit = rlimit()
        #if canImport(Glibc)
        let resource = Int32(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return 0 }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(resource, &limit)
        }
        return UInt64(limit.rlim_cur)
    }

    /// Ignores SIGPIPE process-wide: a write to a closed peer is an EPIPE, not a death.
    public static func ignoreSIGPIPE() {
        _ = signal(SIGPIPE, SIG_IGN)
    }

    #if canImport(Glibc)
    static let noSignal = Int32(MSG_NOSIGNAL)
    #else
    static let noSignal: Int32 = 0
    #endif
}

// Unqualified libc names, so the wrappers above can share a name with them.
#if canImport(Glibc)
private let stdBind = Glibc.bind
private let stdListen = Glibc.listen
private let stdConnect = Glibc.connect
private let stdAccept = Glibc.accept
private let stdRecv = Glibc.recv
private let stdSend = Glibc.send
private let stdShutdown = Glibc.shutdown
private let stdClose = Glibc.close
#else
private let stdBind = Darwin.bind
private let stdListen = Darwin.listen
private let stdConnect = Darwin.connect
private let stdAccept = Darwin.accept
private let stdRecv = Darwin.recv
private let stdSend = Darwin.send
private let stdShutdown = Darwin.shutdown
private let stdClose = Darwin.close
#endif
