import CRPCLinux
import RPCSchema

/// A restart reads its files on two threads: a second thread parses the lines of a file a chunk
/// ahead (envelope, checksum, and for a record without a key its call decoded from its plain
/// param), while the replay applies the chunk before, in order, on the thread that called it.
///
/// Parsing was about half of a restart's time on one core (a 1.23M-record data directory:
/// envelope, fields, checksum and param decode), applying most of the rest. Everything that
/// decides the outcome stays in line order on the applying thread: the seal rule, sequence
/// numbers, the first failure and its line number and offset, the applied counts. A parsed line
/// only saves the applying thread the work; the same line reports the same failure as before.
extension JournalReplay {
    /// Files smaller than two chunks are read on one thread, as before.
    static let aheadChunkBytes = 1 << 20

    /// Runs a body on a thread of the caller's (the daemon's: nothing below it starts threads).
    public typealias ThreadStarter = @Sendable (@escaping @Sendable () -> Void) -> Void

    /// A line parsed ahead of its turn.
    struct ParsedLine: @unchecked Sendable {
        // @unchecked: `plain` points into the file's bytes, which outlive the replay (the
        // parsing thread is joined before the replay returns); the prepared call has not run
        // and touches no state until the applying thread runs it.
        /// Nil for a snapshot's key line (read in turn, as its header is).
        let record: Result<(fields: JournalRecord.Fields, plain: PlainObject?), JournalLineError>?
        /// The record's call, for a record without a key whose plain param decoded. Not its
        /// method's table entry: every line holding that shared object bounced its reference
        /// count between the two threads' cores (the applying thread looks the entry up itself).
        let prepared: MethodTable<Entities>.Prepared?
    }

    /// Parses record lines for one replay, on one thread at a time (its method cache is not shared).
    final class LineParser: @unchecked Sendable {
        // @unchecked: used by the thread that parses ahead, then by nobody.
        private let table: MethodTable<Entities>
        private let snapshot: Bool
        private var last: (method: String, entry: MethodTable<Entities>.Entry?)?

        init(table: MethodTable<Entities>, snapshot: Bool) {
            self.table = table
            self.snapshot = snapshot
        }

        func parse(_ line: UnsafeRawBufferPointer) -> ParsedLine {
            // A snapshot's header (its first line) parses as no record, and is read in turn.
            if snapshot && JournalSnapshot.isKeyLine(line) { return ParsedLine(record: nil, prepared: nil) }
            let record = JournalRecord.replayFields(line)
            guard case .success(let decoded) = record, decoded.fields.key == nil, let plain = decoded.plain,
                let entry = entry(decoded.fields.method), case .success(let call)? = entry.preparer(.plain(plain), .discarded)
            else { return ParsedLine(record: record, prepared: nil) }
            return ParsedLine(record: record, prepared: call)
        }

        /// The mutation `method` names (nil for any other: the replay words the failure).
        private func entry(_ method: String) -> MethodTable<Entities>.Entry? {
            if let last, last.method == method { return last.entry }
            let found = RPCMethod(parsing: method).flatMap { table.entry(for: $0) }.flatMap { $0.isMutation ? $0 : nil }
            last = (method, found)
            return found
        }
    }

    /// `forEachLine`, with each non-blank line parsed by `parser` first: on a second thread, a
    /// chunk (`chunkBytes`, at whole lines) ahead of `body`, when the file holds two chunks or
    /// more; in turn otherwise. `body` sees every line in order, as `forEachLine` gives it, and
    /// its first failure stops both threads; the result is `forEachLine`'s.
    static func forEachLine(
        _ bytes: UnsafeRawBufferPointer, parsedBy parser: LineParser, chunkBytes: Int = aheadChunkBytes,
        startThread: ThreadStarter?, _ body: (UnsafeRawBufferPointer, Int, Int, ParsedLine) -> Failure?
    ) -> (validBytes: Int, tornBytes: Int, lines: Int, failure: Failure?) {
        let chunkBytes = max(1, chunkBytes)
        guard chunkBytes <= bytes.count / 2, let startThread else {
            return forEachLine(bytes) { line, number, offset in body(line, number, offset, parser.parse(line)) }
        }
        let ahead = ReadAhead(bytes, chunkBytes: chunkBytes, parser: parser)
        ahead.start(on: startThread)
        defer { ahead.stopAndWait() }
        var start = 0
        var number = 0
        while let chunk = ahead.next() {
            // Read in place: copying an item out retained each of its strings and references
            // once more, on objects the other thread made (a cache line from the other core each).
            let failed = chunk.lines.withUnsafeBufferPointer { items -> (start: Int, number: Int, failure: Failure)? in
                for index in items.indices {
                    let item = items.baseAddress.unsafelyUnwrapped + index
                    let line = UnsafeRawBufferPointer(rebasing: bytes[item.pointee.start..<item.pointee.end])
                    if let failure = body(line, number + item.pointee.number, item.pointee.start, item.pointee.parsed) {
                        return (item.pointee.start, number + item.pointee.number, failure)
                    }
                }
                return nil
            }
            if let failed { return (failed.start, 0, failed.number, failed.failure) }
            number += chunk.newlines
            start = chunk.end
            ahead.recycle(consume chunk)
        }
        return (start, bytes.count - start, number, nil)
    }

    /// The parsing thread and the chunks it has ready: at most two ahead of the applying thread.
    private final class ReadAhead: @unchecked Sendable {
        // @unchecked: `ready`, `taken` and `stopped` are guarded by `condition`; `bytes` is read
        // only, and outlives this (the replay waits for the thread before it returns).
        struct Chunk {
            /// The chunk's non-blank lines: where each starts and ends (its newline), its number
            /// within the chunk (1-based, blank lines counted), and what the parser made of it.
            var lines: [(start: Int, end: Int, number: Int, parsed: ParsedLine)] = []
            /// Newlines in the chunk, and the offset after its last one.
            var newlines = 0
            var end = 0
        }

        private let bytes: UnsafeRawBufferPointer
        private let chunkBytes: Int
        private let parser: LineParser
        private let condition = Condition()
        /// Parsed chunks not yet taken, in file order.
        private var ready: [Chunk] = []
        /// Chunks applied: the parsing thread lets them go (their lines' strings and calls were
        /// made there; freeing them took a tenth of the applying thread's time).
        private var spent: [Chunk] = []
        private var finished = false
        private var stopped = false
        /// The parsing thread is done with the bytes.
        private var exited = false
        private static let maxAhead = 2

        init(_ bytes: UnsafeRawBufferPointer, chunkBytes: Int, parser: LineParser) {
            self.bytes = bytes
            self.chunkBytes = chunkBytes
            self.parser = parser
        }

        func start(on startThread: ThreadStarter) {
            startThread { [self] in
                produce()
                condition.lock()
                exited = true
                condition.broadcast()
                condition.unlock()
            }
        }

        /// The next chunk in order, once parsed; nil after the last one (the bytes after the last
        /// newline are no chunk's).
        func next() -> Chunk? {
            condition.lock()
            defer { condition.unlock() }
            while ready.isEmpty && !finished { condition.wait() }
            guard !ready.isEmpty else { return nil }
            condition.broadcast()
            return ready.removeFirst()
        }

        /// A chunk `next` gave, applied: the parsing thread frees it.
        func recycle(_ chunk: consuming Chunk) {
            condition.lock()
            spent.append(chunk)
            condition.unlock()
        }

        /// Stops the parsing thread (after a failure, or at the end) and waits for it: the bytes
        /// it reads are the caller's.
        func stopAndWait() {
            condition.lock()
            stopped = true
            condition.broadcast()
            while !exited { condition.wait() }
            condition.unlock()
        }

        private func produce() {
            var start = 0
            while start < bytes.count {
                condition.lock()
                while ready.count >= Self.maxAhead && !stopped { condition.wait() }
                let stop = stopped
                var done: [Chunk] = []
                swap(&done, &spent)
                condition.unlock()
                done = []  // freed here, outside the lock
                if stop { break }
                // The chunk ends at the first newline at or after `chunkBytes` on; none: the rest
                // is the last chunk up to its last newline, and any bytes after it are the tail.
                let cut = min(start + chunkBytes, bytes.count) - 1
                let limit = JournalReplay.newline(in: bytes, from: cut).map { $0 + 1 } ?? bytes.count
                var chunk = Chunk()
                let scan = JournalReplay.forEachLine(UnsafeRawBufferPointer(rebasing: bytes[start..<limit])) { line, number, offset in
                    chunk.lines.append((start + offset, start + offset + line.count, number, parser.parse(line)))
                    return nil
                }
                guard scan.lines > 0 else { break }
                chunk.newlines = scan.lines
                chunk.end = start + scan.validBytes
                condition.lock()
                ready.append(chunk)
                condition.broadcast()
                condition.unlock()
                start = chunk.end
            }
            condition.lock()
            finished = true
            condition.broadcast()
            condition.unlock()
        }
    }
}

/// NSCondition's four calls over a pthread mutex and condition variable (CRPCLinux): the
/// entities import neither Foundation nor Glibc.
private final class Condition: @unchecked Sendable {
    // @unchecked: the C object is what serialises its users.
    private let handle: OpaquePointer

    init() { handle = crpc_condition_create() }
    deinit { crpc_condition_destroy(handle) }

    func lock() { crpc_condition_lock(handle) }
    func unlock() { crpc_condition_unlock(handle) }
    func wait() { crpc_condition_wait(handle) }
    func broadcast() { crpc_condition_broadcast(handle) }
}
