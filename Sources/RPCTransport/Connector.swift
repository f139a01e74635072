import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Syscall {
    /// The pending error of a socket (`SO_ERROR`): 0 once a non-blocking connect succeeded.
    public static func pendingError(_ fd: Int32) throws(Errno) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying("getsockopt(SO_ERROR)") { getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) }
        return value
    }
}

/// Opens a non-blocking TCP connection: `connect` returns EINPROGRESS, a write source says when it
/// finished, `SO_ERROR` says how. The result is delivered once, on `queue`: a connected,
/// non-blocking fd (the caller owns it) or the `Errno` of the failure (ETIMEDOUT after `timeout`).
public final class Connector: @unchecked Sendable {
    // @unchecked: `fd`, `source`, `timer` and `completion` are touched only on `queue`.
    private let queue: DispatchQueue
    private var fd: Int32 = -1
    private var source: (any DispatchSourceWrite)?
    private var timer: (any DispatchSourceTimer)?
    private var completion: (@Sendable (Result<Int32, Errno>) -> Void)?

    private init(queue: DispatchQueue, completion: @escaping @Sendable (Result<Int32, Errno>) -> Void) {
        self.queue = queue
        self.completion = completion
    }

    public static func connect(
        to address: SocketAddress, queue: DispatchQueue, timeout: DispatchTimeInterval,
        completion: @escaping @Sendable (Result<Int32, Errno>) -> Void
    ) {
        let connector = Connector(queue: queue, completion: completion)
        queue.async { connector.start(address, timeout: timeout) }
    }

    private func start(_ address: SocketAddress, timeout: DispatchTimeInterval) {
        dispatchPrecondition(condition: .onQueue(queue))
        do {
            fd = try Syscall.socket(domain: address.family, type: Int32(SOCK_STREAM.rawValue))
            if address.family == AF_INET || address.family == AF_INET6 {
                // Small request lines must not wait for an ACK (Nagle + delayed ACK = 40 ms stalls).
                try Syscall.setOption(fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1)
            }
            if case .processed = try Syscall.connect(fd, address) { return finish(.success(fd)) }
        } catch {
            return finish(.failure(error))
        }
        let source = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [self] in writable() }
        self.source = source
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + timeout)
        timer.setEventHandler { [self] in finish(.failure(Errno(ETIMEDOUT, call: "connect"))) }
        self.timer = timer
        source.resume()
        timer.resume()
    }

    private func writable() {
        do {
            let code = try Syscall.pendingError(fd)
            finish(code == 0 ? .success(fd) : .failure(Errno(code, call: "connect")))
        } catch {
            finish(.failure(error))
        }
    }

    /// Delivers the result once; on failure the fd is closed after the write source's cancel
    /// handler ran (never before: no stale epoll registration).
    private func finish(_ result: Result<Int32, Errno>) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let completion else { return }
        self.completion = nil
        timer?.cancel()
        timer = nil
        let fd = self.fd
        if let source {
            self.source = nil
            source.setCancelHandler {
                if case .failure = result { Syscall.close(fd) }
                completion(result)
            }
            source.cancel()
        } else {
            if case .failure = result, fd >= 0 { Syscall.close(fd) }
            completion(result)
        }
    }
}
