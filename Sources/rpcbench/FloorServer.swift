import CRPCLinux
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The floor for `--compare floor`: the least a line server can do per request, on the same load.
/// One thread of rpcbench, raw level-triggered epoll, no Dispatch: each readiness event is one
/// `read` (64 KiB) and, for every newline in it, one fixed reply line, sent with one `write`. Nothing
/// is parsed. A connection that cannot take its replies is not read until it has taken them.
final class FloorServer: @unchecked Sendable {
    // @unchecked: after `init`, the fds and per-connection state are used only by the floor's own
    // thread; `cpuClock` is written once under `condition` before `init` returns.
    let port: Int
    private let listener: Int32
    private let epoll: Int32
    /// The floor's thread exits when this pipe becomes readable (`stop()` writes to `wake[1]`).
    private let wake: [Int32]
    private let condition = NSCondition()
    private var cpuClock: clockid_t?
    private var running = true
    private var finished = false

    /// The reply to every line.
    static let reply = Array(#"{"id":"x","method":"system.pingResult","result":{}}"#.utf8) + [UInt8(ascii: "\n")]
    /// `reply` repeated: owed replies are written straight out of it.
    private let replies: [UInt8]
    /// Per fd number: whether it is a connection of the floor's, the reply bytes it is owed, where in
    /// `reply` the next byte owed starts, and whether it is watched for room to write (else to read).
    private var open: [Bool] = []
    private var owed: [Int] = []
    private var phase: [Int] = []
    private var writing: [Bool] = []
    private var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)

    /// Listens on a free loopback port and starts serving on a thread of its own.
    init() throws {
        replies = Array([[UInt8]](repeating: Self.reply, count: 64 * 1024 / Self.reply.count).joined())
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw UsageError("floor: socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 4096) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        var pipeFDs: [Int32] = [-1, -1]
        let epollFD = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard listening, epollFD >= 0, pipe(&pipeFDs) == 0 else {
            let message = String(cString: strerror(errno))
            close(fd)
            if epollFD >= 0 { close(epollFD) }
            throw UsageError("floor: cannot listen on 127.0.0.1: \(message)")
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        epoll = epollFD
        wake = pipeFDs
        watch(listener, EPOLLIN.rawValue, op: EPOLL_CTL_ADD)
        watch(wake[0], EPOLLIN.rawValue, op: EPOLL_CTL_ADD)
        Thread.detachNewThread { [self] in serve() }
        condition.lock()
        while cpuClock == nil { condition.wait() }
        condition.unlock()
    }

    /// CPU seconds the floor's thread used so far.
    func cpuSeconds() -> Double {
        var ts = timespec()
        clock_gettime(cpuClock ?? CLOCK_THREAD_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Stops the thread and closes every fd it had.
    func stop() {
        _ = write(wake[1], "x", 1)
        condition.lock()
        while !finished { condition.wait() }
        condition.unlock()
        close(wake[0])
        close(wake[1])
        close(epoll)
        close(listener)
    }

    private func serve() {
        var clock = clockid_t(0)
        pthread_getcpuclockid(pthread_self(), &clock)
        condition.lock()
        cpuClock = clock
        condition.broadcast()
        condition.unlock()

        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while running {
            let n = epoll_wait(epoll, &events, Int32(events.count), -1)
            if n < 0 {
                if errno == EINTR { continue }
                break
            }
            for event in events[0..<Int(n)] {
                let fd = event.data.fd
                if fd == listener {
                    acceptAll()
                } else if fd == wake[0] {
                    running = false
                } else if open[Int(fd)] {
                    serve(fd)
                }
            }
        }
        for (fd, isOpen) in open.enumerated() where isOpen { close(Int32(fd)) }
        condition.lock()
        finished = true
        condition.broadcast()
        condition.unlock()
    }

    private func acceptAll() {
        while true {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }  // EAGAIN (or a failed accept: the load sees the refusal)
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            var one: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            let i = Int(fd)
            if i >= open.count {
                let more = i + 1 - open.count
                open += [Bool](repeating: false, count: more)
                owed += [Int](repeating: 0, count: more)
                phase += [Int](repeating: 0, count: more)
                writing += [Bool](repeating: false, count: more)
            }
            open[i] = true
            owed[i] = 0
            phase[i] = 0
            writing[i] = false
            watch(fd, EPOLLIN.rawValue, op: EPOLL_CTL_ADD)
        }
    }

    private func serve(_ fd: Int32) {
        let i = Int(fd)
        if owed[i] == 0 {
            let n = readBuffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) {
                open[i] = false
                close(fd)
                return
            }
            if n > 0 { owed[i] = Self.newlines(in: readBuffer, count: n) * Self.reply.count }
        }
        while owed[i] > 0 {
            let start = phase[i]
            let length = min(owed[i], replies.count - start)
            let n = replies.withUnsafeBytes { send(fd, $0.baseAddress! + start, length, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                owed[i] -= n
                phase[i] = (start + n) % Self.reply.count
            } else if n < 0 && errno == EAGAIN {
                break
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                open[i] = false
                close(fd)
                return
            }
        }
        // Read again only once everything owed is written; until then wait for room to write.
        if writing[i] != (owed[i] > 0) {
            writing[i] = owed[i] > 0
            watch(fd, writing[i] ? EPOLLOUT.rawValue : EPOLLIN.rawValue, op: EPOLL_CTL_MOD)
        }
    }

    private func watch(_ fd: Int32, _ events: UInt32, op: Int32) {
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        _ = epoll_ctl(epoll, op, fd, &event)
    }

    /// Newlines in the first `count` bytes of `buffer`.
    private static func newlines(in buffer: [UInt8], count: Int) -> Int {
        buffer.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return 0 }
            var found = 0
            var at = 0
            while at < count, let hit = memchr(base + at, 0x0A, count - at) {
                found += 1
                at = base.distance(to: UnsafeRawPointer(hit)) + 1
            }
            return found
        }
    }
}
