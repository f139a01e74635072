import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A TCP listener on 127.0.0.1:0 that the test drives by hand: it may never accept, never answer,
/// or send the client requests of its own. Blocking calls are bounded by poll timeouts; from async
/// tests, call them through `offPool` so they do not hold a thread of the concurrency pool.
final class FakePeer: @unchecked Sendable {
    // @unchecked: a test uses it from one place at a time (each blocking call awaited before the next).
    let listenFD: Int32
    let port: Int
    private(set) var peerFD: Int32 = -1

    init() throws {
        _ = ignoreSIGPIPEInTests
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        listenFD = fd
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var addr = loopbackAddress(port: 0)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            closeOwned(fd, "FakePeer (listener)")  // port is unset: no deinit runs after this throw
            throw HarnessError("bind/listen: errno \(errno)")
        }
        var out = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &out) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        port = Int(UInt16(bigEndian: out.sin_port))
    }

    deinit {
        closeOwned(peerFD, "FakePeer (accepted)")
        closeOwned(listenFD, "FakePeer (listener)")
    }

    /// Accepts the client (within `timeout` seconds).
    func accept(timeout: Double = 5) throws {
        guard wait(listenFD, timeout) else { throw HarnessError("no client connected within \(timeout) s") }
        peerFD = Glibc.accept(listenFD, nil, nil)
        guard peerFD >= 0 else { throw HarnessError("accept: errno \(errno)") }
    }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        let n = bytes.withUnsafeBytes { Glibc.send(peerFD, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard n == bytes.count else { throw HarnessError("send: \(n) of \(bytes.count) bytes, errno \(errno)") }
    }

    /// Everything the client sent within `timeout` seconds (stops early at EOF).
    func received(within timeout: Double) -> String {
        var data: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65536)
        while Date() < deadline {
            guard wait(peerFD, deadline.timeIntervalSinceNow) else { break }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(peerFD, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            data += buffer[0..<n]
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Reads until one full line arrived (within `timeout` seconds: generous, because the suite runs
    /// its tests side by side, and again under the thread sanitizer).
    func readLine(timeout: Double = 30) throws -> String {
        var data: [UInt8] = []
        let deadline = Date().addingTimeInterval(timeout)
        var byte: UInt8 = 0
        while Date() < deadline, wait(peerFD, deadline.timeIntervalSinceNow), Glibc.read(peerFD, &byte, 1) == 1 {
            if byte == UInt8(ascii: "\n") { return String(decoding: data, as: UTF8.self) }
            data.append(byte)
        }
        throw HarnessError("no full line from the client within \(timeout) s (got \(String(decoding: data, as: UTF8.self)))")
    }

    func closePeer() {
        closeOwned(peerFD, "FakePeer (accepted)")
        peerFD = -1
    }

    private func wait(_ fd: Int32, _ timeout: Double) -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&pfd, 1, Int32(max(0, timeout * 1000))) == 1
    }
}

/// Starts a daemon, runs the async `body`, then checks the daemon did not die during the test.
func withDaemonAsync<R>(_ body: (DaemonProcess) async throws -> R) async throws -> R {
    let daemon = try DaemonProcess()
    defer { daemon.stop() }
    let result: R
    do {
        result = try await body(daemon)
    } catch {
        throw HarnessError("\(error)\n--- rpcd stderr (tail) ---\n\(daemon.stderrTail())")
    }
    if !daemon.isRunning {
        throw HarnessError("rpcd died during the test (\(daemon.exitDescription.text)).\n--- rpcd stderr (tail) ---\n\(daemon.stderrTail())")
    }
    return result
}

extension DaemonProcess {
    /// SIGSTOP, then waits until the kernel reports the process stopped (state T), so a request
    /// sent after this surely stays unanswered.
    func pause() throws {
        signal(SIGSTOP)
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                let close = text.lastIndex(of: ")"),
                text[text.index(after: close)...].split(separator: " ").first == "T"
            {
                return
            }
            usleep(1_000)
        }
        throw HarnessError("rpcd did not stop within 5 s of SIGSTOP")
    }

    /// Waits until the kernel holds unread bytes on a connection to this daemon's port (a paused
    /// daemon's: a request was surely sent, not still waiting in the client). A fixed sleep lost
    /// that race when the whole suite loaded both cores.
    func waitForUnreadRequest(timeout: Double = 10) async throws {
        let port = String(format: ":%04X", self.port)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
                // "sl local_address rem_address st tx_queue:rx_queue …", addresses and queues in hex;
                // st 01 is ESTABLISHED (a listener's rx_queue counts connections instead).
                for line in readWholeProcFile(table).split(separator: "\n").dropFirst() {
                    let fields = line.split(separator: " ")
                    guard fields.count > 4, fields[1].hasSuffix(port), fields[3] == "01",
                        let unread = fields[4].split(separator: ":").last.flatMap({ Int($0, radix: 16) }), unread > 0
                    else { continue }
                    return
                }
            }
            try await Task.sleep(for: .milliseconds(5))
        }
        throw HarnessError("no request reached the paused rpcd on port \(self.port) within \(timeout) s")
    }
}

/// A /proc file read to its end. Its size reads 0, and `String(contentsOfFile:)` stops after the
/// first read, which holds only the first few dozen sockets of a busy table.
func readWholeProcFile(_ path: String) -> String {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "" }
    defer { closeOwned(fd, "readWholeProcFile") }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { break }
        bytes += chunk[0..<n]
    }
    return String(decoding: bytes, as: UTF8.self)
}
