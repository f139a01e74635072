import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// One connection subscribed to the change feed. Its sending state lives on the connection's loop
/// queue; file reads happen on the feed's file queue, one at a time per subscriber.
///
/// The connection holds at most `window` bytes of feed output: the subscriber writes more only as
/// the peer reads (`connectionDidDrain`), so a peer that never reads costs its window and no more.
final class Subscriber: @unchecked Sendable {
    // @unchecked: `wakeScheduled` and `counts` are guarded by `lock`; the vars marked "loop only"
    // are touched on the connection's loop queue; `cursor` and `snapshot` on the feed's file queue.
    let connection: Connection
    let peer: String
    let form: WireForm
    /// A daemon following this one (it subscribed with its term history): it may count toward
    /// `min_sync_replicas`.
    let replica: Bool
    /// The subscriber's name in a coordinated cluster (its advertised address), else nil.
    let member: String?
    private let feed: ReplicationFeed
    private let window: Int

    private let lock = NSLock()
    private var wakeScheduled = false
    private var counts: (sent: UInt64, acked: UInt64) = (0, 0)

    // Loop only.
    private var nextSeq: UInt64
    private var phase: Phase
    private var reading = false

    // File queue only.
    private var cursor: JournalCursor?
    private var snapshot: SnapshotCursor?

    enum Phase {
        /// The snapshot goes first (records up to its sequence), then the journal.
        case snapshot
        /// Records from `nextSeq` on.
        case tail
    }

    init(
        connection: Connection, peer: String, form: WireForm, after: UInt64, snapshotFirst: Bool, replica: Bool = false, member: String? = nil,
        feed: ReplicationFeed
    ) {
        self.connection = connection
        self.peer = peer
        self.form = form
        self.replica = replica
        self.member = member
        self.feed = feed
        self.nextSeq = after &+ 1
        self.phase = snapshotFirst ? .snapshot : .tail
        self.counts = (after, 0)
        // A quarter of the output cap: the subscriber's own calls keep room for their replies.
        self.window = min(Self.maxWindow, max(1, connection.limits.maxOutputBytes / 4))
    }

    /// Feed output a subscriber's connection holds at most (plenty to keep a socket busy).
    static let maxWindow = 256 << 10

    var figures: (sent: UInt64, acked: UInt64) { lock.withLock { counts } }

    /// The subscriber answered record `seq` (its `…Result` or `error.error` with id `"r<seq>"`).
    func acknowledged(_ seq: UInt64) {
        let advanced: Bool = lock.withLock {
            guard seq <= counts.sent && seq > counts.acked else { return false }
            counts.acked = seq
            return true
        }
        if advanced && replica { feed.acknowledged(self, seq) }
    }

    /// True once per wake-up: a wake is scheduled now (called with the feed's lock held).
    func wantsWake() -> Bool {
        lock.withLock {
            defer { wakeScheduled = true }
            return !wakeScheduled
        }
    }

    func wake() {
        connection.queue.async { [self] in
            lock.withLock { wakeScheduled = false }
            pump()
        }
    }

    // MARK: - Sending (loop only)

    /// Sends what is durable and fits the window; asks the files for what memory no longer has.
    func pump() {
        connection.loop.preconditionOnLoop()
        guard !connection.isClosed, !reading else { return }
        while connection.pendingOutputBytes < window {
            if case .snapshot = phase { return readFiles() }
            switch feed.chunk(from: nextSeq, maxBytes: window - connection.pendingOutputBytes) {
            case .upToDate:
                connection.flush()
                return
            case .notInMemory:
                return readFiles()
            case .lines(let lines, let last):
                send(lines, last: last)
            }
            connection.flush()
        }
    }

    private func send(_ lines: ArraySlice<UInt8>, last: UInt64) {
        switch form {
        case .canonical: connection.send { $0.append(contentsOf: lines) }
        case .seed: connection.send { Self.reencode(lines, as: .seed, into: &$0) }
        }
        nextSeq = last &+ 1
        lock.withLock { counts.sent = max(counts.sent, last) }
    }

    /// Reads the next lines from the files, then sends them (and pumps on) on the loop.
    private func readFiles() {
        reading = true
        let from = nextSeq
        let inSnapshot: Bool = if case .snapshot = phase { true } else { false }
        let maxBytes = window
        feed.fileQueue.async { [self] in
            let durable = feed.sequences.durable
            let outcome: FileRead = inSnapshot ? readSnapshot(maxBytes: maxBytes) : readJournal(from: from, durable: durable, maxBytes: maxBytes)
            connection.queue.async { [self] in
                reading = false
                guard !connection.isClosed else { return }
                switch outcome {
                case .lines(let bytes, let last):
                    if !bytes.isEmpty { send(bytes[...], last: last) }
                case .snapshotLines(let bytes, let end):
                    connection.send { Self.reencode(bytes[...], as: form, into: &$0) }
                    if let end {
                        phase = .tail
                        nextSeq = end &+ 1
                        lock.withLock { counts.sent = max(counts.sent, end) }
                    }
                case .stop(let reason):
                    feed.log.warning("replication: disconnecting subscriber \(peer): \(reason)")
                    connection.send { out in
                        RequestCodec.encodeError(id: "", .internal("the change feed stopped: \(reason); subscribe again (with \"snapshot\": true)"), form: form, into: &out)
                    }
                    return connection.closeAfterFlush(.closedByServer("change feed stopped: \(reason)"))
                }
                connection.flush()
                pump()
            }
        }
    }

    private enum FileRead {
        case lines([UInt8], last: UInt64)
        /// Snapshot lines (already with their begin and end lines); `end` once the snapshot is done.
        case snapshotLines([UInt8], end: UInt64?)
        case stop(String)
    }

    private func readJournal(from: UInt64, durable: UInt64, maxBytes: Int) -> FileRead {
        let cursor = self.cursor ?? JournalCursor(files: feed.files, maxLineBytes: feed.maxLineBytes)
        self.cursor = cursor
        switch cursor.read(from: from, durable: durable, maxBytes: maxBytes) {
        case .lines(let bytes, let last): return .lines(bytes, last: last)
        case .gone(let why): return .stop("it fell behind compaction (\(why))")
        case .failed(let why): return .stop(why)
        case .damaged(let why, kept: false): return .stop("the journal is damaged (\(why)); run rpcd journal check on this daemon's data directory")
        case .damaged(let why, kept: true):
            // Only a copy: its records are in the snapshot too, which the next subscribe sends.
            feed.stopReadingKeptJournal(because: why)
            return .stop("the journal kept from before the last compaction is damaged (\(why))")
        }
    }

    private func readSnapshot(maxBytes: Int) -> FileRead {
        if snapshot == nil {
            switch SnapshotCursor.open(feed.files.snapshot, maxLineBytes: feed.maxLineBytes) {
            case .failure(let problem): return .stop(problem.reason)
            case .success(let opened): snapshot = opened
            }
        }
        guard let snapshot else { return .stop("no snapshot") }
        var out: [UInt8] = []
        if !snapshot.begun {
            snapshot.begun = true
            RequestCodec.encode(
                id: "snapshot", method: SnapshotBegin.method,
                param: .object(JSONObject([
                    ("sequence", .number(String(snapshot.seq))), ("records", .number(String(snapshot.records))),
                ])), form: .canonical, into: &out)
        }
        switch snapshot.nextRecords(maxBytes: maxBytes, into: &out) {
        case .failure(let problem): return .stop(problem.reason)
        case .success(let done):
            guard done else { return .snapshotLines(out, end: nil) }
            RequestCodec.encode(
                id: "snapshot", method: SnapshotEnd.method, param: .object(JSONObject([("sequence", .number(String(snapshot.seq)))])),
                form: .canonical, into: &out)
            let seq = snapshot.seq
            self.snapshot = nil
            return .snapshotLines(out, end: seq)
        }
    }

    /// Journal lines in another wire form: each decoded and written again, with its `seq` (and
    /// without the seal, which covers the canonical bytes). Canonical stays as it is.
    static func reencode(_ lines: ArraySlice<UInt8>, as form: WireForm, into out: inout [UInt8]) {
        guard form == .seed else { return out.append(contentsOf: lines) }
        var start = lines.startIndex
        while start < lines.endIndex, let newline = lines[start...].firstIndex(of: UInt8(ascii: "\n")) {
            let line = lines[start..<newline]
            start = newline + 1
            line.withUnsafeBytes { raw in
                guard case .request(var request) = RequestCodec.decode(raw) else { return }
                request.form = .seed
                RequestCodec.encode(request, into: &out)
                if let seq = JournalCursor.seq(ofLine: line) {
                    out.removeLast(2)  // "}\n"
                    out.append(contentsOf: #","seq":"#.utf8)
                    out.append(contentsOf: String(seq).utf8)
                    out.append(contentsOf: "}\n".utf8)
                }
            }
        }
    }
}

/// Reads a snapshot file's record lines in chunks (the header first, key lines skipped).
final class SnapshotCursor {
    let seq: UInt64
    let records: Int
    var begun = false
    private let fd: Int32
    private let path: String
    private var offset: Int
    private let maxLineBytes: Int

    private init(fd: Int32, path: String, seq: UInt64, records: Int, offset: Int, maxLineBytes: Int) {
        self.fd = fd
        self.path = path
        self.seq = seq
        self.records = records
        self.offset = offset
        self.maxLineBytes = maxLineBytes
    }

    deinit { FileIO.close(fd) }

    static func open(_ path: String, maxLineBytes: Int) -> Result<SnapshotCursor, FeedProblem> {
        let fd: Int32
        do {
            fd = try FileIO.open(path, O_RDONLY)
        } catch {
            return .failure(FeedProblem("cannot open the snapshot \(path): \(error)"))
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { try? FileIO.read(fd, into: $0, at: 0, path: path) } ?? 0
        guard let newline = buffer[0..<n].firstIndex(of: UInt8(ascii: "\n")),
            case .success(let header) = buffer[0..<newline].withUnsafeBytes({ JournalSnapshot.parseHeader($0) })
        else {
            FileIO.close(fd)
            return .failure(FeedProblem("the snapshot \(path) has no header line"))
        }
        return .success(SnapshotCursor(fd: fd, path: path, seq: header.seq, records: header.records, offset: newline + 1, maxLineBytes: maxLineBytes))
    }

    /// The longest snapshot line sent: what a follower's client reads (`RPCClientOptions.maxFrameBytes`
    /// as a follower sets it). A record grown by updates is longer than any one request was.
    static let maxRecordLineBytes = SettingRanges.maxFrameBytes.upperBound

    /// Appends about `maxBytes` of record lines (more when one record's line is longer); true
    /// once the file is done.
    func nextRecords(maxBytes: Int, into out: inout [UInt8]) -> Result<Bool, FeedProblem> {
        var want = max(4096, maxBytes)
        let longest = max(maxLineBytes, Self.maxRecordLineBytes)
        while true {
            var buffer = [UInt8](repeating: 0, count: want)
            let n: Int
            do {
                n = try buffer.withUnsafeMutableBytes { raw throws(Errno) in try FileIO.read(fd, into: raw, at: offset, path: path) }
            } catch {
                return .failure(FeedProblem("cannot read the snapshot \(path): \(error)"))
            }
            if n == 0 { return .success(true) }
            guard let lastNewline = buffer[0..<n].lastIndex(of: UInt8(ascii: "\n")) else {
                if n < want { return .failure(FeedProblem("the snapshot \(path) ends in the middle of a line")) }
                if want >= longest {
                    return .failure(FeedProblem("the snapshot \(path) holds a record line longer than \(longest) bytes, more than a follower reads"))
                }
                want = min(longest, want * 2)
                continue
            }
            var start = 0
            while start <= lastNewline, let newline = buffer[start...lastNewline].firstIndex(of: UInt8(ascii: "\n")) {
                let line = buffer[start..<newline]
                start = newline + 1
                guard !line.isEmpty else { continue }
                if line.withUnsafeBytes({ JournalSnapshot.isTermLine($0) }) {
                    // A term of the history travels as a `replication.term` request with its start.
                    guard case .success(let term) = line.withUnsafeBytes({ JournalSnapshot.parseTermLine($0) }),
                        let param = try? JSONValueEncoder().encode(term)
                    else { continue }
                    RequestCodec.encode(id: "s", method: ReplicationTerm.method, param: param, form: .canonical, into: &out)
                    continue
                }
                guard line.withUnsafeBytes({ JournalSnapshot.isKeyLine($0) }) else {
                    out.append(contentsOf: buffer[line.startIndex...newline])
                    continue
                }
                // A remembered key outcome travels as a request of its own.
                guard case .success(let remembered) = line.withUnsafeBytes({ JournalSnapshot.parseKeyLine($0) }) else { continue }
                let param = JSONValue.object(JSONObject([
                    ("key", .string(remembered.key.string)), ("digest", .string(IdempotencyKeys.digestText(remembered.outcome.digest, legacy: remembered.outcome.legacyDigest))),
                    ("seq", .number(String(remembered.outcome.seq))),
                    ("reply", (try? JSONParser.parse(remembered.outcome.reply)) ?? .null),
                ]))
                RequestCodec.encode(id: "s", method: SnapshotKey.method, param: param, form: .canonical, into: &out)
            }
            offset += lastNewline + 1
            return .success(false)
        }
    }
}

/// Why the feed cannot go on for a subscriber.
struct FeedProblem: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
}
