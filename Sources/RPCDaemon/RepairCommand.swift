import Foundation
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// `rpcd repair [--data-dir DIR]`: cuts a damaged journal at its first bad line so the daemon can
/// start again, like `redis-check-aof --fix`. What it cuts is saved next to the journal as
/// `journal.jsonl.cut-<unix time>`; nothing is deleted. Refuses while a daemon holds the directory.
enum RepairCommand {
    static let usage = "usage: rpcd repair [--data-dir DIR]   (default ./data; the daemon must be stopped)"

    static func run(_ arguments: [String]) -> Int32 {
        var dataDir = "./data"
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            switch argument {
            case "--data-dir":
                guard let value = rest.popFirst() else { return usageError("--data-dir needs a value") }
                dataDir = value
            case _ where argument.hasPrefix("--data-dir="):
                dataDir = String(argument.dropFirst("--data-dir=".count))
            case "--help", "-h":
                print(usage)
                return 0
            default:
                return usageError("unknown option '\(argument)' for repair")
            }
        }
        let directory: DataDirectory
        do {
            directory = try DataDirectory(path: dataDir)
        } catch {
            LogSink.stderr.write("rpcd repair: \(error)\n")
            return 1
        }
        for _ in 0..<4 {
            do {
                let recovery = try Recovery.load(directory, log: nil, truncateTornTail: false)
                print("rpcd repair: \(directory.path) replays cleanly: \(recovery.records) records, last seq \(recovery.lastSeq)")
                return 0
            } catch {
                guard let file = error.file, file != directory.snapshot else {
                    LogSink.stderr.write("rpcd repair: \(error.description)\n")
                    return 1
                }
                do {
                    let backup = try cut(file, at: error.offset)
                    print("rpcd repair: \(file):\(error.line): cut from this line to the end (\(error.description.split(separator: ";").first.map(String.init) ?? "")); the cut bytes are saved in \(backup)")
                } catch {
                    LogSink.stderr.write("rpcd repair: cannot cut \(file): \(error)\n")
                    return 1
                }
            }
        }
        LogSink.stderr.write("rpcd repair: \(directory.path) is still damaged after several cuts; restore it from a backup\n")
        return 1
    }

    /// Saves `file` from `offset` to a backup, then truncates `file` there. Returns the backup's path.
    static func cut(_ file: String, at offset: Int) throws(Errno) -> String {
        let bytes = try FileIO.readAll(file) ?? []
        let backup = "\(file).cut-\(Int(Date().timeIntervalSince1970))"
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

    private static func usageError(_ message: String) -> Int32 {
        LogSink.stderr.write("rpcd repair: \(message); \(usage)\n")
        return 2
    }
}
