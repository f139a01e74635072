import Dispatch
import RPCEntities
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// Startup: the snapshot and journals of a data directory, replayed into memory.
struct Recovery {
    var state: Entities
    var lastSeq: UInt64
    /// Records applied (snapshot records plus journal mutations).
    var records: Int
    var snapshotBytes: Int
    /// A compaction was cut short (journal.next.jsonl exists): finish it before serving.
    var unfinishedCompaction: Bool

    /// Why the start stops: one line, `FILE:LINE: reason` and what to do.
    struct Failure: Error, CustomStringConvertible {
        var description: String
        /// The damaged file, its line and the byte offset of that line (for `rpcd repair`).
        var file: String?
        var line = 0
        var offset = 0
    }

    /// Replays snapshot.jsonl, journal.jsonl and journal.next.jsonl. An incomplete last line of a
    /// journal is cut off with a warning; `repairing` skips that (repair reports it instead).
    static func load(_ directory: DataDirectory, log: Logger?, truncateTornTail: Bool = true) throws(Failure) -> Recovery {
        try? FileIO.unlink(directory.snapshotTemp)  // a compaction that never got to its rename
        var replay = JournalReplay()
        var snapshotBytes = 0
        let advice = "run `rpcd repair --data-dir \(directory.path)` to cut the file at that line (it keeps a backup of what it cuts), then start again"
        if let bytes = try read(directory.snapshot) {
            snapshotBytes = bytes.count
            let result = bytes.withUnsafeBytes { replay.replaySnapshot($0) }
            if case .failure(let failure) = result {
                throw Failure(
                    description: "\(directory.snapshot):\(failure.line): \(failure.reason); the snapshot is damaged: restore the data directory from a backup",
                    file: directory.snapshot, line: failure.line, offset: failure.offset)
            }
        }
        let unfinished = FileIO.exists(directory.nextJournal)
        for path in [directory.journal, directory.nextJournal] {
            guard let bytes = try read(path) else { continue }
            switch bytes.withUnsafeBytes({ replay.replayJournal($0) }) {
            case .failure(let failure):
                throw Failure(description: "\(path):\(failure.line): \(failure.reason); \(advice)", file: path, line: failure.line, offset: failure.offset)
            case .success(let outcome) where outcome.tornBytes > 0 && truncateTornTail:
                try truncate(path, to: outcome.validBytes)
                log?.warning(
                    "\(path): dropped \(outcome.tornBytes) bytes of an incomplete last record (left by a crash mid-write); "
                        + "the file now ends at byte \(outcome.validBytes), after the last complete record")
            case .success:
                break
            }
        }
        return Recovery(
            state: replay.state, lastSeq: replay.lastSeq, records: replay.applied, snapshotBytes: snapshotBytes,
            unfinishedCompaction: unfinished)
    }

    /// Ends a compaction cut short by a crash: a snapshot of the replayed state, then the journals
    /// go (every record in them is in the snapshot now).
    func finishCompaction(in directory: DataDirectory) throws(Errno) -> Int {
        let bytes = try SnapshotFile.write(state, seq: lastSeq, in: directory)
        try FileIO.unlink(directory.nextJournal)
        try FileIO.unlink(directory.journal)
        try FileIO.syncDirectory(directory.path)
        return bytes
    }

    private static func read(_ path: String) throws(Failure) -> [UInt8]? {
        do {
            return try FileIO.readAll(path)
        } catch {
            throw Failure(description: "cannot read \(path): \(error)")
        }
    }

    private static func truncate(_ path: String, to length: Int) throws(Failure) {
        do {
            let fd = try FileIO.open(path, O_WRONLY)
            defer { FileIO.close(fd) }
            try FileIO.truncate(fd, to: length, path: path)
            try FileIO.sync(fd, path: path)
        } catch {
            throw Failure(description: "cannot cut the incomplete last record of \(path): \(error)")
        }
    }
}

extension Daemon {
    /// The "State" stage of `serve`: lock the data directory, replay it, open the journal. Logs
    /// and returns nil when the daemon cannot start.
    static func openState(_ options: ServeOptions, log: Logger) -> (state: Entities, journal: Journal)? {
        let directory: DataDirectory
        do {
            directory = try DataDirectory(path: options.dataDir)
        } catch {
            log.error("\(error)")
            return nil
        }
        let started = DispatchTime.now()
        var recovery: Recovery
        do {
            recovery = try Recovery.load(directory, log: log)
        } catch {
            log.error("cannot start: \(error)")
            return nil
        }
        let ms = Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e6
        log.info(
            "loaded \(recovery.records) records from \(directory.path) in \(Int(ms)) ms "
                + "(\(recovery.state.users.count) users, \(recovery.state.buildings.count) buildings, last seq \(recovery.lastSeq))")
        do {
            if recovery.unfinishedCompaction {
                log.warning("finishing a compaction cut short by a crash")
                recovery.snapshotBytes = try recovery.finishCompaction(in: directory)
            }
            let journal = try Journal(
                directory: directory, policy: options.fsync, lastSeq: recovery.lastSeq,
                snapshotBytes: recovery.snapshotBytes, compactAfterBytes: options.compactAfterBytes, log: log)
            return (recovery.state, journal)
        } catch {
            log.error("cannot open the journal in \(directory.path): \(error)")
            return nil
        }
    }
}
