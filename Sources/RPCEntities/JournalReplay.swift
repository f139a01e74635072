import RPCSchema

/// Rebuilds the entity state from a snapshot and journal files, one line at a time, through the
/// method table with no log attached (replay never journals). Pure: the caller reads the files.
public struct JournalReplay {
    public private(set) var state: Entities
    /// The sequence number of the last mutation applied or covered by the snapshot.
    public private(set) var lastSeq: UInt64 = 0
    /// Records applied so far (snapshot records and journal mutations).
    public private(set) var applied = 0
    private let table: MethodTable<Entities>
    /// Method text -> entry, so each line costs one dictionary lookup.
    private var entries: [String: MethodTable<Entities>.Entry] = [:]

    public init(state: Entities = Entities(), table: MethodTable<Entities> = Entities.table) {
        self.state = state
        self.table = table
    }

    /// What one file held.
    public struct FileOutcome: Equatable, Sendable {
        /// Lines applied.
        public var applied = 0
        /// Journal lines already covered by the snapshot.
        public var skipped = 0
        /// Bytes up to and including the last complete line.
        public var validBytes = 0
        /// Bytes after the last newline: an incomplete line left by a crash mid-write.
        public var tornBytes = 0
    }

    /// Where and why a file cannot be replayed.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        /// 1-based line number.
        public var line: Int
        /// Byte offset of the start of that line.
        public var offset: Int
        public var reason: String
        public var description: String { "\(line): \(reason)" }
    }

    /// Applies journal lines. Records with a sequence number at or below `lastSeq` are skipped
    /// (the snapshot has them); each record must follow the previous one with no gap.
    public mutating func replayJournal(_ bytes: UnsafeRawBufferPointer) -> Result<FileOutcome, Failure> {
        var previous: UInt64?
        var applied = 0
        var skipped = 0
        let scan = Self.forEachLine(bytes) { line, number, offset -> Failure? in
            let fields: JournalRecord.Fields
            switch JournalRecord.fields(line) {
            case .failure(let error): return Failure(line: number, offset: offset, reason: error.reason)
            case .success(let decoded): fields = decoded
            }
            guard let seq = fields.seq else {
                return Failure(line: number, offset: offset, reason: "the record has no \"seq\"")
            }
            if let previous, seq != previous + 1 {
                return Failure(line: number, offset: offset, reason: "sequence number \(seq) follows \(previous); records are missing or out of order")
            }
            previous = seq
            if seq <= lastSeq {
                skipped += 1
                return nil
            }
            guard seq == lastSeq + 1 else {
                return Failure(line: number, offset: offset, reason: "sequence number \(seq) follows \(lastSeq); records are missing")
            }
            if let reason = apply(fields) { return Failure(line: number, offset: offset, reason: reason) }
            lastSeq = seq
            applied += 1
            return nil
        }
        if let failure = scan.failure { return .failure(failure) }
        return .success(FileOutcome(applied: applied, skipped: skipped, validBytes: scan.validBytes, tornBytes: scan.tornBytes))
    }

    /// Applies a snapshot: a header line `{"rpcdSnapshot":1,"seq":S,"records":N}` then N request
    /// lines. Sets `lastSeq` to S. A snapshot is written whole (temp file, fsync, rename), so any
    /// missing record or trailing bytes make it corrupt.
    public mutating func replaySnapshot(_ bytes: UnsafeRawBufferPointer) -> Result<FileOutcome, Failure> {
        var header: (seq: UInt64, records: Int)?
        var applied = 0
        let scan = Self.forEachLine(bytes) { line, number, offset -> Failure? in
            guard header != nil else {
                switch JournalSnapshot.parseHeader(line) {
                case .success(let parsed):
                    header = parsed
                    return nil
                case .failure(let error): return Failure(line: number, offset: offset, reason: error.reason)
                }
            }
            switch JournalRecord.fields(line) {
            case .failure(let error): return Failure(line: number, offset: offset, reason: error.reason)
            case .success(let fields):
                if let reason = apply(fields) { return Failure(line: number, offset: offset, reason: reason) }
                applied += 1
                return nil
            }
        }
        if let failure = scan.failure { return .failure(failure) }
        let outcome = FileOutcome(applied: applied, skipped: 0, validBytes: scan.validBytes, tornBytes: scan.tornBytes)
        guard let header else { return .failure(Failure(line: 1, offset: 0, reason: "the snapshot has no header line")) }
        guard outcome.tornBytes == 0, outcome.applied == header.records else {
            return .failure(Failure(
                line: outcome.applied + 2, offset: outcome.validBytes,
                reason: "the snapshot is incomplete: \(outcome.applied) of \(header.records) records"))
        }
        lastSeq = header.seq
        return .success(outcome)
    }

    /// Runs one mutation against the state; the reason it failed, or nil.
    mutating func apply(_ fields: JournalRecord.Fields) -> String? {
        let entry: MethodTable<Entities>.Entry
        if let cached = entries[fields.method] {
            entry = cached
        } else {
            guard let method = RPCMethod(parsing: fields.method), let found = table.entry(for: method) else {
                return "unknown method \"\(fields.method)\""
            }
            guard found.isMutation else { return "\(method) is not a mutation" }
            entries[fields.method] = found
            entry = found
        }
        switch entry.prepareSilent(fields.param) {
        case .failure(let error): return "\(entry.method) does not apply: \(error.errorMessage)"
        case .success(let call):
            if let error = call(&state) { return "\(entry.method) does not apply: \(error.errorMessage)" }
        }
        applied += 1
        return nil
    }

    /// Calls `body` with each non-blank complete line, its 1-based number and its offset; stops at
    /// the first failure. Returns the bytes up to the last newline and the bytes after it.
    static func forEachLine(
        _ bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer, Int, Int) -> Failure?
    ) -> (validBytes: Int, tornBytes: Int, failure: Failure?) {
        var start = 0
        var number = 0
        let newline = UInt8(ascii: "\n")
        while start < bytes.count {
            guard let end = bytes[start...].firstIndex(of: newline) else {
                return (start, bytes.count - start, nil)
            }
            number += 1
            if end > start {
                let line = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
                if let failure = body(line, number, start) { return (start, 0, failure) }
            }
            start = end + 1
        }
        return (start, 0, nil)
    }
}
