import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

// Fsync policies (`FsyncPolicy`, declared with `ServeOptions`), like Redis `appendfsync`:
// always: a mutation's success is sent after the fsync covering it (survives kill -9 and power loss);
// everysec: after write(2), fsync once a second (survives kill -9, loses at most ~1 s on power loss);
// none: after write(2), the kernel flushes when it likes (survives kill -9 only).

/// The `MutationLog` of the daemon: appends journal lines under the dispatcher's lock (cheap: an
/// in-memory buffer), writes and fsyncs them on its own serial queue (never a socket queue) with
/// group commit, and compacts the journal into a snapshot off the request path.
///
/// Memory is bounded: when the writer is more than `maxBehindBytes` behind, `refusal()` refuses
/// mutations (an `internal` error saying to retry) rather than buffering without bound or blocking
/// the dispatcher's lock, which would stall reads too.
final class Journal: MutationLog, @unchecked Sendable {
    // @unchecked: `commit` is guarded by `lock`; the vars below "writer queue only" are touched
    // only on `queue`; `capture` is set once before the first request; the rest is immutable.
    let directory: DataDirectory
    let policy: FsyncPolicy
    let compactAfterBytes: Int
    /// Microseconds the writer waits, between two batches, for more mutations (`fsync always`).
    let groupCommitDelayMicroseconds: UInt32
    let log: Logger
    let lock = SpinningLock()
    /// The fields below, touched only on the owner's queue: see `Confined`.
    private struct Fields {
        var commit: GroupCommit
        var writerStartPending: Bool = false
        var writerWakePending: Bool = false
        var inlinePass: Bool = false
    }
    private let confined: Confined<Fields>

    /// Guarded by `lock`, and never accessed while another access to it is under way (`Confined`).
    var commit: GroupCommit { _read { yield confined.value.commit } _modify { yield &confined.value.commit } }
    /// A record found the writer idle; `recorded()` starts it. Guarded by `lock`.
    var writerStartPending: Bool { _read { yield confined.value.writerStartPending } _modify { yield &confined.value.writerStartPending } }
    /// A record ended the writer's wait for returning peers; `recorded()` wakes it. Guarded by `lock`.
    var writerWakePending: Bool { _read { yield confined.value.writerWakePending } _modify { yield &confined.value.writerWakePending } }
    /// A follower's pass is appending and writes what it appended itself (`endInlinePass`):
    /// `recorded()` leaves the writer to it. Guarded by `lock`.
    var inlinePass: Bool { _read { yield confined.value.inlinePass } _modify { yield &confined.value.inlinePass } }
    /// What the writer sleeps on while it waits for returning peers (`awaitReturning`). A
    /// semaphore, whose timeout is on the monotonic clock (a condition's is on the wall clock,
    /// which can be set back) and which keeps a signal given before the wait.
    let returned = DispatchSemaphore(value: 0)
    let queue = DispatchQueue(label: "rpcd.journal.writer")
    let compactionQueue = DispatchQueue(label: "rpcd.journal.compaction", qos: .utility)
    var capture: (@Sendable () -> (Entities, UInt64)?)?
    var timer: (any DispatchSourceTimer)?
    /// Figures for `system.stats`; guarded by `lock`.
    var published = JournalStats()
    /// The sequence number the snapshot covers (0: none); guarded by `lock`.
    var snapshotSequence: UInt64
    /// Told about every batch once it is durable, in order, and about snapshots; set before serving.
    var feed: ReplicationFeed?
    /// With `min_sync_replicas`: what must confirm a mutation besides the fsync; set before serving (leaders only).
    var syncGate: SyncGate?
    /// With a coordinator: the leader's lease, checked before a mutation and before its reply; set before serving.
    var fence: LeaseFence?

    // Writer queue only.
    /// Batches written since the start (`cutSpacesWhenIdle` tells a pause from a load).
    var batchesWritten = 0
    /// `batchesWritten` when the writer last rested `idleCut`: a load is sustained from there.
    var restedAt = 0
    /// A check for the writer's rest is scheduled (`cutSpacesWhenIdle`): one at a time.
    var restCheckArmed = false
    /// Writing spaces ahead failed once: no more (`keepSpaceAhead`).
    var spacesDisabled = false
    var fd: Int32
    var filePath: String
    var journalBytes: Int
    /// Where the spaces written ahead of the journal's end stop (`fsync always`): writes up to
    /// here change no file size, so the fsync after them has no metadata to write (`keepSpaceAhead`).
    var spaceEnd: Int
    var snapshotBytes: Int
    var unsynced = false
    var compacting = false
    var compactionDisabled = false
    /// A leader's snapshot is being put in place (`restart`).
    var restarting = false
    /// `close` was called: no compaction starts; `closed`: the file is closed.
    var closing = false
    var closed = false

    init(
        directory: DataDirectory, policy: FsyncPolicy, lastSeq: UInt64, snapshotBytes: Int, snapshotSeq: UInt64 = 0,
        compactAfterBytes: Int, groupCommitDelay: Double = 0, maxBehindBytes: Int = 64 << 20, log: Logger
    ) throws(Errno) {
        // Range-checked by the settings (at most 0.1 s); clamped again so no value can trap here.
        let delay = groupCommitDelay.isFinite ? min(max(groupCommitDelay, 0), 1) : 0
        if delay > 0 && policy != .always {
            log.warning("group_commit_delay has no effect with fsync \(policy.rawValue): only fsync always waits for an fsync before replying")
        }
        groupCommitDelayMicroseconds = policy == .always ? UInt32(delay * 1e6) : 0
        self.snapshotSequence = snapshotSeq
        self.directory = directory
        self.policy = policy
        self.compactAfterBytes = compactAfterBytes
        self.log = log
        confined = Confined(Fields(commit: GroupCommit(lastSeq: lastSeq, maxBehindBytes: maxBehindBytes)))
        let created = !FileIO.exists(directory.journal)
        fd = try FileIO.open(directory.journal, O_WRONLY | O_CREAT)
        if created { try FileIO.syncDirectory(directory.path) }
        filePath = directory.journal
        journalBytes = try FileIO.size(fd, path: directory.journal)
        spaceEnd = journalBytes
        published.bytes = journalBytes
        self.snapshotBytes = snapshotBytes
        if policy == .everysec { startEverySecondSync() }
    }

    /// Lets compaction copy the state at a known sequence number (under the dispatcher's lock).
    func attach(_ dispatcher: Dispatcher) {
        capture = { [weak self, weak dispatcher] in
            guard let self, let dispatcher else { return nil }
            return dispatcher.withState { state in (state, self.markRotation()) }
        }
    }

    // MARK: - MutationLog (called with the dispatcher's lock held, except whenDurable)

    func refusal() -> String? { lock.withLock { commit.refusal() } }

    func refusal(records count: Int) -> String? {
        if let reason = lock.withLock({ commit.refusal(records: count) }) { return reason }
        return (fence?.refusal() ?? syncGate?.refusal())?.errorMessage
    }

    func refusalError() -> RPCError? {
        if let reason = refusal() { return .internal("mutations are refused: \(reason)") }
        return fence?.refusal() ?? syncGate?.refusal()
    }

    var fencesReads: Bool { syncGate != nil }

    func readRefusal() -> RPCError? { fence?.readRefusal() }

    /// With a sync set: the last record while the set has not confirmed it (reads wait for it).
    func readFence() -> UInt64? {
        guard let syncGate else { return nil }
        let last = lock.withLock { commit.lastSeq }
        return syncGate.isConfirmed(last) ? nil : last
    }

    /// Durable here, then confirmed by the sync set when there is one.
    func whenConfirmed(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void) {
        // With a lease: a leader stopped past its deadline acknowledges nothing when it wakes.
        let checked = fence.map { Self.fenced(done, by: $0) } ?? done
        whenDurable(ticket) { [syncGate] failure in
            if let failure { return checked(Self.notSaved(failure)) }
            guard let syncGate else { return checked(nil) }
            syncGate.wait(ticket, checked)
        }
    }

    func record(_ body: JournalRecord.Body) -> UInt64? {
        lock.withLock { noteWriterNeeds(commit.append(body)) }
    }

    func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64? {
        lock.withLock { noteWriterNeeds(commit.append(body, at: seq)) }
    }

    func recordSealed(_ lines: UnsafeRawBufferPointer, first: UInt64, last: UInt64) -> UInt64? {
        lock.withLock { noteWriterNeeds(commit.appendSealed(lines, first: first, last: last)) }
    }

    /// Under `lock`: notes that `recorded()` must start or wake the writer, if the append asked for it.
    func noteWriterNeeds(_ appended: GroupCommit.Appended) -> UInt64 {
        if appended.startWriter { writerStartPending = true }
        if appended.wakeWriter { writerWakePending = true }
        return appended.seq
    }

    /// Starts the writer, or wakes it from its wait for returning peers, if a record asked for
    /// it (after the dispatcher's lock is released: a `queue.async` or a signal may wake a
    /// thread, a syscall the other loops would wait behind). Whoever calls first after the
    /// record does it, once. Ends a pass too: a writer waiting for it (`awaitPassEnd`) is woken.
    func recorded() {
        let (start, wake) = lock.withLock { inlinePass ? (false, false) : takeWriterNeeds() }  // a pass's end does it
        if start { queue.async { self.drain() } }
        if wake { returned.signal() }
    }

    /// Under `lock`: whether the writer is to be started or woken, as the records appended since
    /// the last call asked (once), and the pass that appended them is over.
    private func takeWriterNeeds() -> (start: Bool, wake: Bool) {
        defer { (writerStartPending, writerWakePending) = (false, false) }
        let passWake = commit.passEnded()
        return (writerStartPending, writerWakePending || passWake)
    }

    /// A follower's pass begins: what it appends, the pass writes itself at its end (`endInlinePass`).
    func beginInlinePass() {
        lock.withLock { inlinePass = true }
    }

    /// A follower's pass ends, on its own thread (never an event loop serving clients): when
    /// its appends found the writer idle (so they made this pass the writer, `startWriterIfIdle`),
    /// writes and syncs them here and now (true), rather than waking the writer for them and a
    /// worker for the acknowledgement after. At the leader's pace that is one thread woken per
    /// batch instead of three. Otherwise (the writer is busy, or nothing was appended) as
    /// `recorded()`.
    func endInlinePass() -> Bool {
        let (start, wake) = lock.withLock {
            inlinePass = false
            return takeWriterNeeds()
        }
        if wake { returned.signal() }
        guard start else { return false }
        queue.sync { drain(waitingForMore: false) }
        return true
    }

    // MARK: - The change feed

    /// Hands every batch to `feed` once it is durable, in order, and tells it of new snapshots.
    /// Set once, before serving.
    func attach(_ feed: ReplicationFeed) {
        self.feed = feed
    }

    /// The last durable sequence number and the one the snapshot covers (0: none).
    var sequences: (durable: UInt64, snapshot: UInt64) {
        lock.withLock { (commit.ackedSeq, snapshotSequence) }
    }

    /// `done`, given `LeaseFence.lateError` instead of a success decided after the lease's deadline.
    private static func fenced(_ done: @escaping @Sendable (RPCError?) -> Void, by fence: LeaseFence) -> @Sendable (RPCError?) -> Void {
        { error in done(error == nil && !fence.isValid ? LeaseFence.lateError : error) }
    }

    /// Waits until `ticket` (nil: the last record written) is durable: nil, or why it cannot be.
    /// Blocks the caller: for the coordinator's queue, never an event loop's.
    func waitDurable(_ ticket: UInt64?) -> String? {
        let ticket = ticket ?? lock.withLock { commit.lastSeq }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var failure: String?
        whenDurable(ticket) { why in
            failure = why
            done.signal()
        }
        done.wait()
        return failure
    }

    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) {
        let outcome = lock.withLock { commit.wait(ticket, done) }
        if case .now(let failure) = outcome { done(failure) }
    }

    /// Journal size, the latency of the last fsync, and the group commit's counts (any thread).
    func stats() -> JournalStats {
        lock.withLock { published }
    }
}
