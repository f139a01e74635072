import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A datagram socket standing in for systemd's `$NOTIFY_SOCKET`: bound to an abstract name
/// (`@rpcd-test-…`, so the daemon's `@` handling is exercised) and read with a timeout.
final class NotifySocket {
    let fd: Int32
    /// The value for `$NOTIFY_SOCKET`.
    let address: String
    /// Every datagram received so far, in order.
    private(set) var messages: [String] = []

    init() throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket(AF_UNIX, SOCK_DGRAM) failed: errno \(errno)") }
        let name = "rpcd-test-\(UUID().uuidString)"
        address = "@" + name
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = [UInt8(0)] + Array(name.utf8)
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \sockaddr_un.sun_path)! + bytes.count)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard rc == 0 else {  // deinit closes fd: it runs when a fully initialized object's init throws
            throw HarnessError("bind(\(address)) failed: errno \(errno)")
        }
    }

    deinit { closeOwned(fd, "NotifySocket") }

    /// Receives datagrams until one contains `line` (as a whole line) or `timeout` seconds pass.
    /// Returns the datagrams received while waiting.
    @discardableResult
    func waitFor(_ line: String, timeout: Double) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [String] = []
        while Date() < deadline {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let wait = Int32(max(1, deadline.timeIntervalSinceNow * 1000))
            guard poll(&pfd, 1, wait) > 0 else { continue }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { continue }
            let message = String(decoding: buffer[0..<n], as: UTF8.self)
            messages.append(message)
            seen.append(message)
            if message.split(separator: "\n").contains(Substring(line)) { return seen }
        }
        return seen
    }

    func received(_ line: String) -> Bool {
        messages.contains { $0.split(separator: "\n").contains(Substring(line)) }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
/// 127.0.0.1:`port` (0: any free port, at bind).
func loopbackAddress(port: Int) -> sockaddr_in {
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = UInt16(clamping: port).bigEndian
    return addr
}

func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { closeOwned(fd, "freeLoopbackPort") }
    var addr = loopbackAddress(port: 0)
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ok = withUnsafeMutablePointer(to: &addr) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard ok else { throw HarnessError("could not find a free port: errno \(errno)") }
    return Int(UInt16(bigEndian: addr.sin_port))
}

/// A loopback port kept from every other test while a client retries it: bound, never listening,
/// so each connect is refused. A port a stopped daemon let go is the kernel's to hand out again,
/// and another test's daemon (listening on port 0) took one within a client's 12 s of retries.
final class PortHold {
    private let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        // The stopped daemon's closed connections may linger in TIME_WAIT on this port.
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var addr = loopbackAddress(port: port)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard bound else {
            let code = errno
            closeOwned(fd, "PortHold")
            throw HarnessError("could not hold port \(port): errno \(code)")
        }
    }

    /// A free port held the same way: connects to it are refused while this lives.
    convenience init() throws { try self.init(port: 0) }

    /// The port held (the one the kernel picked, for port 0).
    var port: Int {
        var addr = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    deinit { closeOwned(fd, "PortHold") }
}
