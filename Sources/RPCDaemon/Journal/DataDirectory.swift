import Foundation
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// The data directory: its file names, and the advisory lock that keeps it to one daemon.
///
///     LOCK                 flock'ed by the daemon (holds its pid)
///     snapshot.jsonl       the live state at some sequence number (header + request lines)
///     journal.jsonl        mutations applied after (or overlapping) the snapshot
///     journal.next.jsonl   only during a compaction: mutations after the snapshot being written
///     snapshot.tmp         only during a compaction: the snapshot being written
///     journal.prev.jsonl   the journal before the last compaction, whose records the snapshot
///                          holds: kept for followers a little behind it until the next
///                          compaction begins (never replayed; a start removes it)
final class DataDirectory: @unchecked Sendable {
    // @unchecked: every stored property is immutable; the lock fd stays open for the process's life.
    let path: String
    private let lockFD: Int32

    /// The file names, for readers that do not lock (`rpcd journal check|dump`).
    var files: DataFiles { DataFiles(path: path) }
    var journal: String { files.journal }
    var nextJournal: String { files.nextJournal }
    var previousJournal: String { files.previousJournal }
    var snapshot: String { files.snapshot }
    var snapshotTemp: String { files.snapshotTemp }
    var lockFile: String { path + "/LOCK" }

    /// Why the directory cannot be used: one line, saying what to do.
    struct OpenError: Error, CustomStringConvertible {
        var description: String
    }

    /// Creates the directory if missing and locks it; fails if another rpcd holds it.
    init(path: String) throws(OpenError) {
        self.path = path
        do {
            try FileIO.makeDirectories(path)
        } catch {
            throw OpenError(description: "cannot create data directory \(path) (\(error)); create it, or pass another --data-dir")
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw OpenError(description: "data directory \(path) is not a directory; pass another --data-dir")
        }
        let lockPath = path + "/LOCK"
        do {
            lockFD = try FileIO.open(lockPath, O_RDWR | O_CREAT)
        } catch {
            throw OpenError(description: "data directory \(path) is not writable (\(error)); fix its permissions, or pass another --data-dir")
        }
        do {
            guard try FileIO.tryLock(lockFD, path: lockPath) else {
                let holder = String(decoding: ((try? FileIO.readAll(lockPath)) ?? nil) ?? [], as: UTF8.self)
                let pid = holder.trimmingCharacters(in: .whitespacesAndNewlines)
                FileIO.close(lockFD)
                throw OpenError(description: "data directory \(path) is in use by another rpcd\(pid.isEmpty ? "" : " (pid \(pid))"); stop it, or pass another --data-dir")
            }
            try FileIO.truncate(lockFD, to: 0, path: lockPath)
            try FileIO.writeAll(lockFD, Array("\(getpid())\n".utf8), path: lockPath)
        } catch let error as OpenError {
            throw error
        } catch {
            FileIO.close(lockFD)
            throw OpenError(description: "cannot lock data directory \(path): \(error)")
        }
        // Probe that files can be created (a read-only mount lets us open LOCK if it exists).
        let probe = path + "/.write-test"
        do {
            let fd = try FileIO.open(probe, O_WRONLY | O_CREAT | O_TRUNC)
            FileIO.close(fd)
            try FileIO.unlink(probe)
        } catch {
            FileIO.close(lockFD)
            throw OpenError(description: "data directory \(path) is not writable (\(error)); fix its permissions, or pass another --data-dir")
        }
    }
}

/// The names of a data directory's files, without opening or locking anything.
struct DataFiles: Sendable {
    let path: String

    var journal: String { path + "/journal.jsonl" }
    var nextJournal: String { path + "/journal.next.jsonl" }
    var previousJournal: String { path + "/journal.prev.jsonl" }
    var snapshot: String { path + "/snapshot.jsonl" }
    var snapshotTemp: String { path + "/snapshot.tmp" }

    /// The journals in replay order.
    var journals: [String] { [journal, nextJournal] }

    /// Whether `path` is an existing directory (tools that must not create it check first).
    var exists: Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}
