import RPCEntities
import RPCSchema

/// The journal's bookkeeping between the request path and the writer: bytes appended but not yet
/// written, the batch being written, what is acknowledged, who waits for what. A value guarded by
/// `Journal`'s lock; methods return what to do once the lock is released (swift-service-lifecycle's
/// locked state machine).
///
/// Group commit: the writer takes everything appended so far as one batch, writes and fsyncs it
/// once, and acknowledges every ticket up to the batch's last sequence number. Whatever is
/// appended meanwhile goes into the next batch.
struct GroupCommit {
    typealias Waiter = @Sendable (_ failure: String?) -> Void

    /// What the writer writes in one go.
    struct Batch {
        var bytes: [UInt8]
        var lastSeq: UInt64
        /// Set when a compaction starts: bytes before `offset` (records up to `seq`) go to the
        /// current journal, the rest to the next one.
        var rotation: Rotation?
    }

    struct Rotation {
        var offset: Int
        var seq: UInt64
    }

    /// What `wait` decided.
    enum WaitOutcome {
        case now(failure: String?)
        case later
    }

    /// The last sequence number appended.
    private(set) var lastSeq: UInt64
    /// Every record up to here is written (and fsynced, with `--fsync always`).
    private(set) var ackedSeq: UInt64
    /// Set by the first failed write or fsync; nothing is acknowledged or written after it.
    private(set) var failure: String?
    private var pending: [UInt8] = []
    private var inFlightBytes = 0
    private var rotation: Rotation?
    private var writerRunning = false
    /// While the writer waits for the peers it released (`awaitReturn`): how many records past
    /// the durable one end the wait.
    private var returnTarget: UInt64?
    /// Records appended while the last batch was written: the next batch holds them whatever the
    /// writer waits for, so they are not the peers its batch's replies went to.
    private var appendedDuringWrite: UInt64 = 0
    private var waiters: [(ticket: UInt64, done: Waiter)] = []
    /// Records were appended that no `passEnded()` has followed yet: an event loop's pass over
    /// its ready peers is still appending.
    private var passOpen = false
    /// The writer waits for that pass to end (`awaitPassEnd`).
    private var writerAwaitsPass = false
    /// How far the writer may fall behind before mutations are refused (bounded memory).
    let maxBehindBytes: Int

    init(lastSeq: UInt64, maxBehindBytes: Int) {
        self.lastSeq = lastSeq
        self.ackedSeq = lastSeq
        self.maxBehindBytes = maxBehindBytes
    }

    /// Why mutations are refused now, if they are.
    func refusal() -> String? {
        if let failure { return "the journal cannot be written (\(failure)); reads still work; fix the disk and restart rpcd" }
        // The sequence number comes from the files at start; `append` must not step past UInt64.max.
        if lastSeq == .max {
            return "the journal's sequence numbers are used up (last seq \(lastSeq)); reads still work; "
                + "the data directory's files are damaged or forged: restore them from a backup"
        }
        let behind = pending.count + inFlightBytes
        if behind > maxBehindBytes {
            return "the journal writer is \(behind >> 20) MiB behind the disk; retry shortly"
        }
        return nil
    }

    /// `refusal()` for `count` more records at once (a turn's mutations, asked once): also refused
    /// when fewer than `count` sequence numbers are left, and the caller then asks before each.
    /// A turn taken near `maxBehindBytes` may pass it by that turn's records: still bounded.
    func refusal(records count: Int) -> String? {
        if let reason = refusal() { return reason }
        // `refusal()` said lastSeq < .max, so the subtraction cannot underflow.
        if UInt64(clamping: count) > .max - lastSeq { return "fewer than \(count) sequence numbers are left" }
        return nil
    }

    /// What an append asks of the caller, once the lock is released.
    struct Appended {
        /// The record's sequence number: its ticket.
        var seq: UInt64
        /// The writer is idle: start it.
        var startWriter = false
        /// The writer waits for the peers it released, and this record is the last it waited
        /// for: wake it.
        var wakeWriter = false
    }

    /// Appends `body` as the next record, with the id `"r<seq>"` (a change feed sends the line
    /// as it is). Only after `refusal()` said nil (it refuses at UInt64.max).
    mutating func append(_ body: JournalRecord.Body) -> Appended {
        lastSeq += 1
        JournalRecord.encode(body, seq: lastSeq, into: &pending)
        return appendedUpToLast()
    }

    /// What the caller of an append that ended at `lastSeq` must do.
    private mutating func appendedUpToLast() -> Appended {
        passOpen = true
        var appended = Appended(seq: lastSeq, startWriter: startWriterIfIdle())
        if let target = returnTarget, lastSeq &- ackedSeq >= target {
            returnTarget = nil
            appended.wakeWriter = true
        }
        return appended
    }

    /// Appends a leader's record under the leader's sequence number (a follower's journal stays
    /// byte-compatible with its leader's). `seq` must be `lastSeq + 1` (the follower checks).
    mutating func append(_ body: JournalRecord.Body, at seq: UInt64) -> Appended {
        precondition(seq == lastSeq &+ 1, "replicated record \(seq) does not follow \(lastSeq)")
        return append(body)
    }

    /// Appends a leader's sealed lines as they came, numbered `first` through `last` (a follower:
    /// `first` must be `lastSeq + 1`, which it checks).
    mutating func appendSealed(_ lines: UnsafeRawBufferPointer, first: UInt64, last: UInt64) -> Appended {
        precondition(first == lastSeq &+ 1 && last >= first, "replicated records \(first)...\(last) do not follow \(lastSeq)")
        pending.append(contentsOf: lines)
        lastSeq = last
        return appendedUpToLast()
    }

    /// Starts over after the state was replaced by a leader's snapshot at `seq`: nothing pending,
    /// and the next record is `seq + 1`. Only while nothing is pending or being written.
    mutating func restart(at seq: UInt64) {
        lastSeq = seq
        ackedSeq = seq
    }

    /// Marks the compaction point: records after `lastSeq` go to the next journal.
    mutating func markRotation() -> (seq: UInt64, startWriter: Bool) {
        rotation = Rotation(offset: pending.count, seq: lastSeq)
        return (lastSeq, startWriterIfIdle())
    }

    private mutating func startWriterIfIdle() -> Bool {
        guard !writerRunning else { return false }
        writerRunning = true
        return true
    }

    /// Records are appended and not yet taken by the writer.
    var hasPending: Bool { !pending.isEmpty }

    /// The writer, between two batches, is to wait until the `records` peers its last batch
    /// answered are back: until `records` more are pending than were appended while it wrote.
    /// True if it must (the append that makes them says `wakeWriter`), false if they are already.
    ///
    /// Counting those appended during the write too ended the wait before the answered peers
    /// were back: at 50 writers with one request in flight each, ~20 of them arrived during each
    /// write, the wait ended when ~10 answered peers had returned, and batches held ~30 of the 50.
    mutating func awaitReturn(_ records: UInt64) -> Bool {
        let (sum, overflow) = records.addingReportingOverflow(appendedDuringWrite)
        let target = overflow ? .max : sum
        guard lastSeq &- ackedSeq < target else { return false }
        returnTarget = target
        return true
    }

    /// The writer still waits: no append has reached its target yet.
    var awaitsReturn: Bool { returnTarget != nil }

    /// The writer's wait is over (its deadline passed, or it was woken).
    mutating func stopAwaitingReturn() { returnTarget = nil }

    /// The writer, between two batches, is to wait until the pass that is appending records ends
    /// (`passEnded()`): true if it must, false when nothing is pending or no pass is open.
    mutating func awaitPassEnd() -> Bool {
        guard !pending.isEmpty, passOpen else { return false }
        writerAwaitsPass = true
        return true
    }

    /// The writer still waits for the pass to end.
    var awaitsPassEnd: Bool { writerAwaitsPass }

    /// The writer's wait for the pass is over (its deadline passed, or it was woken).
    mutating func stopAwaitingPassEnd() { writerAwaitsPass = false }

    /// A pass ended (its loop released its replies): true if the writer waits for it, to be woken
    /// (once).
    mutating func passEnded() -> Bool {
        passOpen = false
        defer { writerAwaitsPass = false }
        return writerAwaitsPass
    }

    /// Everything appended so far, for the writer; nil stops the writer (the next append restarts it).
    mutating func takeBatch() -> Batch? {
        guard failure == nil, !pending.isEmpty || rotation != nil else {
            writerRunning = false
            pending = []
            return nil
        }
        let batch = Batch(bytes: pending, lastSeq: lastSeq, rotation: rotation)
        inFlightBytes = pending.count
        pending = []
        pending.reserveCapacity(min(batch.bytes.count, 1 << 20))
        rotation = nil
        return batch
    }

    /// The writer is done with `batch`; returns the waiters to call and what to tell them.
    mutating func finished(_ batch: Batch, failure reason: String?) -> (ready: [Waiter], failure: String?) {
        inFlightBytes = 0
        if let reason { return fail(reason) }
        ackedSeq = batch.lastSeq
        appendedDuringWrite = lastSeq &- batch.lastSeq
        var ready: [Waiter] = []
        waiters.removeAll { waiter in
            guard waiter.ticket <= batch.lastSeq else { return false }
            ready.append(waiter.done)
            return true
        }
        return (ready, nil)
    }

    /// A write or fsync failed outside a batch (e.g. the once-a-second fsync): stop for good.
    mutating func fail(_ reason: String) -> (ready: [Waiter], failure: String?) {
        if failure == nil { failure = reason }
        let ready = waiters.map(\.done)
        waiters = []
        return (ready, failure)
    }

    /// Registers `done` for `ticket`, unless the answer is known already.
    mutating func wait(_ ticket: UInt64, _ done: @escaping Waiter) -> WaitOutcome {
        if ticket <= ackedSeq { return .now(failure: nil) }
        if let failure { return .now(failure: failure) }
        waiters.append((ticket, done))
        return .later
    }
}
