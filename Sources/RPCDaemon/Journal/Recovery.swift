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
    /// What each existing file held, in replay order (for `rpcd journal check|dump`).
    var files: [(path: String, outcome: JournalReplay.FileOutcome)]
    /// The snapshot's sequence number, if there is a snapshot.
    var snapshotSeq: UInt64?

    /// Why the start stops: one line, `FILE:LINE: reason` and what to do.
    struct Failure: Error, CustomStringConvertible {
        var description: String
        /// `FILE:LINE: reason` alone, without the advice.
        var problem: String
        /// The damaged file, its line and the byte offset of that line (for `rpcd repair`).
        var file: String?
        var line = 0
        var offset = 0
        var kind: JournalReplay.Failure.Kind?

        init(description: String) {
            self.description = description
            self.problem = description
        }

        init(file: String, _ failure: JournalReplay.Failure, advice: String) {
            problem = "\(file):\(failure.line): \(failure.reason)"
            description = "\(problem); \(advice)"
            self.file = file
            line = failure.line
            offset = failure.offset
            kind = failure.kind
        }
    }

    /// How `load` treats the directory: a start drops torn last lines (with a warning) and a
    /// leftover snapshot.tmp; `readOnly` changes nothing (check, dump, repair).
    enum Mode {
        case start, readOnly
    }

    /// Where a big file's lines are parsed a chunk ahead of their replay: a thread of the pool.
    static let parseAhead: JournalReplay.ThreadStarter = { body in DispatchQueue.global(qos: .userInitiated).async(execute: body) }

    /// Replays snapshot.jsonl, journal.jsonl and journal.next.jsonl.
    static func load(_ files: DataFiles, log: Logger?, mode: Mode = .start) throws(Failure) -> Recovery {
        if mode == .start {
            try? FileIO.unlink(files.snapshotTemp)  // a compaction that never got to its rename
            // The last run's backlog for followers: a directory restored since may hold another history.
            try? FileIO.unlink(files.previousJournal)
        }
        var replay = JournalReplay()
        replay.parsesAheadOn = Self.parseAhead
        replay.holdOrder()
        var snapshotBytes = 0
        var outcomes: [(path: String, outcome: JournalReplay.FileOutcome)] = []
        if let bytes = try read(files.snapshot, mode) {
            snapshotBytes = bytes.count
            switch bytes.withUnsafeBytes({ replay.replaySnapshot($0) }) {
            case .failure(let failure):
                throw Failure(file: files.snapshot, failure, advice: "the snapshot is damaged: restore the data directory from a backup (rpcd repair does not cut snapshots)")
            case .success(let outcome):
                outcomes.append((files.snapshot, outcome))
            }
        }
        let unfinished = FileIO.exists(files.nextJournal)
        for path in files.journals {
            guard let bytes = try read(path, mode) else { continue }
            switch bytes.withUnsafeBytes({ replay.replayJournal($0) }) {
            case .failure(let failure):
                throw Failure(file: path, failure, advice: advice(failure.kind, files))
            case .success(let outcome):
                outcomes.append((path, outcome))
                guard outcome.tornBytes > 0, mode == .start else { continue }
                // Kept before the cut, so nothing a crash left is lost to the start that drops it.
                let saved = outcome.tornRecordBytes > 0 ? try saveTail(of: path, bytes: bytes, from: outcome.validBytes) : nil
                try truncate(path, to: outcome.validBytes)
                if let saved {
                    let what = outcome.tornDescription.map { "bytes after the last newline (\($0))" }
                        ?? "bytes of an incomplete last record (left by a crash mid-write)"
                    log?.warning(
                        "\(path): dropped \(outcome.tornRecordBytes) \(what)"
                            + (outcome.spaceBytes > 0 ? " and the \(outcome.spaceBytes) bytes of spaces written ahead of it" : "")
                            + "; the file now ends at byte \(outcome.validBytes), after the last complete record; the cut bytes are saved in \(saved)")
                } else {
                    log?.info("\(path): dropped the \(outcome.spaceBytes) bytes of spaces written ahead of its end (the daemon stopped without cutting them)")
                }
            }
        }
        replay.releaseOrder()
        return Recovery(
            state: replay.state, lastSeq: replay.lastSeq, records: replay.applied, snapshotBytes: snapshotBytes,
            unfinishedCompaction: unfinished, files: outcomes, snapshotSeq: replay.snapshotSeq)
    }

    /// What to do about a journal that does not replay (one clause, no newline).
    static func advice(_ kind: JournalReplay.Failure.Kind, _ files: DataFiles) -> String {
        let check = "`rpcd journal check --data-dir \(files.path)`"
        switch kind {
        case .damaged:
            return "the file is damaged: see \(check), then run `rpcd repair --data-dir \(files.path)` to cut the damage "
                + "(it keeps a backup of what it cuts) and start again"
        case .missingSnapshot:
            return "restore the snapshot.jsonl that goes with this journal from a backup (rpcd repair cannot recreate it)"
        case .sequence, .inconsistent:
            return "the line is intact but does not follow from the records before it: see \(check); restore the data "
                + "directory from a backup, or cut the journal at this line with `rpcd repair --force --data-dir \(files.path)` "
                + "(it keeps a backup of what it cuts)"
        }
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

    /// A start maps its files (it holds the directory's lock, so nothing truncates them meanwhile);
    /// the tools, which may look at a running daemon's directory, copy them.
    private static func read(_ path: String, _ mode: Mode) throws(Failure) -> FileBytes? {
        do {
            if mode == .start { return try FileIO.map(path).map(FileBytes.mapped) }
            return try FileIO.readAll(path).map(FileBytes.copied)
        } catch {
            throw Failure(description: "cannot read \(path): \(error)")
        }
    }

    private enum FileBytes {
        case mapped(MappedFile)
        case copied([UInt8])

        var count: Int {
            switch self {
            case .mapped(let file): file.count
            case .copied(let bytes): bytes.count
            }
        }

        func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
            switch self {
            case .mapped(let file): file.withUnsafeBytes(body)
            case .copied(let bytes): bytes.withUnsafeBytes(body)
            }
        }
    }

    /// Writes the bytes of `path` from `offset` on to `PATH.torn-<UTC time>` beside it; returns its path.
    private static func saveTail(of path: String, bytes: FileBytes, from offset: Int) throws(Failure) -> String {
        var saved = "\(path).torn-\(Self.fileTime())"
        for n in 2..<100 where FileIO.exists(saved) { saved = "\(path).torn-\(Self.fileTime())-\(n)" }
        do {
            let fd = try FileIO.open(saved, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode: 0o600)
            defer { FileIO.close(fd) }
            let tail = bytes.withUnsafeBytes { Array($0[offset...]) }
            try FileIO.writeAll(fd, tail, path: saved)
            try FileIO.sync(fd, path: saved)
            let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
            try FileIO.syncDirectory(directory.isEmpty ? "/" : directory)
        } catch {
            throw Failure(description: "cannot save the bytes after the last record of \(path) to \(saved) before cutting them: \(error); free space or fix the directory's permissions")
        }
        return saved
    }

    /// `20261128T215012Z`: the UTC time, for names of files kept beside the journal.
    static func fileTime() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        return String(
            format: "%04d%02d%02dT%02d%02d%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday),
            Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
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
            recovery = try Recovery.load(directory.files, log: log)
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
                recovery.snapshotSeq = recovery.lastSeq
            }
            let journal = try Journal(
                directory: directory, policy: options.fsync, lastSeq: recovery.lastSeq,
                snapshotBytes: recovery.snapshotBytes, snapshotSeq: recovery.snapshotSeq ?? 0, compactAfterBytes: options.compactAfterBytes,
                groupCommitDelay: options.groupCommitDelay, log: log)
            Heap.releaseFreed()  // before the listeners: nothing else allocates yet
            return (recovery.state, journal)
        } catch {
            log.error("cannot open the journal in \(directory.path): \(error)")
            return nil
        }
    }
}
