import Dispatch
import Foundation
import RPCSchema
import RPCTransport

/// What the server keeps per event loop: the loop's connections (for the idle sweep and live byte
/// counts) and its request counters. Confined to the loop's queue, so counting costs no lock and no
/// atomic; `system.stats` and the watchdog visit every loop and add the snapshots up.
final class LoopState: @unchecked Sendable {
    // @unchecked: every `var` is touched only on `loop.queue` (checked with preconditionOnLoop).
    struct Count: Sendable {
        var requests = 0
        var errors = 0
    }

    /// What one loop reports; added up over loops.
    struct Snapshot: Sendable {
        var methods: [RPCMethod: Count] = [:]
        var bytesIn: UInt64 = 0
        var bytesOut: UInt64 = 0
        var idleClosed = 0
        /// Each loop's time, by loop index.
        var loops: [(index: Int, stats: LoopStats)] = []

        mutating func add(_ other: Snapshot) {
            loops += other.loops
            methods.merge(other.methods) { Count(requests: $0.requests + $1.requests, errors: $0.errors + $1.errors) }
            bytesIn &+= other.bytesIn
            bytesOut &+= other.bytesOut
            idleClosed += other.idleClosed
        }
    }

    /// Keys for lines that never named a served method (bounded: a peer cannot grow the table).
    static let invalidLine = RPCMethod("(invalid)", "")
    static let unknownMethod = RPCMethod("(unknown)", "")

    let loop: EventLoop
    /// Replies released by journal fsyncs, handed to this loop in one hop per batch.
    let released: ReleasedReplies
    private var connections: [UInt64: Connection] = [:]
    /// The fields below, touched only on the owner's queue: see `Confined`.
    private struct Fields {
        var counts: [RPCMethod: Count] = [:]
        var run: (method: RPCMethod, count: Count)?
    }
    private let confined: Confined<Fields>

    /// `Confined`, like the batch's fields: every request is counted.
    private var counts: [RPCMethod: Count] { _read { yield confined.value.counts } _modify { yield &confined.value.counts } }
    /// The method counted last and its count since, added to `counts` when another comes: a
    /// peer's read is mostly one method, and finding it in `counts` hashed both its strings.
    private var run: (method: RPCMethod, count: Count)? { _read { yield confined.value.run } _modify { yield &confined.value.run } }
    /// Bytes of connections already closed.
    private var closedBytesIn: UInt64 = 0
    private var closedBytesOut: UInt64 = 0
    private var idleClosed = 0
    private var sweepTimer: (any DispatchSourceTimer)?

    init(loop: EventLoop) {
        self.loop = loop
        confined = Confined(Fields())
        self.released = ReleasedReplies(loop: loop)
    }

    func add(_ connection: Connection) {
        loop.preconditionOnLoop()
        connections[connection.id] = connection
    }

    func remove(_ connection: Connection) {
        loop.preconditionOnLoop()
        guard connections.removeValue(forKey: connection.id) != nil else { return }
        closedBytesIn &+= connection.bytesIn
        closedBytesOut &+= connection.bytesOut
    }

    func count(_ method: RPCMethod, failed: Bool) {
        if let current = run, current.method == method {
            run?.count.requests += 1
            if failed { run?.count.errors += 1 }
            return
        }
        loop.preconditionOnLoop()
        endRun()
        run = (method, Count(requests: 1, errors: failed ? 1 : 0))
    }

    /// Adds the current run of one method to `counts`.
    private func endRun() {
        guard let (method, count) = run else { return }
        counts[method, default: Count()].requests += count.requests
        counts[method, default: Count()].errors += count.errors
        run = nil
    }

    func snapshot() -> Snapshot {
        loop.preconditionOnLoop()
        endRun()
        var snapshot = Snapshot(methods: counts, bytesIn: closedBytesIn, bytesOut: closedBytesOut, idleClosed: idleClosed)
        let lingering = loop.lingeredNanoseconds
        let serving = loop.turnNanoseconds >= lingering ? loop.turnNanoseconds - lingering : 0
        snapshot.loops = [(
            loop.index,
            LoopStats(
                servingSeconds: Double(serving) / 1e9, lingeringSeconds: Double(lingering) / 1e9,
                pollingSeconds: Double(loop.polledNanoseconds) / 1e9, turns: loop.turns)
        )]
        for connection in connections.values {
            snapshot.bytesIn &+= connection.bytesIn
            snapshot.bytesOut &+= connection.bytesOut
        }
        return snapshot
    }

    // MARK: - Timeouts: one timer per loop, not one per connection

    /// Runs `check` over the loop's open connections every `period` seconds (on the loop's
    /// queue); `check` closes what has run out of time. Nothing when `period` is 0.
    func startSweep(period: Double, _ check: @escaping @Sendable (Connection, UInt64) -> Void) {
        guard period > 0 else { return }
        loop.queue.async { [self] in
            let timer = DispatchSource.makeTimerSource(queue: loop.queue)
            timer.schedule(deadline: .now() + period, repeating: period, leeway: .milliseconds(Int(period * 250)))
            timer.setEventHandler { [unowned self] in
                loop.preconditionOnLoop()
                let now = DispatchTime.now().uptimeNanoseconds
                for connection in connections.values { check(connection, now) }
            }
            sweepTimer = timer
            timer.resume()
        }
    }

    /// A connection closed by the idle timeout, for `system.stats`.
    func countIdleClose() { idleClosed += 1 }

    func stopSweep() {
        loop.queue.async { [self] in
            sweepTimer?.cancel()
            sweepTimer = nil
        }
    }
}

/// Visits every loop queue and adds up their snapshots. A wedged loop never answers, so `done`
/// never runs: the watchdog relies on that.
func collect(_ states: [LoopState], done: @escaping @Sendable (LoopState.Snapshot) -> Void) {
    final class Sum: @unchecked Sendable {
        // @unchecked: `total` is guarded by `lock`.
        let lock = NSLock()
        var total = LoopState.Snapshot()
    }
    let sum = Sum()
    let group = DispatchGroup()
    for state in states {
        group.enter()
        state.loop.queue.async {
            let snapshot = state.snapshot()
            sum.lock.withLock { sum.total.add(snapshot) }
            group.leave()
        }
    }
    group.notify(queue: .global()) { done(sum.lock.withLock { sum.total }) }
}

/// A reply held in its reserved slot until the journal has its mutation: where it goes, and
/// where it is in its turn's buffer of replies.
struct HeldReply {
    let connection: Connection
    let slot: UInt64
    let reply: Range<Int>
    /// For the error sent instead if the mutation cannot be saved.
    let id: String
    let form: WireForm
}

/// Replies that an fsync released, on their way to one loop: the journal's writer adds each
/// turn's (any thread); the loop takes all of them in one turn, fills every slot, then sends each
/// connection's replies in one send. One wake of the loop (`EventLoop.wake`, which reaches a turn lingering in
/// epoll) and one send per connection per fsync, not one per reply.
///
/// A turn's replies travel as the turn's buffer and its slots, one reference to the buffer: a
/// slice per reply counted it up on the writer's thread and down on the loop's, a cache line
/// bounced between cores for every reply.
final class ReleasedReplies: @unchecked Sendable {
    // @unchecked: `turns` and `scheduled` are guarded by `lock`; `loop` is immutable.
    private let loop: EventLoop
    private let lock = NSLock()
    private var turns: [(replies: [UInt8], held: [HeldReply])] = []
    private var scheduled = false

    init(loop: EventLoop) { self.loop = loop }

    /// Queues a turn's filled slots, `held`, whose replies are in `replies`; the first since the
    /// loop last delivered schedules the delivery.
    func add(_ replies: [UInt8], _ held: [HeldReply]) {
        guard !held.isEmpty else { return }
        let schedule: Bool = lock.withLock {
            turns.append((replies, held))
            defer { scheduled = true }
            return !scheduled
        }
        if schedule { loop.wake() }
    }

    /// On the loop (its wake handler): fills every released slot, then sends each connection's replies at once.
    func deliver() {
        loop.preconditionOnLoop()
        let batch = lock.withLock {
            scheduled = false
            defer { turns = [] }
            return turns
        }
        for turn in batch {
            for item in turn.held {
                item.connection.fill(item.slot, with: turn.replies[item.reply], flush: false)
                item.connection.flushIfLarge()  // an fsync can release thousands: not all in memory at once
            }
        }
        // Once per run of one connection's replies: a flush of a connection flushed already finds
        // nothing to send (no system call), where a set of those flushed cost ~500 instructions a
        // reply to hash and grow.
        var last: Connection?
        for turn in batch {
            for item in turn.held where item.connection !== last {
                item.connection.flush()
                last = item.connection
            }
        }
    }
}
