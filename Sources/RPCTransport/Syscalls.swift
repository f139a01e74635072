import CRPCLinux
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

// MARK: - Addresses, threads and flags: the pointers the calls above need, in one place

extension SocketAddress {
    /// The address as the `sockaddr` and length bind(2), connect(2) and sendto(2) take.
    func withSockAddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws(Errno) -> R) throws(Errno) -> R {
        switch self {
        case .ipv4(var address):
            return try withUnsafePointer(to: &address) { pointer throws(Errno) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr throws(Errno) in
                    try body(sockaddr, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        case .ipv6(var address):
            return try withUnsafePointer(to: &address) { pointer throws(Errno) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr throws(Errno) in
                    try body(sockaddr, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        case .unix(let path):
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            guard bytes.count <= Self.maxUnixPathBytes else { throw Errno(ENAMETOOLONG, call: "unix socket \(path)") }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in bytes.enumerated() { raw[index] = byte }
            }
            let length = socklen_t((MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path) ?? 2) + bytes.count + 1)
            return try withUnsafePointer(to: &address) { pointer throws(Errno) in
                try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr throws(Errno) in
                    try body(sockaddr, length)
                }
            }
        }
    }
}

extension Syscall {
    /// Starts a detached thread that runs `body` (pthread_create).
    static func startDetachedThread(_ body: @escaping @Sendable () -> Void) throws(Errno) {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(ThreadStart(body)).toOpaque()
        let result = pthread_create(&thread, nil, { context in
            guard let context else { return nil }
            Unmanaged<ThreadStart>.fromOpaque(context).takeRetainedValue().body()
            return nil
        }, context)
        guard result == 0 else {
            Unmanaged<ThreadStart>.fromOpaque(context).release()
            throw Errno(result, call: "pthread_create")
        }
        pthread_detach(thread)
    }
}

/// What a new thread runs, passed through pthread_create's context pointer.
private final class ThreadStart: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// A flag raised from any thread and taken by one (`crpc_wake_flag_*`, atomic), on a cache line
/// of its own: the thread that takes it reads it on every event.
final class WakeFlag: @unchecked Sendable {
    // @unchecked: the word is only touched through the atomic C functions.
    private let word: UnsafeMutablePointer<Int32>

    init() {
        word = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 64).initializeMemory(as: Int32.self, repeating: 0, count: 16)
    }

    deinit { UnsafeMutableRawPointer(word).deallocate() }

    /// Raises the flag: true if it was down (the caller then signals the taker).
    @inline(__always) func raise() -> Bool { crpc_wake_flag_raise(word) == 0 }
    @inline(__always) var isRaised: Bool { crpc_wake_flag_raised(word) != 0 }
    /// Lowers the flag: true if it was raised.
    @inline(__always) func take() -> Bool { crpc_wake_flag_take(word) != 0 }
}

/// Typed wrappers for the unix datagram socket of sd_notify and for inspecting inherited sockets.
extension Syscall {
    /// Sends one datagram to the unix socket `path`. A leading `@` names an abstract socket: it
    /// becomes a NUL byte and the address length is offsetof(sun_path) + name length, with no
    /// trailing NUL (getting this wrong is faljse/SDNotify#7).
    public static func sendDatagram(_ fd: Int32, _ bytes: [UInt8], toUnixPath path: String) throws(Errno) {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var name = Array(path.utf8)
        let abstract = name.first == UInt8(ascii: "@")
        if abstract { name[0] = 0 }
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        // A filesystem path needs room for its terminating NUL; an abstract name does not have one.
        guard !name.isEmpty, name.count <= (abstract ? capacity : capacity - 1) else {
            throw Errno(ENAMETOOLONG, call: "sendto(\(path))")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in name.enumerated() { raw[index] = byte }
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path) ?? 2
        let length = socklen_t(pathOffset + name.count + (abstract ? 0 : 1))
        // Array.withUnsafeBytes only rethrows untyped errors: pass the result out as a value.
        let result: Result<Int, Errno> = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                bytes.withUnsafeBytes { raw in
                    Result { () throws(Errno) in
                        try retrying("sendto(\(path))") { sendto(fd, raw.baseAddress, raw.count, noSignal, sockaddr, length) }
                    }
                }
            }
        }
        _ = try result.get()
    }

    /// An integer socket option (e.g. SO_TYPE, SO_ACCEPTCONN).
    public static func intOption(_ fd: Int32, level: Int32, name: Int32) throws(Errno) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying("getsockopt") { getsockopt(fd, level, name, &value, &length) }
        return value
    }
}

/// Who is at the other end of a Unix stream socket, as the kernel vouches (`SO_PEERCRED`).
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public init(pid: Int32, uid: UInt32, gid: UInt32) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
    }
}

#if os(Linux)
extension Syscall {
    /// The peer's pid, uid and gid at connect time (`getsockopt(SO_PEERCRED)`; `struct ucred`'s
    /// layout, which Swift's Glibc module does not export).
    public static func peerCredentials(_ fd: Int32) throws(Errno) -> PeerCredentials {
        var credentials = PeerCredentials(pid: 0, uid: UInt32.max, gid: UInt32.max)
        var length = socklen_t(MemoryLayout<PeerCredentials>.size)
        _ = try retrying("getsockopt(SO_PEERCRED)") { getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) }
        return credentials
    }
}
#endif

extension Syscall {
    /// The uid of the user called `name` (`getpwnam_r`), or nil if there is none. The buffer grows
    /// on ERANGE; EINTR is retried. getpwnam_r reports errors as its return value, not in `errno`.
    public static func userID(named name: String) throws(Errno) -> UInt32? {
        var size = max(1024, Int(sysconf(Int32(_SC_GETPW_R_SIZE_MAX))))
        while true {
            var entry = passwd()
            var result: UnsafeMutablePointer<passwd>?
            var buffer = [CChar](repeating: 0, count: size)
            let code = getpwnam_r(name, &entry, &buffer, size, &result)
            switch code {
            case 0: return result == nil ? nil : entry.pw_uid
            case EINTR: continue
            case ERANGE where size < 1 << 20: size *= 2
            // getpwnam_r(3): "The given name or uid was not found" may also come as these.
            case ENOENT, ESRCH, EBADF, EPERM: return nil
            default: throw Errno(code, call: "getpwnam_r(\(name))")
            }
        }
    }
}
