import Foundation
import RPCEntities
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// `rpcd repair [--data-dir DIR] [--force]`: cuts the damage out of a journal so the daemon can
/// start again, like `redis-check-aof --fix`. Refuses while a daemon holds the directory.
///
/// It never discards more than the damaged region without `--force`: it cuts a journal at its
/// first bad line only when no intact record follows (the damage runs to the end of the file, and
/// no later journal has records), saving what it cuts next to the file as
/// `journal.jsonl.cut-<unix time>`. When intact records follow the bad line, or the line is intact
/// but out of sequence, it refuses and says so; `--force` then cuts there anyway (with the same
/// backup). It never cuts a snapshot, and refuses when the journal needs a snapshot that is
/// missing (the journal starts after what the snapshot covers): cutting cannot bring it back.
enum RepairCommand {
    static let usage = "usage: rpcd repair [--data-dir DIR] [--force]   (default ./data; the daemon must be stopped)"

    static func run(_ arguments: [String]) -> Int32 {
        var dataDir = "./data"
        var force = false
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--data-dir":
                guard let value = rest.popFirst() else { return usageError("--data-dir needs a value") }
                dataDir = value
            case _ where argument.hasPrefix("--data-dir="):
                dataDir = String(argument.dropFirst("--data-dir=".count))
            case "--force":
                force = true
            case "--help", "-h":
                print(usage)
                return 0
            default:
                return usageError("unknown option '\(argument)' for repair")
            }
        }
        guard DataFiles(path: dataDir).exists else {
            return fail("data directory \(dataDir) does not exist; pass the --data-dir the daemon uses")
        }
        let directory: DataDirectory
        do {
            directory = try DataDirectory(path: dataDir)
        } catch {
            return fail("\(error)")
        }
        let files = directory.files
        var cuts = 0
        while cuts < 8 {
            let failure: Recovery.Failure
            do {
                let recovery = try Recovery.load(files, log: nil, mode: .readOnly)
                let torn = recovery.files.filter { $0.outcome.tornRecordBytes > 0 }
                    .map { "; the incomplete last record of \($0.path) (\($0.outcome.tornRecordBytes) bytes) is dropped at the next start" }
                print("rpcd repair: \(files.path) \(cuts == 0 ? "replays cleanly" : "replays now"): \(recovery.records) records, last seq \(recovery.lastSeq)\(torn.joined())")
                return 0
            } catch {
                failure = error
            }
            guard let file = failure.file, file != files.snapshot, let kind = failure.kind else {
                return fail(failure.description)
            }
            if kind == .missingSnapshot { return fail(failure.description) }
            let following: (count: Int, first: String?)
            do {
                following = try intactRecords(after: failure, in: file, files: files)
            } catch {
                return fail("cannot read \(file): \(error)")
            }
            // An intact but out-of-sequence line is not damage: cutting it discards it too.
            let discarded = following.count + (kind == .damaged ? 0 : 1)
            if discarded > 0 && !force {
                let which = kind == .damaged ? "\(following.count) intact record(s) follow it (the first at \(following.first ?? "?"))" : "the line is intact (\(discarded) intact record(s) from it on)"
                return fail("\(failure.problem); \(which): cutting here would discard them. Restore the data directory from a backup, or pass --force to cut at this line anyway (the cut bytes are kept in a backup file)")
            }
            do {
                let backup = try cut(file, at: failure.offset)
                print("rpcd repair: \(failure.problem): cut from this line to the end; the cut bytes are saved in \(backup)\(discarded > 0 ? " (--force: \(discarded) intact record(s) among them)" : "")")
            } catch {
                return fail("cannot cut \(file): \(error)")
            }
            cuts += 1
        }
        return fail("\(files.path) is still damaged after \(cuts) cuts; restore it from a backup")
    }

    /// What `rpcd repair` would do about `failure` (for `rpcd journal check`): one clause naming
    /// the command that fixes it, with `--force` when only that cuts it and what it then discards.
    static func advice(for failure: Recovery.Failure, files: DataFiles) -> String {
        let dir = "--data-dir \(files.path)"
        guard let file = failure.file, file != files.snapshot, let kind = failure.kind, kind != .missingSnapshot else {
            return failure.description.dropFirst(failure.problem.count).drop { $0 == ";" || $0 == " " }.description
        }
        guard let following = try? intactRecords(after: failure, in: file, files: files) else {
            return "restore the data directory from a backup"
        }
        let discarded = following.count + (kind == .damaged ? 0 : 1)
        if discarded == 0 {
            return "with the daemon stopped, `rpcd repair \(dir)` cuts \(file) from line \(failure.line) to its end (nothing intact is there; "
                + "the cut bytes are saved in a backup file), and the daemon then starts with every record before it"
        }
        let which = kind == .damaged
            ? "\(following.count) intact record(s) follow the damage (the first at \(following.first ?? "?"))"
            : "the line is intact but out of order (\(discarded) intact record(s) from it on)"
        return "\(which), so `rpcd repair` alone refuses: restore the data directory from a backup, or, with the daemon stopped, "
            + "`rpcd repair --force \(dir)` cuts \(file) from line \(failure.line) to its end, discarding them (they are saved in a backup file)"
    }

    /// Intact records after the failing line: in the rest of its file, and in the journals after it.
    private static func intactRecords(after failure: Recovery.Failure, in file: String, files: DataFiles) throws(Errno) -> (count: Int, first: String?) {
        var count = 0
        var first: String?
        let bytes = try FileIO.readAll(file) ?? []
        bytes.withUnsafeBytes { raw in
            guard let end = raw[min(failure.offset, raw.count)...].firstIndex(of: UInt8(ascii: "\n")) else { return }
            let found = JournalReplay.intactRecords(raw, from: end + 1)
            count = found.count
            if let offset = found.firstOffset {
                let line = failure.line + raw[failure.offset..<offset].filter { $0 == UInt8(ascii: "\n") }.count
                first = "\(file):\(line)"
            }
        }
        for later in files.journals.drop(while: { $0 != file }).dropFirst() {
            guard let bytes = try FileIO.readAll(later) else { continue }
            let found = bytes.withUnsafeBytes { JournalReplay.intactRecords($0) }
            if first == nil, found.count > 0 { first = later }
            count += found.count
        }
        return (count, first)
    }

    /// Saves `file` from `offset` to a backup, then truncates `file` there. Returns the backup's path.
    static func cut(_ file: String, at offset: Int) throws(Errno) -> String {
        let bytes = try FileIO.readAll(file) ?? []
        let stamp = "\(file).cut-\(Int(Date().timeIntervalSince1970))"
        var backup = stamp
        var suffix = 1
        while FileIO.exists(backup) {
            backup = "\(stamp).\(suffix)"
            suffix += 1
        }
        let out = try FileIO.open(backup, O_WRONLY | O_CREAT | O_EXCL)
        do {
            defer { FileIO.close(out) }
            try FileIO.writeAll(out, Array(bytes[min(offset, bytes.count)...]), path: backup)
            try FileIO.sync(out, path: backup)
        }
        let fd = try FileIO.open(file, O_WRONLY)
        defer { FileIO.close(fd) }
        try FileIO.truncate(fd, to: offset, path: file)
        try FileIO.sync(fd, path: file)
        return backup
    }

    private static func fail(_ message: String) -> Int32 {
        LogSink.stderr.write("rpcd repair: \(message)\n")
        return 1
    }

    private static func usageError(_ message: String) -> Int32 {
        LogSink.stderr.write("rpcd repair: \(message); \(usage)\n")
        return 2
    }
}
