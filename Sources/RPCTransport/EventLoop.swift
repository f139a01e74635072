import CRPCLinux
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
    // @unchecked: every `var` is touched only on `queue`, which is serial (preconditionOnLoop);
    // those touched on every turn, read or event are `Confined` for the same reason.
    public let queue: DispatchQueue
    /// Its place in its group (0 for a loop on its own).
    public let index: Int
    let readBuffer: UnsafeMutableRawBufferPointer
    private let selector: Selector
    private var source: (any DispatchSourceRead)?
    private let events: UnsafeMutableBufferPointer<Selector.Event>
    /// The fields below, touched only on the owner's queue: see `Confined`.
    private struct Fields {
        var slots: [Connection?] = []
        var generations: [UInt32] = []
        var freeSlots: [Int] = []
        var now: UInt64
        var turnNanoseconds: UInt64 = 0
        var lingeredNanoseconds: UInt64 = 0
        var polledNanoseconds: UInt64 = 0
        var emptyPolls: Int = 0
        var turns: Int = 0
        var bufferedInput: Int = 0
        var turnUnderWay: Bool = false
        var pollsBeforeSleeping: Bool = false
    }
    private let confined: Confined<Fields>

    /// Registered connections by slot. A connection's token is its slot plus one (token 0 is the
    /// wake pipe) and, in the high half, the slot's generation, bumped each time the slot is
    /// taken: an event still queued for a connection that left finds nothing, even once its slot
    /// is someone else's. An array, not a dictionary by token: no hashing per event.
    private var slots: [Connection?] { _read { yield confined.value.slots } _modify { yield &confined.value.slots } }
    private var generations: [UInt32] { _read { yield confined.value.generations } _modify { yield &confined.value.generations } }
    private var freeSlots: [Int] { _read { yield confined.value.freeSlots } _modify { yield &confined.value.freeSlots } }
    /// Uptime in nanoseconds at the start of the current turn (one clock read per turn).
    public private(set) var now: UInt64 { _read { yield confined.value.now } _modify { yield &confined.value.now } }

    /// Where the loop's time went, for `system.stats`: nanoseconds of its turns, the part of them
    /// spent waiting in a linger (so the rest is serving, or preempted while serving), and how
    /// many turns. A loop whose serving time nears the elapsed time is the daemon's bottleneck.
    public private(set) var turnNanoseconds: UInt64 { _read { yield confined.value.turnNanoseconds } _modify { yield &confined.value.turnNanoseconds } }
    public private(set) var lingeredNanoseconds: UInt64 { _read { yield confined.value.lingeredNanoseconds } _modify { yield &confined.value.lingeredNanoseconds } }
    /// The part of the lingered time spent polling without sleeping (`busyPollNanoseconds`).
    public private(set) var polledNanoseconds: UInt64 { _read { yield confined.value.polledNanoseconds } _modify { yield &confined.value.polledNanoseconds } }
    /// The polls (`epoll_wait` calls) that found nothing while polling: system calls a busy poll spent.
    private(set) var emptyPolls: Int { _read { yield confined.value.emptyPolls } _modify { yield &confined.value.emptyPolls } }
    public private(set) var turns: Int { _read { yield confined.value.turns } _modify { yield &confined.value.turns } }

    /// Bytes of unfinished lines held by this loop's connections, and the most they may hold
    /// before the largest holders are shed (`Int.max`: no bound).
    public private(set) var bufferedInput: Int { _read { yield confined.value.bufferedInput } _modify { yield &confined.value.bufferedInput } }
    public var inputBudget = Int.max

    /// Called on the loop queue when a connection is shed to keep within `inputBudget`.
    public var onShed: (@Sendable (_ connectionID: UInt64, _ bytes: Int) -> Void)?

    /// Called on the loop queue after each turn has served every ready connection: the owner
    /// finishes work it gathered over the turn (the server runs a turn's requests under one hold
    /// of its state lock). Set before connections are added.
    public var onTurnEnd: (@Sendable () -> Void)?
    /// Whether a turn is under way (lines delivered outside one, e.g. after `resumeReading`, get
    /// no `onTurnEnd`).
    public var inTurn: Bool { turnUnderWay }
    /// `inTurn`'s storage: the server asks for it on every request.
    private var turnUnderWay: Bool { _read { yield confined.value.turnUnderWay } _modify { yield &confined.value.turnUnderWay } }
    /// Set by the owner during a turn (while serving, or in `onTurnEnd`) when waiting for the
    /// next event would not help: its replies wait for something else anyway (an fsync), and
    /// requests that gather meanwhile are better served together. Cleared at each turn's start.
    public var lingerDeclined = false
    /// Whether turns linger at all (off by default: a client's loop, whose own sends arrive by
    /// `queue.async`, would delay them by a linger). Set before connections are added.
    public var lingers = false
    /// How long a linger polls (`epoll_wait` with no timeout, again and again) before it sleeps,
    /// when the loop's last turn spent a quarter or more of its time waiting; 0: never. Set before
    /// connections are added.
    ///
    /// A loop that waits for its peers (one request in flight, a reply, the next request) sleeps
    /// in epoll between them, and the next request wakes it: that wake-up can be most of a round
    /// trip, which polling saves. A busy loop (a quarter of its turn or less waiting) sleeps as
    /// before: polling at once broke a pipelining peer's requests into smaller reads.
    public var busyPollNanoseconds = 0
    /// The last turn waited a quarter or more of its time: its lingers poll first (`busyPollNanoseconds`).
    private var pollsBeforeSleeping: Bool { _read { yield confined.value.pollsBeforeSleeping } _modify { yield &confined.value.pollsBeforeSleeping } }

    /// A pipe in the epoll set that `wake()` writes to (nil until `onWake(_:)`), and what to run then.
    private var wakePipe: (read: Int32, write: Int32)?
    private var wakeHandler: (@Sendable () -> Void)?
    /// Raised by `wake()` until the loop runs the handler (`crpc_wake_flag_*`, atomic): the loop
    /// takes it between the connections it serves, not only when the pipe's turn in the ready
    /// list comes, and a wake that finds it raised writes nothing.
    private let wakeFlag = WakeFlag()

    /// With `ownThread` (Linux), the loop waits for its set on a thread of its own and runs each
    /// turn there (`serveOnOwnThread`); otherwise a Dispatch read source on the set starts its
    /// turns on libdispatch's threads.
    public init(label: String, index: Int = 0, readBufferBytes: Int = 64 * 1024, ownThread: Bool = false) throws(Errno) {
        queue = DispatchQueue(label: label)
        self.index = index
        selector = try Selector()
        readBuffer = .allocate(byteCount: max(1, readBufferBytes), alignment: 16)
        events = .allocate(capacity: 256)
        events.initialize(repeating: Selector.Event())
        confined = Confined(Fields(now: DispatchTime.now().uptimeNanoseconds))
        #if canImport(Glibc)
        if ownThread {
            try serveOnOwnThread(name: label)
            return
        }
        #endif
        let source = DispatchSource.makeReadSource(fileDescriptor: selector.fd, queue: queue)
        source.setEventHandler { [weak self] in self?.turn() }
        source.setCancelHandler { [fd = selector.fd] in Syscall.close(fd) }
        self.source = source
        source.resume()
    }

    #if canImport(Glibc)
    /// Starts the thread that waits for the set to be ready and runs each turn on the loop's
    /// queue from there (`queue.sync` runs the block on the calling thread).
    ///
    /// Woken by its source, a loop costs two wake-ups per idle spell: libdispatch's manager
    /// thread sees the set ready (`epoll_wait` on its own epoll, `epoll_ctl` to re-arm) and hands
    /// the source to a worker thread (`futex`), a different one from turn to turn. Here the
    /// kernel wakes the loop's thread at once, one wake-up, and the turns stay on one thread.
    /// Durable creates at 50 × 1, which idle the loop several times per fsync, made 0.46 as many
    /// context switches and no `epoll_ctl`; see `Server.init` for when a loop gets a thread.
    ///
    /// The thread holds the loop only while it waits (at most a second) and serves: a loop no
    /// one else holds is freed at the thread's next wait, and the thread ends.
    private func serveOnOwnThread(name: String) throws(Errno) {
        let start: @Sendable () -> Void = { [weak self] in
            crpc_set_thread_name(name)
            while let loop = self {
                guard loop.awaitTurn() else { return }
            }
        }
        try Syscall.startDetachedThread(start)
    }

    /// Waits up to a second for the set to be ready, then runs a turn on the loop's queue.
    /// False if the set's fd is unusable (the thread ends).
    private func awaitTurn() -> Bool {
        var ready = pollfd(fd: selector.fd, events: Int16(POLLIN), revents: 0)
        let n = poll(&ready, 1, 1_000)
        if n > 0 {
            guard ready.revents & Int16(POLLNVAL | POLLERR) == 0 else { return false }
            queue.sync { turn() }
        }
        return true
    }
    #endif

    /// Runs `handler` on the loop queue, within a turn, after each `wake()` (several wakes may
    /// run it once). Work handed to the loop this way reaches it even while a turn lingers in
    /// epoll, where a `queue.async` block would wait for the turn to end. Set once, before
    /// connections are added, and not from the loop's queue.
    public func onWake(_ handler: @escaping @Sendable () -> Void) throws(Errno) {
        dispatchPrecondition(condition: .notOnQueue(queue))
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw Errno(errno, call: "pipe") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        do {
            try selector.add(fds[0], token: 0, interest: .read)
        } catch {
            Syscall.close(fds[0])
            Syscall.close(fds[1])
            throw error
        }
        // On the queue: a loop on its own thread may already wait, and takes the pipe's event
        // in a turn, which the queue orders after this (the pipe itself orders nothing for TSan).
        queue.sync {
            wakeHandler = handler
            wakePipe = (fds[0], fds[1])
        }
    }

    /// Makes the loop run its `onWake` handler soon. Any thread; one write(2), unless a wake
    /// is already pending.
    public func wake() {
        guard let wakePipe, wakeFlag.raise() else { return }
        var byte: UInt8 = 1
        _ = write(wakePipe.write, &byte, 1)  // a full pipe already holds a wake
    }

    /// The wake pipe is readable: empties it, and runs the handler if the wake was not taken yet.
    private func woken() {
        guard let wakePipe else { return }
        var bytes: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        _ = withUnsafeMutableBytes(of: &bytes) { read(wakePipe.read, $0.baseAddress, $0.count) }
        takeWake()
    }

    /// Runs the wake handler if a wake is pending. Asked after every eighth connection a turn
    /// serves too: the pipe's event comes after every connection that was ready before it, and an
    /// fsync's replies waited behind all their reads. Every eighth, not every one: asking on
    /// every event cost more than it saved.
    @inline(__always)
    private func takeWake() {
        if wakeFlag.isRaised { runWake() }
    }

    @inline(never)
    private func runWake() {
        if wakeFlag.take() { wakeHandler?() }
    }

    deinit {
        if let wakePipe {
            selector.remove(wakePipe.read)
            Syscall.close(wakePipe.read)
            Syscall.close(wakePipe.write)
        }
        // The source's cancel handler closes the selector's fd: it outlives no event delivery.
        // Without a source, the loop's own thread no longer holds the loop, nor waits on the fd.
        if let source { source.cancel() } else { Syscall.close(selector.fd) }
        readBuffer.deallocate()
        events.deallocate()
    }

    public func preconditionOnLoop() { dispatchPrecondition(condition: .onQueue(queue)) }

    /// `preconditionOnLoop()` in debug builds only (`assert`), for the checks on every request's
    /// path: a read, a send, a flush. Each cost ~50 instructions in a release build, ~6 a request
    /// at one request in flight (~2% of a get's instructions); swift-nio's `assertInEventLoop`
    /// makes the same trade. The debug test suite and its ThreadSanitizer run still check them.
    @inline(__always)
    public func assertOnLoop() {
        assert({
            preconditionOnLoop()
            return true
        }())
    }

    /// Serves every ready connection; another turn follows while the set stays ready.
    ///
    /// With `lingers` set (the server's loops), a turn that served something then lingers: it
    /// answers what it read (`onTurnEnd`) and waits in the kernel, up to `lingerNanoseconds`, for
    /// the next event, serving it on this thread.
    /// Under load the next request is microseconds away, and waking this thread from epoll costs
    /// one wake-up where returning to libdispatch costs two (its manager thread sees the epoll fd,
    /// then hands the source to a worker) and two context switches (a loop on its own thread pays
    /// one either way, and still saves the `poll` and the return). The linger is bounded
    /// (`maxLingers` waits, `maxTurnNanoseconds` in all) so work queued on the loop with
    /// `queue.async` (a connection to add, a timer, a stats visit) waits at most ~2 ms; replies
    /// released by an fsync come through `wake()`, which a lingering turn serves at once.
    private func turn() {
        now = DispatchTime.now().uptimeNanoseconds
        turnUnderWay = true
        let started = now
        let lingeredBefore = lingeredNanoseconds
        lingerDeclined = false
        var served = serveReady(waitNanoseconds: 0)
        var waits = 0
        while lingers && served > 0 && waits < Self.maxLingers && now &- started < Self.maxTurnNanoseconds {
            onTurnEnd?()
            if lingerDeclined { break }
            served = serveReady(waitNanoseconds: Self.lingerNanoseconds)
            waits += 1
        }
        turnUnderWay = false
        onTurnEnd?()
        let took = DispatchTime.now().uptimeNanoseconds &- started
        turnNanoseconds &+= took
        turns &+= 1
        pollsBeforeSleeping = busyPollNanoseconds > 0 && (lingeredNanoseconds &- lingeredBefore) &* 4 >= took
    }

    /// How long a turn that served something waits for more, how many times, and how long a
    /// turn may keep the queue in all (work queued with `queue.async` runs after it).
    ///
    /// A busy loop leaves its turn only at `maxTurnNanoseconds`, and each leaving costs the
    /// hand-off above before the next turn starts: where a wake-up costs tens of µs, short turns
    /// served pipelined gets well below long ones.
    static let lingerNanoseconds = 50_000
    /// How long a busy poll spins between two `epoll_wait` calls that found nothing: back to back,
    /// they were most of the daemon's system calls, for no earlier reply. A request is noticed at
    /// most this much later.
    static let pollSpacingNanoseconds: UInt64 = 2_000
    static let maxLingers = 1_000
    static let maxTurnNanoseconds: UInt64 = 2_000_000

    /// Serves every ready connection (waiting up to `waitNanoseconds` for the first event);
    /// returns how many events were served.
    private func serveReady(waitNanoseconds: Int) -> Int {
        var total = 0
        var wait = waitNanoseconds
        var sinceWakeCheck = 0
        while true {
            // A linger's wait is timed to its first event (or its end): two clock reads a linger.
            var waitingSince = wait > 0 ? DispatchTime.now().uptimeNanoseconds : 0
            // A local function, not a closure value: passed only as a non-escaping argument, its
            // captured variables stay on the stack.
            func serve(_ token: UInt64, _ ready: IOEvents) {
                if waitingSince > 0 {
                    lingeredNanoseconds &+= DispatchTime.now().uptimeNanoseconds &- waitingSince
                    waitingSince = 0
                }
                if token == 0 { return woken() }
                sinceWakeCheck &+= 1
                if sinceWakeCheck & 7 == 0 { takeWake() }
                connection(token)?.ready(ready)
            }
            var n: Int
            if wait > 0 && pollsBeforeSleeping {
                // Polls until an event, then serves it; sleeps for what is left of the wait if
                // none came within `busyPollNanoseconds`.
                let pollStart = waitingSince
                let pollEnd = pollStart &+ UInt64(clamping: busyPollNanoseconds)
                // Until the start of the poll that found something (its serving is not polling).
                var polled = pollStart
                repeat {
                    n = selector.poll(into: events, waitNanoseconds: 0, serve)
                    guard n == 0 else { break }
                    emptyPolls &+= 1
                    polled = DispatchTime.now().uptimeNanoseconds
                    // The next poll a moment later, not at once (`pollSpacingNanoseconds`); sooner
                    // when a wake is raised (its pipe is in the set).
                    let next = min(polled &+ Self.pollSpacingNanoseconds, pollEnd)
                    while polled < next && !wakeFlag.isRaised {
                        crpc_cpu_relax()
                        polled = DispatchTime.now().uptimeNanoseconds
                    }
                } while polled < pollEnd
                polledNanoseconds &+= polled &- pollStart
                let left = wait - Int(clamping: polled &- pollStart)
                if n == 0 && left > 0 { n = selector.poll(into: events, waitNanoseconds: left, serve) }
            } else {
                n = selector.poll(into: events, waitNanoseconds: wait, serve)
            }
            if n > 0 { now = DispatchTime.now().uptimeNanoseconds }
            if waitingSince > 0 { lingeredNanoseconds &+= DispatchTime.now().uptimeNanoseconds &- waitingSince }
            total += n
            wait = 0
            if n < events.count { break }
        }
        return total
    }

    // MARK: - Registration (on the loop queue)

    func register(_ fd: Int32, interest: IOInterest, _ connection: Connection) throws(Errno) -> UInt64 {
        preconditionOnLoop()
        let slot: Int
        if let free = freeSlots.popLast() {
            slot = free
        } else {
            slot = slots.count
            slots.append(nil)
            generations.append(0)
        }
        generations[slot] &+= 1
        let token = UInt64(generations[slot]) << 32 | UInt64(slot + 1)
        do {
            try selector.add(fd, token: token, interest: interest)
        } catch {
            freeSlots.append(slot)
            throw error
        }
        slots[slot] = connection
        return token
    }

    /// The connection a token names, nil once it left.
    @inline(__always)
    func connection(_ token: UInt64) -> Connection? {
        slot(of: token).flatMap { slots[$0] }
    }

    /// The slot a token names while the slot's generation is still the token's; nil otherwise.
    @inline(__always)
    private func slot(of token: UInt64) -> Int? {
        let slot = Int(truncatingIfNeeded: token & 0xFFFF_FFFF) &- 1
        guard slot >= 0, slot < slots.count, UInt64(generations[slot]) == token >> 32 else { return nil }
        return slot
    }

    func reregister(_ fd: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        preconditionOnLoop()
        try selector.modify(fd, token: token, interest: interest)
    }

    /// Forgets the fd before it is closed: no later turn reports it, even if the number is reused.
    func deregister(_ fd: Int32, token: UInt64) {
        preconditionOnLoop()
        selector.remove(fd)
        guard let slot = slot(of: token), slots[slot] != nil else { return }
        slots[slot] = nil
        freeSlots.append(slot)
    }

    // MARK: - Input budget

    /// Records a change in a connection's unfinished input; sheds the largest holders while the
    /// loop is over its budget.
    func inputChanged(by delta: Int) {
        bufferedInput += delta
        guard bufferedInput > inputBudget else { return }
        let holders = slots.compactMap { $0 }.filter { $0.bufferedInputBytes > 0 }
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

    public init(count: Int, label: String = "rpcd.loop", ownThreads: Bool = false) throws(Errno) {
        var loops: [EventLoop] = []
        for index in 0..<max(1, count) {
            loops.append(try EventLoop(label: "\(label).\(index)", index: index, ownThread: ownThreads))
        }
        self.loops = loops
    }

    public func nextLoop() -> EventLoop {
        let loop = loops[next % loops.count]
        next &+= 1
        return loop
    }
}
