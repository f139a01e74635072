#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

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
