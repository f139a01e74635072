import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Spaces written ahead of the journal's end under a sustained `fsync always` load.
extension Journal {
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
    func keepSpaceAhead() {
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

    /// Batches with no rest of `idleCut` between them before spaces are written ahead: a lone
    /// mutation, or a few, leave the journal as lines only. Counted across the writer's drains: a
    /// load that comes in bursts (a follower's, a rate-limited one) ends a drain between batches.
    static let sustainedBatches = 8
    /// Bytes of spaces kept ahead of the journal's end; 1 MiB is written and synced in ~0.8 ms.
    static let spaceAhead = 1 << 20
    static let spaces = [UInt8](repeating: UInt8(ascii: " "), count: 1 << 16)
    /// How long the writer stays idle before it cuts the spaces ahead (a pause in a load
    /// would otherwise cut and rewrite them).
    static let idleCut: DispatchTimeInterval = .milliseconds(20)

    /// Once no batch was written for `idleCut`, cuts the spaces ahead and counts the load from
    /// there. One check at a time, put off while batches go on: a timer per drain cost a wake of
    /// libdispatch's timer thread and of a worker each time the writer went idle between batches.
    func cutSpacesWhenIdle() {
        guard !restCheckArmed else { return }
        restCheckArmed = true
        checkRest(since: batchesWritten)
    }

    /// On the writer's queue, so never during a drain.
    private func checkRest(since written: Int) {
        queue.asyncAfter(deadline: .now() + Self.idleCut) { [weak self] in
            guard let self, !self.closed else { return }
            guard self.batchesWritten == written else { return self.checkRest(since: self.batchesWritten) }
            self.restCheckArmed = false
            self.restedAt = written
            self.cutSpaces()
        }
    }

    /// Cuts the file back to its last line. Never lengthens it: a file someone shortened
    /// meanwhile is left as it is (ftruncate would fill the gap with NUL bytes).
    func cutSpaces() {
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
    func timedSync() throws(Errno) {
        let started = DispatchTime.now().uptimeNanoseconds
        try FileIO.sync(fd, path: filePath, dataOnly: true)
        let micros = Int((DispatchTime.now().uptimeNanoseconds - started) / 1000)
        lock.withLock {
            published.lastFsyncMicroseconds = micros
            published.fsyncs &+= 1
        }
    }
}
