import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One request and its whole answer over a fresh TCP connection, on the caller's thread, within a
/// deadline: for a client that talks to a service now and then (the daemon's coordinator and
/// etcd), never for an event loop's queue. The peer ends its answer by closing (HTTP/1.1 with
/// `Connection: close`); an answer longer than `maxBytes` is an error, so nothing is buffered
/// without a bound.
public enum Exchange {
    public static func run(with address: SocketAddress, sending request: [UInt8], timeout seconds: Double, maxBytes: Int) throws(Errno) -> [UInt8] {
        let deadline = now() + UInt64(max(0.001, min(seconds, 3600)) * 1e9)
        let fd = try Syscall.socket(domain: address.family, type: Int32(SOCK_STREAM.rawValue))
        defer { Syscall.close(fd) }
        if case .wouldBlock = try Syscall.connect(fd, address) {
            try wait(fd, for: Int16(POLLOUT), until: deadline, call: "connect")
            let pending = try Syscall.pendingError(fd)
            if pending != 0 { throw Errno(pending, call: "connect") }
        }
        var sent = 0
        while sent < request.count {
            let result = try request.withUnsafeBytes { raw in
                Result { () throws(Errno) in try Syscall.send(fd, UnsafeRawBufferPointer(rebasing: raw[sent...])) }
            }.get()
            switch result {
            case .processed(let n): sent += n
            case .wouldBlock: try wait(fd, for: Int16(POLLOUT), until: deadline, call: "send")
            }
        }
        var answer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let result = try chunk.withUnsafeMutableBytes { raw in Result { () throws(Errno) in try Syscall.receive(fd, into: raw) } }.get()
            switch result {
            case .processed(0):
                return answer
            case .processed(let n):
                guard answer.count + n <= maxBytes else { throw Errno(EMSGSIZE, call: "recv (an answer over \(maxBytes) bytes)") }
                answer.append(contentsOf: chunk[0..<n])
            case .wouldBlock:
                try wait(fd, for: Int16(POLLIN), until: deadline, call: "recv")
            }
        }
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// Waits until `fd` is ready for `events`, or throws ETIMEDOUT at `deadline`.
    private static func wait(_ fd: Int32, for events: Int16, until deadline: UInt64, call: String) throws(Errno) {
        while true {
            let current = now()
            guard current < deadline else { throw Errno(ETIMEDOUT, call: call) }
            var entry = pollfd(fd: fd, events: events, revents: 0)
            let milliseconds = Int32(clamping: (deadline - current + 999_999) / 1_000_000)
            let ready = try Syscall.retrying("poll") { poll(&entry, 1, milliseconds) }
            if ready > 0 { return }
        }
    }
}
