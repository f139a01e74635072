import CRPCLinux
import RPCSchema

/// Rebuilds the entity state from a snapshot and journal files, one line at a time, through the
/// method table with no log attached (replay never journals). Pure: the caller reads the files.
///
/// What a file must be to replay (a start refuses anything else, naming the line):
/// - every sealed line's checksum matches (`JournalRecord`); lines without a checksum, written
///   before checksums, may come only before a file's first sealed line;
/// - a journal's sequence numbers rise by one from line to line, and the first one the snapshot
///   does not cover follows it;
/// - only the bytes after a journal's last newline may be a torn write, and only if they can be
///   the beginning of a record (`JournalRecord.tornTailProblem`): the caller drops them. A
///   snapshot is written whole, so it has none.
public struct JournalReplay {
    public internal(set) var state: Entities
    /// The sequence number of the last mutation applied or covered by the snapshot.
    public internal(set) var lastSeq: UInt64 = 0
    /// Records applied so far (snapshot records and journal mutations).
    public private(set) var applied = 0
    /// The snapshot's sequence number, once one is replayed.
    public private(set) var snapshotSeq: UInt64?
    /// Journal records read so far (applied or skipped), over every journal file.
    private var journalRecords = 0
    private let table: MethodTable<Entities>
    /// Method text -> entry, so a line whose method is not the last one's (`lastEntry`) costs one
    /// dictionary lookup and one retain.
    private var entries: [String: MethodTable<Entities>.Entry] = [:]
    /// The method `entry` looked up last, and its entry.
    private var lastEntry: (name: String, entry: MethodTable<Entities>.Entry)?
    /// Where a keyed plain record's reply is written, to be remembered (`apply(_:plain:seq:)`).
    private var scratch: [UInt8] = []

    /// Where a big file's lines are parsed a chunk ahead (`forEachLine(_:parsedBy:…)`); nil: on
    /// the replaying thread, in turn.
    public var parsesAheadOn: ThreadStarter?
    /// Between `holdOrder` and `releaseOrder`: the ids of every file replayed are put in order
    /// once, at the release, not at the end of each file (a merge of the journal's ids into the
    /// snapshot's, and a second build of the index).
    private var holdsOrder = false

    /// The files replayed from now until `releaseOrder` put their ids in order once, at the
    /// release (a restart: the snapshot, then the journals).
    public mutating func holdOrder() {
        state.deferOrder()
        holdsOrder = true
    }

    /// Puts the ids replayed since `holdOrder` in order.
    public mutating func releaseOrder() {
        holdsOrder = false
        state.restoreOrder()
    }

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
        /// Bytes after the last newline: an incomplete line left by a crash mid-write, and the
        /// spaces the writer keeps ahead of the end (`spaceBytes`), all dropped by a start.
        public var tornBytes = 0
        /// Of `tornBytes`, the spaces a writer under a sustained `fsync always` load keeps ahead
        /// of the journal's end (so an fsync updates no file size), left there by a crash: after
        /// a torn record, or before one appended to such a file.
        public var spaceBytes = 0
        /// What the bytes after the last newline were when they could not be the start of a record
        /// (e.g. NUL blocks); nil for a record cut short or spaces alone.
        public var tornDescription: String?
        /// Of `tornBytes`, the incomplete record (the rest are spaces).
        public var tornRecordBytes: Int { tornBytes - spaceBytes }
        /// Lines sealed with a checksum, and lines written before checksums.
        public var sealed = 0
        public var unsealed = 0
        /// The sequence numbers of a journal's first and last records.
        public var firstSeq: UInt64?
        public var lastSeq: UInt64?
    }

    /// Where and why a file cannot be replayed.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        /// What is wrong, which decides what `rpcd repair` may do about it.
        public enum Kind: Equatable, Sendable {
            /// The line's own bytes are bad: a checksum mismatch, not a record, or bytes after the
            /// last newline that cannot be the beginning of one.
            case damaged
            /// An intact record out of sequence: a gap, a duplicate, a step back.
            case sequence
            /// The journal starts after what the snapshot covers (or there is no snapshot): the
            /// records before it are not in the data directory.
            case missingSnapshot
            /// An intact record that does not apply to the state before it.
            case inconsistent
        }

        /// 1-based line number.
        public var line: Int
        /// Byte offset of the start of that line.
        public var offset: Int
        public var reason: String
        public var kind: Kind
        public var description: String { "\(line): \(reason)" }
    }

    /// Applies journal lines. Records with a sequence number at or below `lastSeq` are skipped
    /// (the snapshot has them); each record must follow the previous one with no gap. A torn last
    /// line, and spaces written ahead of the end, are reported in `tornBytes` for the caller to
    /// drop; other bytes after the last newline fail as damage.
    public mutating func replayJournal(_ bytes: UnsafeRawBufferPointer) -> Result<FileOutcome, Failure> {
        replayJournal(bytes, chunkBytes: Self.aheadChunkBytes)
    }

    /// `replayJournal`, its lines parsed ahead in chunks of `chunkBytes` (`forEachLine(_:parsedBy:chunkBytes:_:)`).
    mutating func replayJournal(_ bytes: UnsafeRawBufferPointer, chunkBytes: Int) -> Result<FileOutcome, Failure> {
        state.deferOrder()
        defer { if !holdsOrder { state.restoreOrder() } }
        var outcome = FileOutcome()
        var seals = SealRule()
        var previous: UInt64?
        let parser = LineParser(table: table, snapshot: false)
        let scan = Self.forEachLine(bytes, parsedBy: parser, chunkBytes: chunkBytes, startThread: parsesAheadOn) { line, number, offset, parsed -> Failure? in
            func failure(_ kind: Failure.Kind, _ reason: String) -> Failure {
                Failure(line: number, offset: offset, reason: reason, kind: kind)
            }
            let (fields, plain): (JournalRecord.Fields, PlainObject?)
            switch parsed.record ?? JournalRecord.replayFields(line) {
            case .failure(let error): return failure(.damaged, Self.damage(error, line: line, file: bytes))
            case .success(let decoded): (fields, plain) = decoded
            }
            if let reason = seals.check(sealed: fields.sealed, line: number, outcome: &outcome) { return failure(.damaged, reason) }
            guard let seq = fields.seq else { return failure(.damaged, "the record has no \"seq\"") }
            guard seq > 0 else { return failure(.sequence, "sequence number 0: records are numbered from 1") }
            if let previous, previous == .max || seq != previous + 1 { return failure(.sequence, Self.sequenceProblem(seq, after: previous)) }
            previous = seq
            outcome.firstSeq = outcome.firstSeq ?? seq
            outcome.lastSeq = seq
            let firstRecord = journalRecords == 0
            journalRecords += 1
            if seq <= lastSeq {
                outcome.skipped += 1
                return nil
            }
            guard lastSeq < .max, seq == lastSeq + 1 else {
                if firstRecord { return failure(.missingSnapshot, missingBefore(seq)) }
                return failure(.sequence, "sequence number \(seq) follows \(lastSeq), the last record before this file: \(Self.missing(lastSeq &+ 1, seq &- 1))")
            }
            if let refusal = apply(parsed, fields: fields, plain: plain, seq: seq) { return failure(.inconsistent, refusal.description) }
            lastSeq = seq
            outcome.applied += 1
            return nil
        }
        if let failure = scan.failure { return .failure(failure) }
        outcome.validBytes = scan.validBytes
        outcome.tornBytes = scan.tornBytes
        // The writer's spaces (`Journal.keepSpaceAhead`; a file system leaves NUL blocks, never
        // spaces) end the file; a torn record comes before them, or after them when bytes were
        // appended to a file a crash left them in.
        let tail = UnsafeRawBufferPointer(rebasing: bytes[scan.validBytes...])
        let trailing = tail.reversed().prefix { $0 == UInt8(ascii: " ") }.count
        let leading = tail.prefix { $0 == UInt8(ascii: " ") }.count
        outcome.spaceBytes = trailing == tail.count ? trailing : leading + trailing
        // Whatever else follows the last newline (a record cut short, NUL blocks a file system left
        // after a power cut, both) cannot hold an acknowledged record: each ended with a newline
        // that was synced before its reply. The caller cuts it; `tornTailProblem` says what it was.
        // Only a whole sealed record with a byte other than its newline after it is damage.
        let torn = UnsafeRawBufferPointer(rebasing: tail[leading..<max(leading, tail.count - trailing)])
        if let damage = JournalRecord.damagedNewline(torn) {
            return .failure(Failure(line: scan.lines + 1, offset: scan.validBytes, reason: damage, kind: .damaged))
        }
        if !torn.isEmpty { outcome.tornDescription = JournalRecord.tornTailProblem(torn) }
        return .success(outcome)
    }

    /// Applies a snapshot: a header line `{"rpcdSnapshot":1,"seq":S,"records":N,"crc":…}` then N
    /// request lines. Sets `lastSeq` to S. A snapshot is written whole (temp file, fsync, rename),
    /// so any missing record or trailing bytes make it damaged.
    public mutating func replaySnapshot(_ bytes: UnsafeRawBufferPointer) -> Result<FileOutcome, Failure> {
        replaySnapshot(bytes, chunkBytes: Self.aheadChunkBytes)
    }

    /// `replaySnapshot`, its lines parsed ahead in chunks of `chunkBytes` (`forEachLine(_:parsedBy:chunkBytes:_:)`).
    mutating func replaySnapshot(_ bytes: UnsafeRawBufferPointer, chunkBytes: Int) -> Result<FileOutcome, Failure> {
        state.deferOrder()
        defer { if !holdsOrder { state.restoreOrder() } }
        let counts = JournalSnapshot.recordCounts(bytes)
        state.users.reserveCapacity(adding: counts.users)
        state.buildings.reserveCapacity(adding: counts.buildings)
        var header: (seq: UInt64, records: Int)?
        var outcome = FileOutcome()
        var seals = SealRule()
        let parser = LineParser(table: table, snapshot: true)
        let scan = Self.forEachLine(bytes, parsedBy: parser, chunkBytes: chunkBytes, startThread: parsesAheadOn) { line, number, offset, parsed -> Failure? in
            func damaged(_ reason: String) -> Failure { Failure(line: number, offset: offset, reason: reason, kind: .damaged) }
            guard header != nil else {
                switch JournalSnapshot.parseHeader(line) {
                case .success(let parsed):
                    header = (parsed.seq, parsed.records)
                    return seals.check(sealed: parsed.sealed, line: number, outcome: &outcome).map(damaged)
                case .failure(let error): return damaged(Self.damage(error, line: line, file: bytes))
                }
            }
            if JournalSnapshot.isTermLine(line) {
                switch JournalSnapshot.parseTermLine(line) {
                case .failure(let error): return damaged(Self.damage(error, line: line, file: bytes))
                case .success(let term):
                    return addTerm(term, start: UInt64(clamping: term.sequence ?? 0)).map { Failure(line: number, offset: offset, reason: $0, kind: .inconsistent) }
                }
            }
            if JournalSnapshot.isKeyLine(line) {
                switch JournalSnapshot.parseKeyLine(line) {
                case .failure(let error): return damaged(Self.damage(error, line: line, file: bytes))
                case .success(let remembered):
                    state.keys.remember(remembered.key, remembered.outcome, now: Self.now())
                    return nil
                }
            }
            let (fields, plain): (JournalRecord.Fields, PlainObject?)
            switch parsed.record ?? JournalRecord.replayFields(line) {
            case .failure(let error): return damaged(Self.damage(error, line: line, file: bytes))
            case .success(let decoded): (fields, plain) = decoded
            }
            if let reason = seals.check(sealed: fields.sealed, line: number, outcome: &outcome) { return damaged(reason) }
            if let refusal = apply(parsed, fields: fields, plain: plain, seq: 0) {
                return Failure(line: number, offset: offset, reason: refusal.description, kind: .inconsistent)
            }
            outcome.applied += 1
            return nil
        }
        if let failure = scan.failure { return .failure(failure) }
        outcome.validBytes = scan.validBytes
        outcome.tornBytes = scan.tornBytes
        guard let header else {
            return .failure(Failure(line: 1, offset: 0, reason: "the snapshot has no header line", kind: .damaged))
        }
        guard outcome.tornBytes == 0, outcome.applied == header.records else {
            return .failure(Failure(
                line: scan.lines + 1, offset: outcome.validBytes,
                reason: "the snapshot is incomplete: \(outcome.applied) of \(header.records) records", kind: .damaged))
        }
        lastSeq = header.seq
        snapshotSeq = header.seq
        return .success(outcome)
    }

    /// Why the first journal record, `seq`, cannot follow what the snapshot (if any) covers.
    private func missingBefore(_ seq: UInt64) -> String {
        guard let snapshotSeq else {
            return "the journal starts at sequence number \(seq) and there is no snapshot: \(Self.missing(1, seq &- 1)) (was snapshot.jsonl deleted or lost?)"
        }
        return "the journal starts at sequence number \(seq) but the snapshot ends at \(snapshotSeq): \(Self.missing(snapshotSeq &+ 1, seq &- 1)) (the snapshot is older than the journal)"
    }

    static func sequenceProblem(_ seq: UInt64, after previous: UInt64) -> String {
        if seq == previous { return "duplicate sequence number \(seq): the line before has it too" }
        if seq < previous { return "sequence number \(seq) after \(previous): out of order" }
        return "sequence number \(seq) after \(previous): \(missing(previous &+ 1, seq &- 1))"
    }

    private static func missing(_ first: UInt64, _ last: UInt64) -> String {
        first == last ? "record \(first) is missing" : "records \(first)...\(last) are missing"
    }

    /// The reason a line is damaged. In a file of sealed lines, a line whose seal is gone (a
    /// damaged byte in the seal, or a line split or merged) is a checksum mismatch too: say so,
    /// whatever else its bytes look like. (Failure path only: it may scan the file.)
    static func damage(_ error: JournalLineError, line: UnsafeRawBufferPointer, file: UnsafeRawBufferPointer) -> String {
        guard JournalRecord.checksum(of: line) == .absent else { return error.reason }
        var sealedFile = false
        _ = forEachLine(file) { other, _, _ in
            sealedFile = JournalRecord.checksum(of: other) == .valid
            return sealedFile ? Failure(line: 0, offset: 0, reason: "", kind: .damaged) : nil
        }
        return sealedFile ? "\(noSeal): \(error.reason)" : error.reason
    }

    static let noSeal = #"checksum mismatch: the line does not end with a checksum ,"crc":"<8 lowercase hex digits>"}, but the file's other lines do"#

    /// Lines without a checksum may come only before a file's first sealed line: a writer that
    /// seals never writes an unsealed line, so one after a sealed line has a damaged end.
    private struct SealRule {
        var firstSealed: Int?

        mutating func check(sealed: Bool, line: Int, outcome: inout FileOutcome) -> String? {
            if sealed {
                outcome.sealed += 1
                if firstSealed == nil { firstSealed = line }
                return nil
            }
            if let firstSealed {
                return "\(noSeal) (line \(firstSealed) is the first that does)"
            }
            outcome.unsealed += 1
            return nil
        }
    }

    /// Applies one record of a snapshot a leader sends (a follower rebuilding its state); the
    /// reason it failed, or nil.
    public mutating func applySnapshotRecord(_ request: Request) -> String? {
        apply(JournalRecord.Fields(id: request.id, method: request.method.description, param: request.param, seq: nil, key: nil, sealed: true), seq: 0)?
            .description
    }

    /// Applies entity records of a snapshot a leader sends (each line with its `\n`), as
    /// `replaySnapshot` applies a file's: each seal checked, a plain param decoded from its line.
    /// Why the first that does not apply failed, or nil.
    public mutating func applySnapshotLines(_ lines: UnsafeRawBufferPointer) -> String? {
        var failure: String?
        _ = Self.forEachLine(lines) { line, number, offset in
            switch JournalRecord.replayFields(line) {
            case .failure(let error): failure = "a record is damaged: \(Self.damage(error, line: line, file: lines))"
            case .success(let (fields, plain)): failure = fields.sealed ? apply(fields, plain: plain, seq: 0)?.description : "a record has no checksum"
            }
            return failure.map { Failure(line: number, offset: offset, reason: $0, kind: .inconsistent) }
        }
        return failure
    }

    /// A leader's snapshot of `records` records comes (a follower rebuilding its state): ids are
    /// put in order once, when it is complete (`receivedSnapshot`), not one by one.
    public mutating func receivingSnapshot(records: Int) {
        state.deferOrder()
        // The leader's count, bounded: room for at most two million is made ahead.
        state.users.reserveCapacity(adding: min(max(0, records), 1 << 21))
    }

    /// The state the snapshot built, its ids in order.
    public mutating func receivedSnapshot() -> Entities {
        state.restoreOrder()
        return state
    }

    /// Remembers the outcome of a keyed mutation a leader's snapshot carries (not a record).
    public mutating func rememberKey(_ key: ExactID, _ outcome: IdempotencyKeys.Outcome) {
        state.keys.remember(key, outcome, now: Self.now())
    }

    private static let termMethod = ReplicationTerm.method.description

    /// A `replication.term` record (not in the method table: no caller may write one): the term
    /// starts at `seq`, or, in a snapshot (`seq` 0), at the param's `sequence`.
    private mutating func applyTerm(_ param: JSONValue?, seq: UInt64) -> String? {
        guard let term = try? JSONValueDecoder().decode(ReplicationTerm.self, from: param ?? .null) else {
            return "replication.term has a param this daemon cannot read: {\"term\",\"termId\",\"leader\"}"
        }
        return addTerm(term, start: seq > 0 ? seq : UInt64(clamping: term.sequence ?? 0))
    }

    /// Adds a term to the state's history; why it cannot follow the last, or nil.
    public mutating func addTerm(_ term: ReplicationTerm, start: UInt64) -> String? {
        guard let entry = TermHistory.Term(term, start: start) else { return TermHistory.recordNeeds }
        return state.terms.add(entry)
    }

    /// Uptime now, the time replayed keys are remembered at (their window starts at the replay).
    static func now() -> UInt64 { crpc_monotonic_ns() }

    /// Runs one mutation against the state; the reason it failed, or nil. A keyed record also
    /// remembers its outcome, as serving it did.
    mutating func apply(_ fields: JournalRecord.Fields, seq: UInt64) -> Refusal? {
        switch entry(fields.method) {
        case .failure(let reason): return fields.method == Self.termMethod ? applyTerm(fields.param, seq: seq).map(Refusal.init) : Refusal(reason.text)
        case .success(let entry): return apply(fields, seq: seq, entry: entry)
        }
    }

    /// `apply` for a record whose param `plain` left in its line (`JournalRecord.replayFields`):
    /// decoded from the line, as a request's plain param is, and run by the handler a request
    /// runs; or, for a create whose entry stores plain params, stored from the line's bytes
    /// (`MethodTable.PlainStorer`). A record with no key runs silently (no outcome to remember, so
    /// no reply is written); a keyed one writes its reply to a scratch buffer and remembers it with
    /// the digest of its line's bytes. A param that does not decode that way, or a keyed record
    /// without that digest, goes the full way with its value, which decides and words the error.
    mutating func apply(_ fields: JournalRecord.Fields, plain: PlainObject?, seq: UInt64) -> Refusal? {
        guard let plain else { return apply(fields, seq: seq) }
        let cached: MethodTable<Entities>.Entry
        switch entry(fields.method) {
        case .failure(let reason): return fields.method == Self.termMethod ? applyTerm(plain.value, seq: seq).map(Refusal.init) : Refusal(reason.text)
        case .success(let entry): cached = entry
        }
        guard let key = fields.key else {
            if let store = cached.storer, store(&state, plain) {
                applied += 1
                return nil
            }
            guard case .success(let call)? = cached.preparer(.plain(plain), .discarded) else {
                return applyParsed(fields, plain: plain, seq: seq, entry: cached)
            }
            return run(call, method: fields.method)
        }
        guard let digest = fields.digest, case .success(let call)? = cached.preparer(.plain(plain), .written) else {
            return applyParsed(fields, plain: plain, seq: seq, entry: cached)
        }
        scratch.removeAll(keepingCapacity: true)
        if let error = call(&state, &scratch) { return Refusal(cached.method, error) }
        state.keys.remember(ExactID(key), .init(digest: digest, reply: scratch, seq: seq), now: Self.now())
        applied += 1
        return nil
    }

    /// Applies a record parsed ahead: its prepared call, or, without one, the way `apply(_:plain:seq:)`
    /// goes. The reason it failed, or nil.
    mutating func apply(_ parsed: ParsedLine, fields: JournalRecord.Fields, plain: PlainObject?, seq: UInt64) -> Refusal? {
        guard let call = parsed.prepared else { return apply(fields, plain: plain, seq: seq) }
        return run(call, method: fields.method)
    }

    /// Runs a record's call silently, counting it; the reason it failed, or nil. `method` is the
    /// record's, which named the call's entry.
    private mutating func run(_ call: MethodTable<Entities>.Prepared, method: String) -> Refusal? {
        // A call prepared `.discarded` writes nothing here.
        if let error = call(&state, &scratch) { return Refusal(method: method, error) }
        applied += 1
        return nil
    }

    /// A plain param that does not decode as the call's fields: the full way, with its value,
    /// which decides and words the error.
    private mutating func applyParsed(_ fields: JournalRecord.Fields, plain: PlainObject, seq: UInt64, entry: MethodTable<Entities>.Entry) -> Refusal? {
        var full = fields
        full.param = plain.value
        return apply(full, seq: seq, entry: entry)
    }

    /// The mutation a record's method names, looked up once per method. Records come in runs of
    /// one method (a snapshot's users, then its buildings; a load's creates), so the last one is
    /// checked first: hashing the name for the dictionary was ~4% of a restart.
    private mutating func entry(_ method: String) -> Result<MethodTable<Entities>.Entry, ReasonText> {
        if let last = lastEntry, last.name == method { return .success(last.entry) }
        let found = lookupEntry(method)
        if case .success(let entry) = found { lastEntry = (method, entry) }
        return found
    }

    private mutating func lookupEntry(_ method: String) -> Result<MethodTable<Entities>.Entry, ReasonText> {
        if let found = entries[method] { return .success(found) }
        guard let parsed = RPCMethod(parsing: method), let found = table.entry(for: parsed) else {
            return .failure(ReasonText("unknown method \"\(method)\""))
        }
        guard found.isMutation else { return .failure(ReasonText("\(parsed) is not a mutation")) }
        entries[method] = found
        return .success(found)
    }

    private mutating func apply(_ fields: JournalRecord.Fields, seq: UInt64, entry: MethodTable<Entities>.Entry) -> Refusal? {
        if let key = fields.key {
            switch entry.prepare(fields.param) {
            case .failure(let error): return Refusal(entry.method, error)
            case .success(let call):
                var reply: [UInt8] = []
                if let error = call(&state, &reply) { return Refusal(entry.method, error) }
                let digest = IdempotencyKeys.digest(method: entry.method, param: fields.param)
                state.keys.remember(
                    ExactID(key), .init(digest: digest, reply: reply, seq: seq), now: Self.now())
            }
            applied += 1
            return nil
        }
        switch entry.prepare(fields.param, .discarded) {
        case .failure(let error): return Refusal(entry.method, error)
        case .success(let call):
            if let error = call(&state, &scratch) { return Refusal(entry.method, error) }
        }
        applied += 1
        return nil
    }

    /// Calls `body` with each non-blank complete line, its 1-based number and its offset; stops at
    /// the first failure. Returns the bytes up to the last newline, the bytes after it, and the
    /// number of lines read.
    static func forEachLine(
        _ bytes: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer, Int, Int) -> Failure?
    ) -> (validBytes: Int, tornBytes: Int, lines: Int, failure: Failure?) {
        var start = 0
        var number = 0
        while start < bytes.count {
            guard let end = newline(in: bytes, from: start) else {
                return (start, bytes.count - start, number, nil)
            }
            number += 1
            if end > start {
                let line = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
                if let failure = body(line, number, start) { return (start, 0, number, failure) }
            }
            start = end + 1
        }
        return (start, 0, number, nil)
    }

    /// The index of the first `\n` at or after `from`: the C library's `memchr` (vector
    /// instructions; a restart scans a 100 MiB snapshot for them twice, and eight bytes at a time
    /// that was ~3% of it, byte by byte more).
    public static func newline(in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        guard from < bytes.count, let base = bytes.baseAddress else { return nil }
        guard let found = crpc_memchr(base + from, Int32(UInt8(ascii: "\n")), UInt(bytes.count - from)) else { return nil }
        return UnsafeRawPointer(found) - base
    }

    /// `newline` eight bytes at a time, where there is no `memchr`.
    static func wordwiseNewline(in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        var i = from
        if let base = bytes.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            while i + 8 <= bytes.count {
                // A zero byte of `word ^ newlines` is a newline; the lowest flagged byte is the first
                // (bytes above a real zero may be flagged falsely, never bytes below it).
                let word = UInt64(littleEndian: (base + i).loadUnaligned(as: UInt64.self)) ^ (ones &* 0x0A)
                let zeros = (word &- ones) & ~word & highs
                if zeros != 0 { return i + zeros.trailingZeroBitCount / 8 }
                i += 8
            }
        }
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "\n") { return i }
            i += 1
        }
        return nil
    }

    /// How many complete lines from `offset` on are intact records (they decode, and their
    /// checksum matches if they have one), and the offset of the first. `rpcd repair` cuts
    /// without `--force` only when none follow the damage.
    public static func intactRecords(_ bytes: UnsafeRawBufferPointer, from offset: Int = 0) -> (count: Int, firstOffset: Int?) {
        guard offset < bytes.count else { return (0, nil) }
        var count = 0
        var first: Int?
        _ = forEachLine(UnsafeRawBufferPointer(rebasing: bytes[offset...])) { line, _, start in
            if case .success = JournalRecord.fields(line) {
                count += 1
                if first == nil { first = offset + start }
            }
            return nil
        }
        return (count, first)
    }
}

/// Why a record did not apply: its method's handler refused it (`method` set: a file's replay
/// words it "METHOD does not apply: why", a follower names the record first), or the record
/// names no mutation, or its term does not follow.
struct Refusal: CustomStringConvertible {
    let method: String?
    let reason: String

    init(_ reason: String) {
        method = nil
        self.reason = reason
    }

    init(method: String, _ error: RPCError) {
        self.method = method
        reason = error.errorMessage
    }

    init(_ method: RPCMethod, _ error: RPCError) { self.init(method: method.description, error) }

    var description: String { method.map { "\($0) does not apply: \(reason)" } ?? reason }
}

/// Why a record's method cannot be replayed, as `Result`'s failure.
private struct ReasonText: Error {
    let text: String
    init(_ text: String) { self.text = text }
}
