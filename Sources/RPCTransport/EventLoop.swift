import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A serial queue that serves many connections: one kernel readiness set (epoll) holding their
/// fds, watched by one Dispatch read source, and one read buffer they share.
///
/// Each connection's fd is registered once, level-triggered; a turn asks the set what is ready
/// (`epoll_wait` with no timeout) and serves every ready connection. Readiness costs one
/// `epoll_wait` per turn, not libdispatch's FIONREAD and disarm/re-arm per connection and event,
/// and the loop sees hang-ups and resets (EPOLLHUP, EPOLLERR, EPOLLRDHUP) as they happen.
///
/// Connections are spread over a few loops (one per core) instead of one queue each: a read
/// buffer per loop, not per connection, keeps idle connections small.
public final class EventLoop: @unchecked Sendable {
    // @unchecked: every `var` is touched only on `queue`, which is serial (preconditionOnLoop).
    public let queue: DispatchQueue
    /// Its place in its group (0 for a loop on its own).
    public let index: Int
    let readBuffer: UnsafeMutableRawBufferPointer
    private let selector: Selector
    private var source: (any DispatchSourceRead)?
    private let events: UnsafeMutableBufferPointer<Selector.Event>
    private var registered: [UInt64: Connection] = [:]
    private var nextToken: UInt64 = 1
    /// Uptime in nanoseconds at the start of the current turn (one clock read per turn).
    public private(set) var now: UInt64

    /// Bytes of unfinished lines held by this loop's connections, and the most they may hold
    /// before the largest holders are shed (`Int.max`: no bound).
    public private(set) var bufferedInput = 0
    public var inputBudget = Int.max

    /// Called on the loop queue when a connection is shed to keep within `inputBudget`.
    public var onShed: (@Sendable (_ connectionID: UInt64, _ bytes: Int) -> Void)?

    /// Called on the loop queue after each turn has served every ready connection: the owner
    /// finishes work it gathered over the turn (the server runs a turn's requests under one hold
    /// of its state lock). Set before connections are added.
    public var onTurnEnd: (@Sendable () -> Void)?
    /// Whether a turn is under way (lines delivered outside one, e.g. after `resumeReading`, get
    /// no `onTurnEnd`).
    public private(set) var inTurn = false

    public init(label: String, index: Int = 0, readBufferBytes: Int = 64 * 1024) throws(Errno) {
        queue = DispatchQueue(label: label)
        self.index = index
        selector = try Selector()
        readBuffer = .allocate(byteCount: max(1, readBufferBytes), alignment: 16)
        events = .allocate(capacity: 256)
        events.initialize(repeating: Selector.Event())
        now = DispatchTime.now().uptimeNanoseconds
        let source = DispatchSource.makeReadSource(fileDescriptor: selector.fd, queue: queue)
        source.setEventHandler { [weak self] in self?.turn() }
        source.setCancelHandler { [fd = selector.fd] in Syscall.close(fd) }
        self.source = source
        source.resume()
    }

    deinit {
        // The source's cancel handler closes the selector's fd: it outlives no event delivery.
        source?.cancel()
        readBuffer.deallocate()
        events.deallocate()
    }

    public func preconditionOnLoop() { dispatchPrecondition(condition: .onQueue(queue)) }

    /// Serves every ready connection; another turn follows while the set stays ready.
    private func turn() {
        now = DispatchTime.now().uptimeNanoseconds
        inTurn = true
        while true {
            let n = selector.poll(into: events) { token, ready in
                registered[token]?.ready(ready)
            }
            if n < events.count { break }
        }
        inTurn = false
        onTurnEnd?()
    }

    // MARK: - Registration (on the loop queue)

    func register(_ fd: Int32, interest: IOInterest, _ connection: Connection) throws(Errno) -> UInt64 {
        preconditionOnLoop()
        let token = nextToken
        nextToken &+= 1
        try selector.add(fd, token: token, interest: interest)
        registered[token] = connection
        return token
    }

    func reregister(_ fd: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        preconditionOnLoop()
        try selector.modify(fd, token: token, interest: interest)
    }

    /// Forgets the fd before it is closed: no later turn reports it, even if the number is reused.
    func deregister(_ fd: Int32, token: UInt64) {
        preconditionOnLoop()
        selector.remove(fd)
        registered[token] = nil
    }

    // MARK: - Input budget

    /// Records a change in a connection's unfinished input; sheds the largest holders while the
    /// loop is over its budget.
    func inputChanged(by delta: Int) {
        bufferedInput += delta
        guard bufferedInput > inputBudget else { return }
        let holders = registered.values.filter { $0.bufferedInputBytes > 0 }
            .sorted { $0.bufferedInputBytes > $1.bufferedInputBytes }
        for connection in holders where bufferedInput > inputBudget {
            let bytes = connection.bufferedInputBytes
            connection.close(.shed("the daemon holds too much unfinished input (\(bufferedInput) bytes over this loop's budget of \(inputBudget)); this peer held \(bytes) bytes of a line without its newline"))
            onShed?(connection.id, bytes)
        }
    }
}

/// A fixed set of loops handed out round-robin.
public final class EventLoopGroup: @unchecked Sendable {
    // @unchecked: `next` is only touched by `nextLoop()`, called from the one accept queue.
    public let loops: [EventLoop]
    private var next = 0

    public init(count: Int, label: String = "rpcd.loop") throws(Errno) {
        var loops: [EventLoop] = []
        for index in 0..<max(1, count) { loops.append(try EventLoop(label: "\(label).\(index)", index: index)) }
        self.loops = loops
    }

    public func nextLoop() -> EventLoop {
        let loop = loops[next % loops.count]
        next &+= 1
        return loop
    }
}
