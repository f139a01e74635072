import RPCEntities
import RPCSchema
import RPCTransport

/// `rpcd journal check|dump` for operators, like `redis-check-aof`. Both only read: they take no
/// lock and change nothing, so they can look at the directory of a running daemon.
///
/// - `check` replays the snapshot and the journals as a start would (every checksum, the sequence
///   numbers with their gaps and duplicates, every record applying) and prints either the first
///   problem as `FILE:LINE: reason; what to do` (exit 1) or a one-line summary (exit 0). Exit 0
///   means `rpcd serve` starts on the directory; an incomplete last record, which a start drops,
///   is named in the summary.
/// - `dump` checks the same way (printing nothing but the problem if there is one, exit 1), then
///   prints the records that rebuild the state: the snapshot's, then the journals' after it.
///   Plain: canonical request lines without `seq` and `crc`, to pipe into `nc` against an empty
///   daemon. `--ndjson`: one object per record for tools,
///   `{"seq":S,"file":"journal.jsonl","line":L,"id":…,"method":…,"param":…}` (snapshot records
///   carry the snapshot's seq). `--from-seq N` prints the journal records from seq N on (without
///   the snapshot), for a daemon that already has the ones before.
enum JournalCommand {
    static let usage = "usage: rpcd journal check [--data-dir DIR] | rpcd journal dump [--data-dir DIR] [--from-seq N] [--ndjson]"

    static func run(_ arguments: [String]) -> Int32 {
        guard let action = arguments.first else { return usageError("journal needs check or dump") }
        if action == "--help" || action == "-h" {
            print(usage)
            return 0
        }
        guard action == "check" || action == "dump" else { return usageError("unknown journal command '\(action)'") }
        var dataDir = "./data"
        var fromSeq: UInt64 = 1
        var ndjson = false
        var rest = arguments.dropFirst()
        while let argument = rest.popFirst() {
            var (flag, inline) = (argument, String?.none)
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            func value() -> String? { inline ?? rest.popFirst() }
            switch (action, flag) {
            case (_, "--help"), (_, "-h"):
                print(usage)
                return 0
            case (_, "--data-dir"):
                guard let text = value() else { return usageError("--data-dir needs a value") }
                dataDir = text
            case ("dump", "--from-seq"):
                guard let text = value() else { return usageError("--from-seq needs a value") }
                guard let n = UInt64(text), n >= 1 else { return usageError("--from-seq '\(text)' is not a sequence number (a whole number from 1)") }
                fromSeq = n
            case ("dump", "--ndjson") where inline == nil:
                ndjson = true
            default:
                return usageError("unknown option '\(argument)' for journal \(action)")
            }
        }
        let files = DataFiles(path: dataDir)
        guard files.exists else {
            return fail(action, "data directory \(dataDir) does not exist; pass the --data-dir the daemon uses")
        }
        let recovery: Recovery
        do {
            recovery = try Recovery.load(files, log: nil, mode: .readOnly)
        } catch {
            if action == "check" {
                // What to do next, with what repair would cut: not "see journal check", which this is.
                print("\(error.problem); \(RepairCommand.advice(for: error, files: files))")
                return 1
            }
            return fail(action, error.description)
        }
        if action == "check" {
            print(summary(recovery, files))
            return 0
        }
        return dump(recovery, files, fromSeq: fromSeq, ndjson: ndjson)
    }

    /// `rpcd journal check: DIR is intact: snapshot.jsonl at seq 120 (50 records), journal.jsonl seq 121...420 (300 records); …`
    static func summary(_ recovery: Recovery, _ files: DataFiles) -> String {
        var parts: [String] = []
        for (path, outcome) in recovery.files {
            let name = path.split(separator: "/").last.map(String.init) ?? path
            var part: String
            if path == files.snapshot {
                part = "\(name) at seq \(recovery.snapshotSeq ?? 0) (\(count(outcome.applied, "record"))"
            } else if let first = outcome.firstSeq, let last = outcome.lastSeq {
                part = "\(name) seq \(first)...\(last) (\(count(outcome.applied + outcome.skipped, "record"))"
                if outcome.skipped > 0 { part += ", \(outcome.skipped) of them covered by the snapshot" }
            } else {
                part = "\(name) (no records"
            }
            if outcome.unsealed > 0 { part += ", \(count(outcome.unsealed, "line")) written before checksums" }
            part += ")"
            if outcome.tornRecordBytes > 0 { part += " ending in \(outcome.tornRecordBytes) bytes after its last newline that the next start cuts (saving them beside it)" }
            if outcome.spaceBytes > 0 {
                part += (outcome.tornRecordBytes > 0 ? " and" : " ending in") + " \(outcome.spaceBytes) bytes of spaces written ahead of its end that the next start drops"
            }
            parts.append(part)
        }
        let held = parts.isEmpty ? "no snapshot or journal" : parts.joined(separator: ", ")
        return "rpcd journal check: \(files.path) is intact: \(held); \(count(recovery.records, "record")) in all, last seq \(recovery.lastSeq)"
    }

    private static func count(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }

    /// Prints the records that rebuild the state (or, from `fromSeq` > 1, the journal records from there on).
    static func dump(_ recovery: Recovery, _ files: DataFiles, fromSeq: UInt64, ndjson: Bool) -> Int32 {
        let snapshotSeq = recovery.snapshotSeq
        var sources = files.journals.filter { path in recovery.files.contains { $0.path == path } }
        if fromSeq <= 1, snapshotSeq != nil { sources.insert(files.snapshot, at: 0) }
        // Which journal records to print: after the snapshot when it is printed, else from fromSeq.
        let after = fromSeq <= 1 ? (snapshotSeq ?? 0) : fromSeq - 1
        if fromSeq > 1, fromSeq <= recovery.lastSeq {
            let firstInJournals = recovery.files.filter { $0.path != files.snapshot }.compactMap(\.outcome.firstSeq).min()
            guard let firstInJournals, firstInJournals <= fromSeq else {
                return fail("dump", "records before seq \((snapshotSeq ?? 0) + 1) are only in the snapshot (seq \(snapshotSeq ?? 0)); pass --from-seq 1 for the whole state, or a seq from \(firstInJournals ?? recovery.lastSeq + 1) on")
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(1 << 20)
        var failure: Errno?
        for path in sources {
            let bytes: [UInt8]
            do {
                bytes = try FileIO.readAll(path) ?? []
            } catch {
                return fail("dump", "cannot read \(path): \(error)")
            }
            let name = path.split(separator: "/").last.map(String.init) ?? path
            bytes.withUnsafeBytes { raw in
                JournalRecord.forEachRecord(in: raw) { record in
                    if let seq = record.seq, seq <= after { return true }
                    if ndjson {
                        writeObject(record, seq: record.seq ?? snapshotSeq ?? 0, file: name, into: &out)
                    } else {
                        RequestCodec.encode(record.request, into: &out)
                    }
                    guard out.count >= 1 << 20 else { return true }
                    do throws(Errno) {
                        try FileIO.writeAll(1, out, path: "stdout")
                    } catch {
                        failure = error
                        return false
                    }
                    out.removeAll(keepingCapacity: true)
                    return true
                }
            }
            if let failure { return fail("dump", "cannot write: \(failure)") }
        }
        do {
            try FileIO.writeAll(1, out, path: "stdout")
        } catch {
            return fail("dump", "cannot write: \(error)")
        }
        return 0
    }

    /// `{"seq":S,"file":"journal.jsonl","line":L,"id":…,"method":…,"param":…,"key":…}` (the key when
    /// the record has one, as plain `dump` keeps it) and a newline.
    private static func writeObject(_ record: JournalRecord.Line, seq: UInt64, file: String, into out: inout [UInt8]) {
        var object = JSONObject([
            (key: "seq", value: .number(String(seq))), (key: "file", value: .string(file)),
            (key: "line", value: .number(String(record.number))), (key: "id", value: .string(record.request.id)),
            (key: "method", value: .string("\(record.request.method)")),
        ])
        if let param = record.request.param { object["param"] = param }
        if let key = record.request.key { object["key"] = .string(key) }
        JSONWriter.write(.object(object), into: &out)
        out.append(UInt8(ascii: "\n"))
    }

    private static func fail(_ action: String, _ message: String) -> Int32 {
        LogSink.stderr.write("rpcd journal \(action): \(message)\n")
        return 1
    }

    private static func usageError(_ message: String) -> Int32 {
        LogSink.stderr.write("rpcd: \(message); \(usage)\n")
        return 2
    }
}
