import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// The writer (on `queue`): takes the group commit's batches, writes and syncs them, waits for
/// the peers it answered to come back, and syncs once a second under `everysec`.
extension Journal {
    // MARK: - Writer (on `queue`)

    /// Writes batches until none is pending. `waitingForMore` false (a follower's pass that
    /// writes its own records): no wait for more to join a batch, none will come meanwhile.
    func drain(waitingForMore: Bool = true) {
        dispatchPrecondition(condition: .onQueue(queue))
        var wrote = false
        var released: (records: UInt64, syncNanoseconds: UInt64) = (0, 0)
        while true {
            // Group commit: after an fsync, the mutations that arrived during it make the next
            // batch. With a delay set, the writer first waits for more to join them, when some
            // are waiting already: fewer fsyncs (and fewer wake-ups and reply flushes) per
            // mutation under deep pipelines, at the price of the delay on every durable reply.
            // A mutation that finds the writer idle is never delayed, nor a follower's pass
            // (`waitingForMore` false), whose records are all appended.
            if wrote, waitingForMore, groupCommitDelayMicroseconds > 0, lock.withLock({ commit.hasPending }) {
                usleep(groupCommitDelayMicroseconds)
            } else if wrote, waitingForMore, policy == .always, groupCommitDelayMicroseconds == 0 {
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
                if batchesWritten &- restedAt >= Self.sustainedBatches { keepSpaceAhead() }
            }
        }
        if wrote || spaceEnd > journalBytes { cutSpacesWhenIdle() }
    }

    /// After a batch of `records` whose write and fsync took `nanoseconds`, waits (that long
    /// again, at least `minReturnWait` and at most `maxReturnWait`) until as many records are
    /// pending as it released:
    /// the peers whose replies it released answer within a round trip, and a batch that goes
    /// before they do holds the first of them and leaves the rest for the fsync after
    /// (batches alternate small and large). One peer, or a batch of one, is never waited for.
    /// The record that completes the count wakes the writer (`recorded()`): polling for it slept
    /// far longer than asked (timer slack and the wake-up).
    func awaitReturning(_ records: UInt64, for nanoseconds: UInt64) {
        guard records > 1 else { return }
        let deadline = Self.waitDeadline(nanoseconds, atLeast: Self.minReturnWait)
        guard lock.withLock({ commit.awaitReturn(records) }) else { return }
        awaitWake(until: deadline, while: { $0.awaitsReturn }, then: { $0.stopAwaitingReturn() })
    }

    /// With records pending from a pass that is still appending, waits until its loop ends the pass
    /// (`recorded()`), at most as long as the last write and fsync took (within 100 µs–1 ms).
    func awaitPassEnd(for nanoseconds: UInt64) {
        guard lock.withLock({ commit.awaitPassEnd() }) else { return }
        awaitWake(until: Self.waitDeadline(nanoseconds, atLeast: Self.minPassWait), while: { $0.awaitsPassEnd }, then: { $0.stopAwaitingPassEnd() })
    }

    /// `nanoseconds` from now, kept within `atLeast`…`maxReturnWait`.
    static func waitDeadline(_ nanoseconds: UInt64, atLeast floor: UInt64) -> DispatchTime {
        DispatchTime.now() + .nanoseconds(Int(min(max(nanoseconds, floor), maxReturnWait)))
    }

    /// Sleeps on `returned` (signalled by `recorded()`) while the commit says the writer still
    /// waits, until `deadline`; then ends the wait in the commit. A signal left over from a wait
    /// that timed out as its condition was met ends one sleep early: the loop asks again.
    func awaitWake(until deadline: DispatchTime, while waiting: (GroupCommit) -> Bool, then stop: (inout GroupCommit) -> Void) {
        while lock.withLock({ waiting(commit) }), returned.wait(timeout: deadline) == .success {}
        lock.withLock { stop(&commit) }
    }

    static let maxReturnWait: UInt64 = 1_000_000
    /// A peer's round trip (the reply's wake-up and send, its next request's read) is not
    /// shorter when an fsync is: without this floor a fast fsync (over spaces written ahead)
    /// timed the wait out before the peers were back, and batches fell small (twice the fsyncs).
    static let minReturnWait: UInt64 = 300_000
    /// The least a writer waits for a pass to end (`awaitPassEnd`).
    static let minPassWait: UInt64 = 100_000

    func write(_ batch: GroupCommit.Batch) throws(Errno) {
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

    func append(_ bytes: ArraySlice<UInt8>) throws(Errno) {
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

    func startEverySecondSync() {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + 1, repeating: 1, leeway: .milliseconds(100))
        timer.setEventHandler { [weak self] in self?.syncIfNeeded() }
        timer.resume()
        self.timer = timer
    }

    func syncIfNeeded() {
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
}
