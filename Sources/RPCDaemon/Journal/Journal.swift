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
    private let groupCommitDelayMicroseconds: UInt32
    private let log: Logger
    private let lock = SpinningLock()
    /// Guarded by `lock`, and never accessed while another access to it is under way: unchecked,
    /// as the run-time exclusivity check (~75 instructions) ran for every mutation recorded.
    @exclusivity(unchecked) private var commit: GroupCommit
    /// A record found the writer idle; `recorded()` starts it. Guarded by `lock`.
    @exclusivity(unchecked) private var writerStartPending = false
    /// A record ended the writer's wait for returning peers; `recorded()` wakes it. Guarded by `lock`.
    @exclusivity(unchecked) private var writerWakePending = false
    /// What the writer sleeps on while it waits for returning peers (`awaitReturning`). A
    /// semaphore, whose timeout is on the monotonic clock (a condition's is on the wall clock,
    /// which can be set back) and which keeps a signal given before the wait.
    private let returned = DispatchSemaphore(value: 0)
    private let queue = DispatchQueue(label: "rpcd.journal.writer")
    private let compactionQueue = DispatchQueue(label: "rpcd.journal.compaction", qos: .utility)
    private var capture: (@Sendable () -> (Entities, UInt64)?)?
    private var timer: (any DispatchSourceTimer)?
    /// Figures for `system.stats`; guarded by `lock`.
    private var published = JournalStats()
    /// The sequence number the snapshot covers (0: none); guarded by `lock`.
    private var snapshotSequence: UInt64
    /// Told about every batch once it is durable, in order, and about snapshots; set before serving.
    private var feed: ReplicationFeed?

    // Writer queue only.
    /// Batches written since the start (`cutSpacesWhenIdle` tells a pause from a load).
    private var batchesWritten = 0
    /// Writing spaces ahead failed once: no more (`keepSpaceAhead`).
    private var spacesDisabled = false
    private var fd: Int32
    private var filePath: String
    private var journalBytes: Int
    /// Where the spaces written ahead of the journal's end stop (`fsync always`): writes up to
    /// here change no file size, so the fsync after them has no metadata to write (`keepSpaceAhead`).
    private var spaceEnd: Int
    private var snapshotBytes: Int
    private var unsynced = false
    private var compacting = false
    private var compactionDisabled = false
    /// A leader's snapshot is being put in place (`restart`).
    private var restarting = false
    /// `close` was called: no compaction starts; `closed`: the file is closed.
    private var closing = false
    private var closed = false

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
        self.commit = GroupCommit(lastSeq: lastSeq, maxBehindBytes: maxBehindBytes)
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

    func refusal(records count: Int) -> String? { lock.withLock { commit.refusal(records: count) } }

    func record(_ body: JournalRecord.Body) -> UInt64? {
        lock.withLock { noteWriterNeeds(commit.append(body)) }
    }

    func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64? {
        lock.withLock { noteWriterNeeds(commit.append(body, at: seq)) }
    }

    /// Under `lock`: notes that `recorded()` must start or wake the writer, if the append asked for it.
    private func noteWriterNeeds(_ appended: GroupCommit.Appended) -> UInt64 {
        if appended.startWriter { writerStartPending = true }
        if appended.wakeWriter { writerWakePending = true }
        return appended.seq
    }

    /// Starts the writer, or wakes it from its wait for returning peers, if a record asked for
    /// it (after the dispatcher's lock is released: a `queue.async` or a signal may wake a
    /// thread, a syscall the other loops would wait behind). Whoever calls first after the
    /// record does it, once. Ends a pass too: a writer waiting for it (`awaitPassEnd`) is woken.
    func recorded() {
        let (start, wake) = lock.withLock {
            defer { (writerStartPending, writerWakePending) = (false, false) }
            let passWake = commit.passEnded()
            return (writerStartPending, writerWakePending || passWake)
        }
        if start { queue.async { self.drain() } }
        if wake { returned.signal() }
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

    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) {
        let outcome = lock.withLock { commit.wait(ticket, done) }
        if case .now(let failure) = outcome { done(failure) }
    }

    // MARK: - Writer (on `queue`)

    private func drain() {
        dispatchPrecondition(condition: .onQueue(queue))
        var wrote = false
        var released: (records: UInt64, syncNanoseconds: UInt64) = (0, 0)
        let firstBatch = batchesWritten
        while true {
            // Group commit: after an fsync, the mutations that arrived during it make the next
            // batch. With a delay set, the writer first waits for more to join them, when some
            // are waiting already: fewer fsyncs (and fewer wake-ups and reply flushes) per
            // mutation under deep pipelines, at the price of the delay on every durable reply.
            // A mutation that finds the writer idle is never delayed.
            if wrote, groupCommitDelayMicroseconds > 0, lock.withLock({ commit.hasPending }) {
                usleep(groupCommitDelayMicroseconds)
            } else if wrote, policy == .always, groupCommitDelayMicroseconds == 0 {
                awaitReturning(released.records, for: released.syncNanoseconds)
                awaitPassEnd(for: released.syncNanoseconds)
            }
            // The batch, and how many records it holds (all those after the last durable one).
            guard let (batch, records) = lock.withLock({ () -> (GroupCommit.Batch, UInt64)? in
                let durable = commit.ackedSeq
                return commit.takeBatch().map { ($0, $0.lastSeq &- durable) }
            }) else { break }
            let started = DispatchTime.now().uptimeNanoseconds
            wrote = true
            batchesWritten &+= 1
            var failure: String?
            do {
                try write(batch)
            } catch {
                failure = "\(error)"
                log.error("journal write failed: \(error); mutations are refused from now on, reads still work")
            }
            released = (records, DispatchTime.now().uptimeNanoseconds &- started)
            let bytes = journalBytes
            let (ready, result) = lock.withLock {
                published.bytes = bytes
                if failure == nil, records > 0 {
                    published.batches &+= 1
                    published.records &+= Int(truncatingIfNeeded: records)
                }
                return commit.finished(batch, failure: failure)
            }
            // The feed first: a client that got its reply and subscribes from its sequence number
            // must not be told it is ahead of the leader.
            if failure == nil, !batch.bytes.isEmpty { feed?.published(batch.bytes, lastSeq: batch.lastSeq) }
            for done in ready { done(result) }
            if failure == nil {
                maybeCompact()
                if batchesWritten &- firstBatch >= Self.sustainedBatches { keepSpaceAhead() }
            }
        }
        if spaceEnd > journalBytes { cutSpacesWhenIdle() }
    }

    /// After a batch of `records` whose write and fsync took `nanoseconds`, waits (that long
    /// again, at least `minReturnWait` and at most `maxReturnWait`) until as many records are
    /// pending as it released:
    /// the peers whose replies it released answer within a round trip, and a batch that goes
    /// before they do holds the first of them and leaves the rest for the fsync after
    /// (batches alternate small and large). One peer, or a batch of one, is never waited for.
    /// The record that completes the count wakes the writer (`recorded()`): polling for it slept
    /// far longer than asked (timer slack and the wake-up).
    private func awaitReturning(_ records: UInt64, for nanoseconds: UInt64) {
        guard records > 1 else { return }
        let deadline = Self.waitDeadline(nanoseconds, atLeast: Self.minReturnWait)
        guard lock.withLock({ commit.awaitReturn(records) }) else { return }
        awaitWake(until: deadline, while: { $0.awaitsReturn }, then: { $0.stopAwaitingReturn() })
    }

    /// With records pending from a pass that is still appending, waits until its loop ends the pass
    /// (`recorded()`), at most as long as the last write and fsync took (within 100 µs–1 ms).
    private func awaitPassEnd(for nanoseconds: UInt64) {
        guard lock.withLock({ commit.awaitPassEnd() }) else { return }
        awaitWake(until: Self.waitDeadline(nanoseconds, atLeast: Self.minPassWait), while: { $0.awaitsPassEnd }, then: { $0.stopAwaitingPassEnd() })
    }

    /// `nanoseconds` from now, kept within `atLeast`…`maxReturnWait`.
    private static func waitDeadline(_ nanoseconds: UInt64, atLeast floor: UInt64) -> DispatchTime {
        DispatchTime.now() + .nanoseconds(Int(min(max(nanoseconds, floor), maxReturnWait)))
    }

    /// Sleeps on `returned` (signalled by `recorded()`) while the commit says the writer still
    /// waits, until `deadline`; then ends the wait in the commit. A signal left over from a wait
    /// that timed out as its condition was met ends one sleep early: the loop asks again.
    private func awaitWake(until deadline: DispatchTime, while waiting: (GroupCommit) -> Bool, then stop: (inout GroupCommit) -> Void) {
        while lock.withLock({ waiting(commit) }), returned.wait(timeout: deadline) == .success {}
        lock.withLock { stop(&commit) }
    }

    private static let maxReturnWait: UInt64 = 1_000_000
    /// A peer's round trip (the reply's wake-up and send, its next request's read) is not
    /// shorter when an fsync is: without this floor a fast fsync (over spaces written ahead)
    /// timed the wait out before the peers were back, and batches fell small (twice the fsyncs).
    private static let minReturnWait: UInt64 = 300_000
    /// The least a writer waits for a pass to end (`awaitPassEnd`).
    private static let minPassWait: UInt64 = 100_000

    private func write(_ batch: GroupCommit.Batch) throws(Errno) {
        if let rotation = batch.rotation {
            try append(batch.bytes[..<rotation.offset])
            cutSpaces()
            try FileIO.sync(fd, path: filePath, dataOnly: true)
            try rotate()
            try append(batch.bytes[rotation.offset...])
        } else {
            try append(batch.bytes[...])
        }
        if policy == .always {
            try timedSync()
        } else {
            unsynced = true
        }
    }

    private func append(_ bytes: ArraySlice<UInt8>) throws(Errno) {
        guard !bytes.isEmpty else { return }
        let (fd, path, at) = (fd, filePath, journalBytes)
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(Errno) in try FileIO.writeAll(fd, buffer, at: at, path: path) }
        }
        do {
            try result.get()
        } catch {
            // Best effort: do not leave half a batch behind for the next start to replay.
            try? FileIO.truncate(fd, to: journalBytes, path: filePath)
            spaceEnd = journalBytes
            throw error
        }
        journalBytes += bytes.count
    }

    // MARK: - Spaces written ahead

    /// Under a sustained load (`fsync always`), keeps spaces written and synced ahead of the
    /// journal's end, so the fsyncs of the next batches have no metadata to write: a write that
    /// extends a file makes its fsync write the inode too (on ext4 more metadata), one more
    /// device write each, where a write over bytes already there does not: a shorter fsync, and
    /// more durable creates a second.
    ///
    /// Written between batches, while no record waits (its peers have yet to answer) or when the
    /// spaces run short; cut again once the writer has been idle for `idleCut` (`cutSpacesWhenIdle`)
    /// and at rotation and shutdown, so a journal at rest is lines only: `nc` replays it, and
    /// an operator who truncates it cuts a record, not spaces. A crash under load leaves them at
    /// the end of the file; a start drops them (`JournalReplay` reports them apart from a torn
    /// record). Best effort: a write or sync that fails (a full disk) leaves none ahead, and
    /// batches extend the file as they used to.
    private func keepSpaceAhead() {
        let ahead = spaceEnd - journalBytes
        guard policy == .always, !spacesDisabled, ahead < Self.spaceAhead / 2 else { return }
        guard ahead < Self.spaceAhead / 8 || !lock.withLock({ commit.hasPending }) else { return }
        var at = max(spaceEnd, journalBytes)
        let to = (journalBytes + Self.spaceAhead + 4095) & ~4095
        spaceEnd = to  // `cutSpaces` cuts everything past the last line, whatever is written
        do {
            while at < to {
                let count = min(Self.spaces.count, to - at)
                try Self.spaces.withUnsafeBytes { spaces in
                    try FileIO.writeAll(fd, UnsafeRawBufferPointer(rebasing: spaces[..<count]), at: at, path: filePath, faults: false)
                }
                at += count
            }
            // Unsynced, the spaces would go out with the next batch's fsync and make it the slow one.
            try FileIO.sync(fd, path: filePath, dataOnly: true, faults: false)
        } catch {
            // A full disk, or worse: blocks under spaces not known to be written could read back
            // as NUL bytes after a crash, which a start takes for damage. No more spaces ahead.
            cutSpaces()
            spacesDisabled = true
            log.warning("stopped writing spaces ahead of \(filePath)'s end (\(error)); mutations go on, each fsync also writing the file's new size")
        }
    }

    /// Batches in a row (one `drain`) before spaces are written ahead: a lone mutation, or a
    /// few, leave the journal as lines only.
    static let sustainedBatches = 8
    /// Bytes of spaces kept ahead of the journal's end; 1 MiB is written and synced in ~0.8 ms.
    static let spaceAhead = 1 << 20
    private static let spaces = [UInt8](repeating: UInt8(ascii: " "), count: 1 << 16)
    /// How long the writer stays idle before it cuts the spaces ahead (a pause in a load
    /// would otherwise cut and rewrite them).
    static let idleCut: DispatchTimeInterval = .milliseconds(20)

    /// Cuts the spaces ahead once no batch was written for `idleCut`.
    private func cutSpacesWhenIdle() {
        let written = batchesWritten
        queue.asyncAfter(deadline: .now() + Self.idleCut) { [weak self] in
            guard let self, self.batchesWritten == written, !self.closed else { return }
            self.cutSpaces()
        }
    }

    /// Cuts the file back to its last line. Never lengthens it: a file someone shortened
    /// meanwhile is left as it is (ftruncate would fill the gap with NUL bytes).
    private func cutSpaces() {
        guard spaceEnd > journalBytes else { return }
        spaceEnd = journalBytes
        do {
            guard try FileIO.size(fd, path: filePath) > journalBytes else { return }
            try FileIO.truncate(fd, to: journalBytes, path: filePath)
        } catch {
            log.warning("could not cut the spaces written ahead at the end of \(filePath): \(error); the next start drops them")
        }
    }

    /// The fsync that covers appended records, timed for `system.stats`.
    private func timedSync() throws(Errno) {
        let started = DispatchTime.now().uptimeNanoseconds
        try FileIO.sync(fd, path: filePath, dataOnly: true)
        let micros = Int((DispatchTime.now().uptimeNanoseconds - started) / 1000)
        lock.withLock {
            published.lastFsyncMicroseconds = micros
            published.fsyncs &+= 1
        }
    }

    /// Journal size, the latency of the last fsync, and the group commit's counts (any thread).
    func stats() -> JournalStats {
        lock.withLock { published }
    }

    /// Starts the next journal: later records go there while the snapshot is written.
    private func rotate() throws(Errno) {
        let next = try FileIO.open(directory.nextJournal, O_WRONLY | O_CREAT | O_TRUNC)
        do {
            try FileIO.syncDirectory(directory.path)
        } catch {
            FileIO.close(next)
            throw error
        }
        FileIO.crashPoint("compaction-rotated")
        FileIO.close(fd)
        fd = next
        filePath = directory.nextJournal
        journalBytes = 0
        spaceEnd = 0
    }

    private func startEverySecondSync() {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.syncIfNeeded() }
        timer.resume()
        self.timer = timer
    }

    private func syncIfNeeded() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard unsynced else { return }
        do {
            try timedSync()
            unsynced = false
        } catch {
            log.error("journal fsync failed: \(error); mutations are refused from now on, reads still work")
            let (ready, result) = lock.withLock { commit.fail("\(error)") }
            for done in ready { done(result) }
        }
    }

    // MARK: - Compaction

    /// Called inside `Dispatcher.withState`: the state copy and this sequence number match.
    private func markRotation() -> UInt64 {
        let (seq, start) = lock.withLock { commit.markRotation() }
        if start { queue.async { self.drain() } }
        return seq
    }

    private func maybeCompact() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !compacting, !closing, !compactionDisabled, !restarting, journalBytes >= compactAfterBytes, journalBytes >= snapshotBytes,
            let capture
        else { return }
        compacting = true
        compactionQueue.async { self.compact(capture) }
    }

    /// Snapshot (temp file, fsync, rename, fsync dir) then the next journal replaces the old one.
    /// A crash at any point leaves files that replay to every acknowledged mutation.
    private func compact(_ capture: @Sendable () -> (Entities, UInt64)?) {
        let started = DispatchTime.now()
        guard let (state, seq) = capture() else { return }
        if Faults.shared.compactionDelayMicroseconds > 0 { usleep(Faults.shared.compactionDelayMicroseconds) }  // tests only
        do {
            // The last copy of the captured state: the snapshot lets go of each shard once written.
            let bytes = try SnapshotFile.write(consume state, seq: seq, in: directory)
            queue.async { self.finishCompaction(seq: seq, snapshotBytes: bytes, started: started) }
        } catch {
            log.error("compaction failed: \(error); the journal keeps growing in \(directory.nextJournal) until the next start")
            queue.async {
                self.compacting = false
                self.compactionDisabled = true
            }
        }
    }

    private func finishCompaction(seq: UInt64, snapshotBytes bytes: Int, started: DispatchTime) {
        dispatchPrecondition(condition: .onQueue(queue))
        compacting = false
        guard !closed else { return }  // stopped before it finished: the next start finishes it
        guard filePath == directory.nextJournal else {
            compactionDisabled = true  // the rotation never happened (the journal failed first)
            return
        }
        do {
            try FileIO.rename(directory.nextJournal, directory.journal)
            try FileIO.syncDirectory(directory.path)
        } catch {
            log.error("compaction could not replace the journal: \(error); it resumes at the next start")
            compactionDisabled = true
            return
        }
        FileIO.crashPoint("compaction-journal-renamed")
        filePath = directory.journal
        snapshotBytes = bytes
        lock.withLock { snapshotSequence = seq }
        feed?.compacted(at: seq)
        let ms = (DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000
        log.info("compacted: snapshot at seq \(seq) (\(bytes) bytes) in \(ms) ms; journal restarted")
    }

    // MARK: - A follower's snapshot

    /// Replaces the files with a leader's snapshot of `state` at `seq`: the snapshot is written
    /// (after any compaction under way, on the same queue), then the journal starts empty, at
    /// `seq + 1`. The caller stops applying records until `done` (any thread) says it worked
    /// (nil) or why not. Nothing may be recorded meanwhile.
    func restart(with state: Entities, at seq: UInt64, _ done: @escaping @Sendable (_ failure: String?) -> Void) {
        queue.async {
            self.drain()  // what was recorded before goes to the old journal first
            self.restarting = true  // no compaction starts now: it would capture the old state
            self.compactionQueue.async {
                let bytes: Int
                do {
                    bytes = try SnapshotFile.write(state, seq: seq, in: self.directory)
                } catch {
                    self.queue.async { self.restarting = false }
                    return done("cannot write the leader's snapshot: \(error)")
                }
                self.queue.async { done(self.startOver(at: seq, snapshotBytes: bytes)) }
            }
        }
    }

    /// The snapshot at `seq` is in place: drop the journals, open an empty one.
    private func startOver(at seq: UInt64, snapshotBytes bytes: Int) -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        restarting = false
        do {
            // An empty journal replaces the old ones (whose records the snapshot holds now).
            let next = try FileIO.open(directory.journal + ".new", O_WRONLY | O_CREAT | O_TRUNC)
            do {
                try? FileIO.unlink(directory.nextJournal)
                try FileIO.rename(directory.journal + ".new", directory.journal)
                try FileIO.syncDirectory(directory.path)
            } catch {
                FileIO.close(next)
                throw error
            }
            FileIO.close(fd)
            fd = next
        } catch {
            log.error("cannot start a new journal after the leader's snapshot: \(error); mutations are refused from now on")
            let (ready, result) = lock.withLock { commit.fail("\(error)") }
            for waiter in ready { waiter(result) }
            return "\(error)"
        }
        filePath = directory.journal
        journalBytes = 0
        spaceEnd = 0
        snapshotBytes = bytes
        unsynced = false
        lock.withLock {
            commit.restart(at: seq)
            snapshotSequence = seq
            published.bytes = 0
        }
        feed?.restarted(at: seq)
        return nil
    }

    // MARK: - Shutdown

    /// Writes and syncs what is pending, closes the file, then calls `done` (on the writer queue).
    /// A compaction under way is let finish first (for at most `compactionGrace`): a stop cut in
    /// it would leave the next start to write the snapshot again before it serves.
    func close(compactionGrace: DispatchTimeInterval = .seconds(5), _ done: @escaping @Sendable () -> Void) {
        queue.async {
            self.drain()
            self.closing = true  // no compaction starts from now on
            guard self.compacting else { return self.finishClose(done) }
            self.log.info("letting the compaction under way finish before stopping")
            // The compaction's last step (`finishCompaction`) is queued on `queue` before this.
            self.compactionQueue.async { self.queue.async { self.finishClose(done) } }
            self.queue.asyncAfter(deadline: .now() + compactionGrace) {
                guard !self.closed else { return }
                self.log.warning("stopping with the compaction unfinished; the next start finishes it")
                self.finishClose(done)
            }
        }
    }

    private func finishClose(_ done: @escaping @Sendable () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !closed else { return }
        closed = true
        drain()
        timer?.cancel()
        cutSpaces()  // a stopped daemon leaves lines only
        if unsynced { try? FileIO.sync(fd, path: filePath, dataOnly: true) }
        FileIO.close(fd)
        done()
    }
}
