import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Compaction (rotate, snapshot, rename) and a follower's restart from its leader's snapshot.
extension Journal {
    /// Starts the next journal: later records go there while the snapshot is written.
    func rotate() throws(Errno) {
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

    // MARK: - Compaction

    /// Called inside `Dispatcher.withState`: the state copy and this sequence number match.
    func markRotation() -> UInt64 {
        let (seq, start) = lock.withLock { commit.markRotation() }
        if start { queue.async { self.drain() } }
        return seq
    }

    func maybeCompact() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !compacting, !closing, !compactionDisabled, !restarting, journalBytes >= compactAfterBytes, journalBytes >= snapshotBytes,
            let capture
        else { return }
        compacting = true
        compactionQueue.async { self.compact(capture) }
    }

    /// Snapshot (temp file, fsync, rename, fsync dir) then the next journal replaces the old one.
    /// A crash at any point leaves files that replay to every acknowledged mutation.
    func compact(_ capture: @Sendable () -> (Entities, UInt64)?) {
        let started = DispatchTime.now()
        guard let (state, seq) = capture() else { return }
        dropKeptJournal()
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

    func finishCompaction(seq: UInt64, snapshotBytes bytes: Int, started: DispatchTime) {
        dispatchPrecondition(condition: .onQueue(queue))
        compacting = false
        guard !closed else { return }  // stopped before it finished: the next start finishes it
        guard filePath == directory.nextJournal else {
            compactionDisabled = true  // the rotation never happened (the journal failed first)
            return
        }
        let kept = keepPreviousJournal()
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
        feed?.compacted(at: seq, keptJournal: kept)
        let ms = (DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1_000_000
        log.info("compacted: snapshot at seq \(seq) (\(bytes) bytes) in \(ms) ms; journal restarted")
    }

    /// The journal the last compaction kept goes before this one writes its snapshot, so at its
    /// peak the disk holds what it did before journals were kept (this one keeps the current
    /// journal at its end). Subscribers behind the snapshot get the snapshot meanwhile.
    private func dropKeptJournal() {
        feed?.stopReadingKeptJournal(because: nil)
        try? FileIO.unlink(directory.previousJournal)
    }

    /// The journal the compaction replaces stays as `journal.prev.jsonl` (a second name, so
    /// `journal.jsonl` is never missing), replacing the one before: a follower that fell a little
    /// behind the new snapshot gets the records it misses from it, not the whole snapshot (the
    /// one before went when this compaction began). Whether it was kept (best effort: the data is
    /// in the snapshot).
    private func keepPreviousJournal() -> Bool {
        do {
            try FileIO.link(directory.journal, directory.previousJournal)
            return true
        } catch {
            log.debug("compaction: not keeping the old journal for followers: \(error)")
            return false
        }
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
    func startOver(at seq: UInt64, snapshotBytes bytes: Int) -> String? {
        dispatchPrecondition(condition: .onQueue(queue))
        restarting = false
        do {
            // An empty journal replaces the old ones (whose records the snapshot holds now).
            let next = try FileIO.open(directory.journal + ".new", O_WRONLY | O_CREAT | O_TRUNC)
            do {
                try? FileIO.unlink(directory.nextJournal)
                try? FileIO.unlink(directory.previousJournal)  // records of the history the snapshot replaces
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
}
