import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Shutdown: drain, let a compaction finish, close.
extension Journal {
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

    func finishClose(_ done: @escaping @Sendable () -> Void) {
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
