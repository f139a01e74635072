import CRPCLinux
import Foundation
import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

@inline(__always) func nowNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// What one load thread measured.
struct LoadResult {
    var histogram = Histogram()
    var completed = 0
    var errors = 0
    var mismatches = 0
    var firstError: String?
}

/// One connection of the load: requests in flight are a FIFO (replies come back in request order).
final class LoadConnection {
    let fd: Int32
    let index: Int
    var nextSeq = 0
    /// Send times of the requests in flight, oldest first, with their sequence numbers.
    var inflight: [(seq: Int, sentAt: UInt64)] = []
    var inflightHead = 0
    var output: [UInt8] = []
    var outputStart = 0
    var input: [UInt8] = []
    var closed = false
    /// TLS over the fd, or nil for plain TCP.
    var tls: TLSSession?

    init(fd: Int32, index: Int) {
        self.fd = fd
        self.index = index
    }

    var inflightCount: Int { inflight.count - inflightHead }
    /// Output not yet sent (the socket had no room for it).
    var hasOutput: Bool { outputStart < output.count || !(tls?.pendingOutput.isEmpty ?? true) }
}

/// Opens a blocking-connect TCP socket, then makes it non-blocking.
func openConnection(host: String, port: Int) throws -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw UsageError("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw UsageError("bad host \(host)") }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard result == 0 else {
        let message = String(cString: strerror(errno))
        close(fd)
        throw UsageError("connect to \(host):\(port): \(message)")
    }
    var one: Int32 = 1
    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    return fd
}

/// An epoll loop driving some connections at a fixed depth until `stopAt`; measures from `measureFrom`.
/// With a `rate`, a free slot of the depth waits for its turn: the n-th request goes no sooner than
/// n / rate seconds after the start.
/// What goes on the wire and what counts as a good reply is `load`'s (rpcd, Redis or the floor).
final class LoadThread<Load: LoadProtocol> {
    let connections: [LoadConnection]
    let load: Load
    let depth: Int
    let measureFrom: UInt64
    let stopAt: UInt64
    var result = LoadResult()
    private var readBuffer = [UInt8](repeating: 0, count: 256 * 1024)
    /// Requests per second, at most (nil: no limit).
    let rate: Double?
    private var started: UInt64 = 0
    private var issued = 0
    /// Connections with a free slot waiting for the rate to allow a request (one entry a slot).
    private var waiting: [LoadConnection] = []
    private var waitingHead = 0

    init(connections: [LoadConnection], load: Load, depth: Int, measureFrom: UInt64, stopAt: UInt64, rate: Double? = nil) {
        self.connections = connections
        self.load = load
        self.depth = depth
        self.measureFrom = measureFrom
        self.stopAt = stopAt
        self.rate = rate
    }

    /// Requests the rate allows by `now`, all told.
    private func allowed(_ now: UInt64) -> Int {
        guard let rate else { return .max }
        return Int(min(Double(Int.max / 2), Double(now &- started) / 1e9 * rate)) + 1
    }

    /// Issues what the rate allows now to connections waiting for it; whether it issued any.
    private func issueWaiting(now: UInt64) -> Bool {
        guard waitingHead < waiting.count else { return false }
        let limit = allowed(now)
        var touched: [LoadConnection] = []
        while waitingHead < waiting.count && issued < limit {
            let connection = waiting[waitingHead]
            waitingHead += 1
            if !connection.closed {
                issue(connection, now: now)
                touched.append(connection)
            }
        }
        if waitingHead > 4096 && waitingHead * 2 > waiting.count {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        }
        for connection in touched { flush(connection) }
        return !touched.isEmpty
    }

    /// A slot of `connection` is free: a request goes now, or waits for the rate.
    private func slotFreed(_ connection: LoadConnection, now: UInt64) {
        if rate == nil || (waitingHead == waiting.count && issued < allowed(now)) {
            issue(connection, now: now)
        } else {
            waiting.append(connection)
        }
    }

    func run() {
        started = nowNanoseconds()
        for connection in connections {
            let now = nowNanoseconds()
            for _ in 0..<depth { slotFreed(connection, now: now) }
            flush(connection)
        }
        // epoll, not poll(2): a poll over every connection cost the load thread O(connections) in
        // the kernel and here on each wait, and the load thread is often the busier side of a run.
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epollFD >= 0 else {
            note(error: "epoll_create1 failed: \(String(cString: strerror(errno)))")
            result.errors += connections.reduce(0) { $0 + $1.inflightCount }
            return
        }
        defer { close(epollFD) }
        // Whether each connection is watched for room to write too (it has output left over).
        var watchesWrite = [Bool](repeating: false, count: connections.count)
        func watch(_ i: Int, _ operation: Int32) {
            let wantsWrite = connections[i].hasOutput
            var event = epoll_event(events: EPOLLIN.rawValue | (wantsWrite ? EPOLLOUT.rawValue : 0), data: epoll_data_t(u64: UInt64(i)))
            _ = epoll_ctl(epollFD, operation, connections[i].fd, &event)
            watchesWrite[i] = wantsWrite
        }
        for i in connections.indices where !connections[i].closed { watch(i, EPOLL_CTL_ADD) }
        var events = [epoll_event](repeating: epoll_event(), count: max(1, min(connections.count, 1024)))
        var stopping = false
        var drainDeadline: UInt64 = 0
        while true {
            let now = nowNanoseconds()
            if !stopping && now >= stopAt {
                stopping = true
                drainDeadline = now + 5_000_000_000
            }
            if stopping && (now >= drainDeadline || connections.allSatisfy { $0.inflightCount == 0 || $0.closed }) { break }
            if !stopping && issueWaiting(now: now) {
                for i in connections.indices where !connections[i].closed && connections[i].hasOutput != watchesWrite[i] { watch(i, EPOLL_CTL_MOD) }
            }
            let n = epoll_wait(epollFD, &events, Int32(events.count), waitingHead < waiting.count ? 1 : 50)
            guard n >= 0 else {
                if errno == EINTR { continue }
                break
            }
            for k in 0..<Int(n) {
                let i = Int(events[k].data.u64)
                let connection = connections[i]
                guard !connection.closed else { continue }
                if events[k].events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                    readAll(connection, stopping: stopping)
                }
                flush(connection)
                if connection.closed {
                    watchesWrite[i] = false
                    var unused = epoll_event()
                    _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, connection.fd, &unused)
                } else if connection.hasOutput != watchesWrite[i] {
                    watch(i, EPOLL_CTL_MOD)
                }
            }
        }
        for connection in connections where connection.inflightCount > 0 && !connection.closed {
            note(error: "\(connection.inflightCount) requests on connection \(connection.index) got no reply within 5 s after the run")
            result.errors += connection.inflightCount
        }
    }

    private func issue(_ connection: LoadConnection, now: UInt64) {
        let seq = connection.nextSeq
        connection.nextSeq += 1
        issued += 1
        load.appendRequest(conn: connection.index, seq: seq, into: &connection.output)
        connection.inflight.append((seq: seq, sentAt: now))
    }

    private func flush(_ connection: LoadConnection) {
        if let tls = connection.tls { return flushTLS(connection, tls) }
        while connection.hasOutput && !connection.closed {
            let n = connection.output.withUnsafeBytes { raw in
                send(connection.fd, raw.baseAddress! + connection.outputStart, raw.count - connection.outputStart, Int32(MSG_NOSIGNAL))
            }
            if n > 0 {
                connection.outputStart += n
            } else if n < 0 && (errno == EAGAIN || errno == EINTR) {
                if errno == EAGAIN { return }
            } else {
                fail(connection, "send failed: \(String(cString: strerror(errno)))")
                return
            }
        }
        connection.output.removeAll(keepingCapacity: true)
        connection.outputStart = 0
    }

    /// `flush` over TLS: a record's worth of plaintext encrypted once the records before it left.
    private func flushTLS(_ connection: LoadConnection, _ tls: TLSSession) {
        while !connection.closed {
            do {
                let records = try tls.pendingOutput.flush { bytes throws(Errno) in try Syscall.send(connection.fd, bytes) }
                guard records == .flushed else { return }
            } catch {
                return fail(connection, "send failed: \(error)")
            }
            guard connection.outputStart < connection.output.count else { break }
            let taken = connection.output.withUnsafeBytes { tls.write(UnsafeRawBufferPointer(rebasing: $0[connection.outputStart...])) }
            guard taken > 0 else { return fail(connection, "TLS would not take the request bytes") }
            connection.outputStart += taken
        }
        connection.output.removeAll(keepingCapacity: true)
        connection.outputStart = 0
    }

    /// `readAll` over TLS: what the socket holds goes to OpenSSL, the plaintext to `consume`.
    private func readAllTLS(_ connection: LoadConnection, _ tls: TLSSession, stopping: Bool) {
        while !connection.closed {
            let n = readBuffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { return fail(connection, "the server closed the connection") }
            if n < 0 {
                if errno == EINTR { continue }
                if errno != EAGAIN { fail(connection, "read failed: \(String(cString: strerror(errno)))") }
                return
            }
            readBuffer.withUnsafeBytes { tls.receive(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            decrypt: while true {
                switch readBuffer.withUnsafeMutableBytes({ tls.read(into: $0) }) {
                case .data(let count): consume(connection, count: count, stopping: stopping)
                case .needsInput: break decrypt
                case .closed: return fail(connection, "the server closed the TLS stream")
                case .failed(let message): return fail(connection, message)
                }
            }
            if n < readBuffer.count { return }
        }
    }

    private func readAll(_ connection: LoadConnection, stopping: Bool) {
        if let tls = connection.tls { return readAllTLS(connection, tls, stopping: stopping) }
        while !connection.closed {
            // recv(2), as the daemon reads: read(2) passes the file layer first.
            let n = readBuffer.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
            if n == 0 {
                fail(connection, "the server closed the connection")
                return
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno != EAGAIN { fail(connection, "read failed: \(String(cString: strerror(errno)))") }
                return
            }
            consume(connection, count: n, stopping: stopping)
            // A short read took all the socket held: epoll reports the next bytes (one read per
            // reply at depth 1, not a second that finds EAGAIN).
            if n < readBuffer.count { return }
        }
    }

    /// Splits replies out of what was read, matches each to the oldest request in flight.
    private func consume(_ connection: LoadConnection, count: Int, stopping: Bool) {
        let now = nowNanoseconds()
        readBuffer.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return }
            var start = 0
            // memchr, not a byte loop: the load thread is often the busier side of a run, and a
            // Swift loop over each byte of a 117-byte reply cost it more than the reply's checks.
            while start < count, let found = memchr(base + start, 0x0A, count - start) {
                let i = UnsafeRawPointer(found) - base
                if connection.input.isEmpty {
                    reply(connection, UnsafeRawBufferPointer(rebasing: raw[start..<i]), now: now, stopping: stopping)
                } else {
                    connection.input.append(contentsOf: raw[start..<i])
                    let line = connection.input
                    connection.input.removeAll(keepingCapacity: true)
                    line.withUnsafeBytes { reply(connection, $0, now: now, stopping: stopping) }
                }
                start = i + 1
            }
            if start < count { connection.input.append(contentsOf: raw[start..<count]) }
        }
    }

    private func reply(_ connection: LoadConnection, _ line: UnsafeRawBufferPointer, now: UInt64, stopping: Bool) {
        guard connection.inflightCount > 0 else {
            result.mismatches += 1
            note(error: "unexpected reply on connection \(connection.index): \(String(decoding: line.prefix(200), as: UTF8.self))")
            return
        }
        let (seq, sentAt) = connection.inflight[connection.inflightHead]
        connection.inflightHead += 1
        if connection.inflightHead > 4096 {
            connection.inflight.removeFirst(connection.inflightHead)
            connection.inflightHead = 0
        }
        switch load.check(reply: line, conn: connection.index, seq: seq) {
        case .ok: break
        case .error:
            result.errors += 1
            note(error: String(decoding: line.prefix(300), as: UTF8.self))
        case .mismatch:
            result.mismatches += 1
            note(error: "reply does not match request \(seq) of connection \(connection.index): \(String(decoding: line.prefix(200), as: UTF8.self))")
        }
        if sentAt >= measureFrom && now <= stopAt {
            result.completed += 1
            result.histogram.record(Int((now - sentAt) / 1000))
        }
        if !stopping { slotFreed(connection, now: now) }
    }

    private func fail(_ connection: LoadConnection, _ message: String) {
        connection.closed = true
        result.errors += max(1, connection.inflightCount)
        note(error: "connection \(connection.index): \(message)")
    }

    private func note(error: String) {
        if result.firstError == nil { result.firstError = error }
    }
}
