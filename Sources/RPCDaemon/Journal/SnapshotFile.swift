import RPCEntities
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// Writes `snapshot.jsonl` crash-safely: temp file, fsync, rename, fsync the directory.
enum SnapshotFile {
    /// Returns the snapshot's size in bytes.
    static func write(_ state: consuming Entities, seq: UInt64, in directory: DataDirectory) throws(Errno) -> Int {
        let temp = directory.snapshotTemp
        let fd = try FileIO.open(temp, O_WRONLY | O_CREAT | O_TRUNC)
        var bytes = 0
        do throws(Errno) {
            defer { FileIO.close(fd) }
            let header = JournalSnapshot.header(seq: seq, records: JournalSnapshot.recordCount(state))
            try FileIO.writeAll(fd, header, path: temp)
            bytes += header.count
            var failure: Errno?
            JournalSnapshot.encodeRecords(consume state) { chunk in
                guard failure == nil else { return }
                do throws(Errno) {
                    try FileIO.writeAll(fd, chunk, path: temp)
                    bytes += chunk.count
                } catch {
                    failure = error
                }
            }
            if let failure { throw failure }
            try FileIO.sync(fd, path: temp)
        } catch {
            try? FileIO.unlink(temp)
            throw error
        }
        FileIO.crashPoint("compaction-snapshot-written")
        try FileIO.rename(temp, directory.snapshot)
        try FileIO.syncDirectory(directory.path)
        FileIO.crashPoint("compaction-snapshot-renamed")
        return bytes
    }
}
