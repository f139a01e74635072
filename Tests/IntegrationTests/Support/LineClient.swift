import Foundation
#if canImport(Glibc)
import Glibc
#endif

enum LineClientError: Error, CustomStringConvertible, Equatable {
    case connect(errno: Int32)
    case timeout(String)
    case closedByPeer(errno: Int32)
    case truncated(String)
    case failed(String, errno: Int32)

    var description: String {
        switch self {
        case .connect(let e): "connect failed: \(String(cString: strerror(e)))"
        case .timeout(let what): "timed out waiting to \(what)"
        case .closedByPeer(let e): "connection closed by peer (\(String(cString: strerror(e))))"
        case .truncated(let partial): "EOF in the middle of a line: \(partial.prefix(200))"
        case .failed(let what, let e): "\(what) failed: \(String(cString: strerror(e)))"
        }
    }
}

/// How a read loop ended.
enum StreamEnd: Equatable {
    case eof, reset, timeout
}

/// A blocking TCP client speaking newline-delimited lines. Every blocking call is bounded by
/// SO_RCVTIMEO / SO_SNDTIMEO so a broken daemon fails a test instead of hanging it. Sends use
/// MSG_NOSIGNAL. Not thread-safe: one client per thread.
final class LineClient {
    let fd: Int32
    private var buffer: [UInt8] = []
    private var start = 0  // first unconsumed byte
    private var scanFrom = 0  // no '\n' in buffer[start..<scanFrom]
    private var closed = false

    init(
        port: Int, host: String = "127.0.0.1", timeout: Double = 10,
        receiveBufferBytes: Int32? = nil
    ) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw LineClientError.failed("socket", errno: errno) }
        self.fd = fd
        if let size = receiveBufferBytes {  // before connect, so the window is negotiated small
            var value = size
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, socklen_t(MemoryLayout<Int32>.size))
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        setReceiveTimeout(timeout)
        setSendTimeout(timeout)

        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &addr.sin_addr) == 1 else {
            close()  // marks it closed: a class whose init throws once fully initialized still runs deinit
            throw LineClientError.failed("inet_pton(\(host))", errno: EINVAL)
        }
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if rc != 0 {
            let e = errno
            close()  // not Glibc.close: deinit runs after this throw and would close the number again
            throw LineClientError.connect(errno: e)
        }
    }

    deinit { close() }

    func setReceiveTimeout(_ seconds: Double) { setTimeout(SO_RCVTIMEO, seconds) }
    func setSendTimeout(_ seconds: Double) { setTimeout(SO_SNDTIMEO, seconds) }

    private func setTimeout(_ option: Int32, _ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(fd, SOL_SOCKET, option, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    // MARK: sending

    /// Sends the string's UTF-8 bytes as they are (add "\n" yourself).
    func send(_ text: String) throws { try sendBytes(Array(text.utf8)) }

    /// Sends all bytes (looping over partial sends).
    func sendBytes(_ bytes: [UInt8]) throws {
        try bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n > 0 {
                    offset += n
                    continue
                }
                let e = errno
                if n < 0 && e == EINTR { continue }
                if e == EAGAIN || e == EWOULDBLOCK { throw LineClientError.timeout("send (peer not reading)") }
                if e == EPIPE || e == ECONNRESET { throw LineClientError.closedByPeer(errno: e) }
                throw LineClientError.failed("send", errno: e)
            }
        }
    }

    /// Sends each byte with its own send(2) call (TCP_NODELAY is on, so they leave as separate segments).
    func sendOneByteAtATime(_ text: String, pauseMicroseconds: UInt32 = 0) throws {
        for byte in text.utf8 {
            try sendBytes([byte])
            if pauseMicroseconds > 0 { usleep(pauseMicroseconds) }
        }
    }

    /// Sends `line + "\n"`.
    func sendLine(_ line: String) throws { try send(line + "\n") }

    func shutdownWrite() { Glibc.shutdown(fd, Int32(SHUT_WR)) }

    func close() {
        if !closed {
            closed = true
            closeOwned(fd, "LineClient")
        }
    }

    /// Closes with SO_LINGER 0, so the kernel sends RST instead of FIN.
    func abort() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    // MARK: receiving

    /// The next line without its "\n", or nil at EOF. Throws on timeout, reset, or EOF mid-line.
    func readLine() throws -> String? {
        while true {
            if let line = takeBufferedLine() { return line }
            switch try fill() {
            case .data: continue
            case .eof:
                if start == buffer.count { return nil }
                throw LineClientError.truncated(String(decoding: buffer[start...], as: UTF8.self))
            }
        }
    }

    /// The next line; throws if the connection ended instead.
    func expectLine() throws -> String {
        guard let line = try readLine() else { throw LineClientError.closedByPeer(errno: 0) }
        return line
    }

    func readLines(_ count: Int) throws -> [String] {
        var lines: [String] = []
        lines.reserveCapacity(count)
        for _ in 0..<count { lines.append(try expectLine()) }
        return lines
    }

    /// Sends one line and reads one line.
    func request(_ line: String) throws -> String {
        try sendLine(line)
        return try expectLine()
    }

    /// True if nothing at all arrives within `seconds` (no bytes, no EOF).
    func isSilent(for seconds: Double) -> Bool {
        if start < buffer.count { return false }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let rc = poll(&pfd, 1, Int32(seconds * 1000))
        return rc == 0
    }

    /// Reads and discards everything until the peer closes; returns the number of complete lines
    /// and bytes seen and how it ended (EOF, reset, or `timeout` of silence).
    func drainUntilClosed(silenceTimeout: Double, stopAfterLines: Int = .max) -> (lines: Int, bytes: Int, end: StreamEnd) {
        setReceiveTimeout(silenceTimeout)
        var lines = 0
        var bytes = buffer.count - start
        lines += buffer[start...].reduce(0) { $1 == 10 ? $0 + 1 : $0 }
        buffer.removeAll()
        start = 0
        scanFrom = 0
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                bytes += n
                lines += chunk[0..<n].reduce(0) { $1 == 10 ? $0 + 1 : $0 }
                if lines >= stopAfterLines { return (lines, bytes, .timeout) }
                continue
            }
            if n == 0 { return (lines, bytes, .eof) }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { return (lines, bytes, .timeout) }
            return (lines, bytes, .reset)
        }
    }

    private enum Fill { case data, eof }

    private func takeBufferedLine() -> String? {
        let from = max(scanFrom, start)
        let count = buffer.count
        guard from < count else { return nil }
        let found: Int? = buffer.withUnsafeBufferPointer { buf in
            guard let hit = memchr(buf.baseAddress! + from, 10, count - from) else { return nil }
            return buf.baseAddress!.distance(to: hit.assumingMemoryBound(to: UInt8.self))
        }
        guard let i = found else {
            scanFrom = count
            return nil
        }
        let line = String(decoding: buffer[start..<i], as: UTF8.self)
        start = i + 1
        scanFrom = start
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
            scanFrom = 0
        }
        return line
    }

    private func fill() throws -> Fill {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            scanFrom -= start
            start = 0
        }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                buffer.append(contentsOf: chunk[0..<n])
                return .data
            }
            if n == 0 { return .eof }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK { throw LineClientError.timeout("read a line") }
            if e == ECONNRESET { throw LineClientError.closedByPeer(errno: e) }
            throw LineClientError.failed("recv", errno: e)
        }
    }
}
