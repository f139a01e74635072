import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct LeaderError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A leader played by hand on 127.0.0.1:0 for one client: the test sends it lines as they would
/// come from rpcd, and a thread of its own collects every line the client sends (subscribe,
/// acknowledgements, calls) until EOF. Blocking calls are bounded by poll timeouts; call them
/// through `offPool` from async tests.
final class FakeLeader: @unchecked Sendable {
    // @unchecked: `lines` and `ended` are guarded by `condition`; `peerFD` is set once by `accept`
    // before the collecting thread starts, and the test sends from one place at a time.
    let port: Int
    private let listenFD: Int32
    private var peerFD: Int32 = -1
    private let condition = NSCondition()
    private var lines: [String] = []
    private var ended = false

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ready = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 4) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard fd >= 0, ready else {
            if fd >= 0 { close(fd) }
            throw LeaderError("could not listen on 127.0.0.1:0: errno \(errno)")
        }
        listenFD = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit {
        // The fd is closed here only, once the collecting thread is done with it: closed any
        // earlier, its number could be reused by another test's socket, which this leader's
        // later sends, hang-up or shutdown would then hit (tests run in parallel).
        if peerFD >= 0 {
            shutdown(peerFD, Int32(SHUT_RDWR))
            _ = try? wait(5, "the collecting thread's end") { ended ? true : nil }
            close(peerFD)
        }
        close(listenFD)
    }

    /// Accepts the client (its connect completed in the backlog already) and starts collecting.
    func accept(timeout: Double = 10) throws {
        var pfd = pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, Int32(timeout * 1000)) == 1 else { throw LeaderError("no client within \(timeout) s") }
        peerFD = Glibc.accept(listenFD, nil, nil)
        guard peerFD >= 0 else { throw LeaderError("accept: errno \(errno)") }
        let fd = peerFD
        Thread.detachNewThread { [self] in collect(fd) }
    }

    private func collect(_ fd: Int32) {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            pending += buffer[0..<n]
            var found: [String] = []
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                found.append(String(decoding: pending[..<newline], as: UTF8.self))
                pending.removeSubrange(...newline)
            }
            condition.withLock {
                lines += found
                condition.broadcast()
            }
        }
        condition.withLock {
            ended = true
            condition.broadcast()
        }
    }

    /// Sends `text` whole (blocking while the client does not read).
    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(peerFD, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw LeaderError("send: errno \(errno) after \(offset) of \(bytes.count) bytes") }
            offset += n
        }
    }

    /// Closes the connection as a dying leader would.
    func hangUp() { shutdown(peerFD, Int32(SHUT_RDWR)) }

    /// Every line the client sent so far.
    var received: [String] { condition.withLock { lines } }

    /// Waits until the client sent a line `matching` (within `timeout` seconds) and returns it.
    func line(matching: (String) -> Bool, timeout: Double = 10) throws -> String {
        try wait(timeout, "a line from the client that matches") { lines.first(where: matching) }
    }

    /// Waits until the client sent `count` lines and returns them.
    func lines(_ count: Int, timeout: Double = 10) throws -> [String] {
        try wait(timeout, "\(count) lines from the client") { lines.count >= count ? lines : nil }
    }

    /// Whether the client closed the connection within `timeout` seconds.
    func closedByClient(timeout: Double = 10) -> Bool {
        (try? wait(timeout, "EOF") { ended ? true : nil }) == true
    }

    private func wait<T>(_ timeout: Double, _ what: String, _ found: () -> T?) throws -> T {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let value = found() { return value }
            guard !ended, condition.wait(until: deadline) else {
                throw LeaderError("no \(what) within \(timeout) s\(ended ? " (the client closed)" : ""); got \(lines.suffix(5))")
            }
        }
    }
}
