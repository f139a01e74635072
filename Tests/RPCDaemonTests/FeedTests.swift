import Foundation
import RPCEntities
import RPCSchema
import Testing
@testable import RPCDaemon

/// The change feed's pieces without sockets: batches in memory, and journal files read by sequence
/// number across a compaction's two journals.
struct FeedTests {
    private func line(_ seq: UInt64) -> [UInt8] {
        var out: [UInt8] = []
        let request = Request(id: "r\(seq)", method: CreateUser.method, param: ["id": .string("u\(seq)"), "name": "N", "email": "e@x"])
        JournalRecord.encode(request, seq: seq, into: &out)
        return out
    }

    private func lines(_ range: ClosedRange<UInt64>) -> [UInt8] { range.flatMap(line) }

    private func seqs(_ bytes: some Collection<UInt8>) -> [UInt64] {
        Array(bytes).split(separator: UInt8(ascii: "\n")).map { JournalCursor.seq(ofLine: $0[...])! }
    }

    private func tempDir() -> String {
        let path = NSTemporaryDirectory() + "rpcd-feed-\(UUID().uuidString)"
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test("memory: a chunk starts at the asked-for record, ends on a line, respects the byte budget, and says when it is not held")
    func chunks() {
        let feed = ReplicationFeed(files: DataFiles(path: "/nonexistent"), durable: 10, snapshotSeq: 0, maxLineBytes: 1 << 20, maxMemoryBytes: 1 << 20, log: Logger(level: .error))
        feed.keepsBacklogAlways = true
        feed.published(lines(11...15), lastSeq: 15)
        feed.published(lines(16...20), lastSeq: 20)
        guard case .lines(let a, let lastA) = feed.chunk(from: 13, maxBytes: 1 << 20) else { Issue.record("no chunk"); return }
        #expect(seqs(a) == [13, 14, 15] && lastA == 15)
        guard case .lines(let b, let lastB) = feed.chunk(from: 16, maxBytes: 1) else { Issue.record("no chunk"); return }
        #expect(seqs(b) == [16] && lastB == 16, "at least one line, even past the budget")
        guard case .lines(let c, let lastC) = feed.chunk(from: 16, maxBytes: 1 << 20) else { Issue.record("no chunk"); return }
        #expect(seqs(c) == [16, 17, 18, 19, 20] && lastC == 20, "a whole batch")
        let two = line(17).count + line(18).count
        guard case .lines(let d, let lastD) = feed.chunk(from: 17, maxBytes: two) else { Issue.record("no chunk"); return }
        #expect(seqs(d) == [17, 18] && lastD == 18, "from the middle of a batch, up to the budget")
        if case .upToDate = feed.chunk(from: 21, maxBytes: 100) {} else { Issue.record("21 is not durable yet") }
        if case .notInMemory = feed.chunk(from: 10, maxBytes: 100) {} else { Issue.record("10 was never in memory") }
    }

    @Test("memory is bounded: old batches go, and their records must come from the files")
    func memoryBound() {
        let one = line(1).count
        let feed = ReplicationFeed(files: DataFiles(path: "/nonexistent"), durable: 0, snapshotSeq: 0, maxLineBytes: 1 << 20, maxMemoryBytes: one * 10, log: Logger(level: .error))
        feed.keepsBacklogAlways = true
        for seq in UInt64(1)...100 { feed.published(line(seq), lastSeq: seq) }
        if case .notInMemory = feed.chunk(from: 50, maxBytes: 100) {} else { Issue.record("50 should be gone from memory") }
        guard case .lines(let tail, _) = feed.chunk(from: 95, maxBytes: 1 << 20) else { Issue.record("95 should be held"); return }
        #expect(seqs(tail) == [95])
    }

    @Test("no subscriber ever attached: memory keeps nothing, and every record comes from the files")
    func noBacklogWithoutSubscribers() {
        let feed = ReplicationFeed(files: DataFiles(path: "/nonexistent"), durable: 0, snapshotSeq: 0, maxLineBytes: 1 << 20, maxMemoryBytes: 1 << 20, log: Logger(level: .error))
        for seq in UInt64(1)...20 { feed.published(line(seq), lastSeq: seq) }
        if case .notInMemory = feed.chunk(from: 20, maxBytes: 100) {} else { Issue.record("20 should not be held: nobody subscribed") }
        if case .upToDate = feed.chunk(from: 21, maxBytes: 100) {} else { Issue.record("the durable sequence is still 20") }
        #expect(feed.sequences.durable == 20)
    }

    @Test("files: reads on by sequence number, stops at the durable one, finds the next journal, and reports records compacted away")
    func cursor() throws {
        let dir = tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let files = DataFiles(path: dir)
        try Data(lines(5...40)).write(to: URL(fileURLWithPath: files.journal))
        try Data(lines(41...60)).write(to: URL(fileURLWithPath: files.nextJournal))
        let cursor = JournalCursor(files: files, maxLineBytes: 1 << 20)
        guard case .lines(let first, let last) = cursor.read(from: 7, durable: 50, maxBytes: line(7).count * 3) else { Issue.record("no lines"); return }
        #expect(seqs(first) == [7, 8, 9] && last == 9)
        guard case .lines(let more, let end) = cursor.read(from: 10, durable: 12, maxBytes: 1 << 20) else { Issue.record("no lines"); return }
        #expect(seqs(more) == [10, 11, 12] && end == 12, "nothing past the durable sequence number")
        guard case .lines(let next, _) = cursor.read(from: 45, durable: 60, maxBytes: 1 << 20) else { Issue.record("no lines"); return }
        #expect(seqs(next).first == 45 && seqs(next).last == 60)
        if case .gone = cursor.read(from: 3, durable: 60, maxBytes: 100) {} else { Issue.record("3 is before every journal") }
    }

    @Test("files: the journal a compaction kept is read for records before the live journal's, then the live one on")
    func cursorReadsKeptJournal() throws {
        let dir = tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let files = DataFiles(path: dir)
        try Data(lines(1...30) + Array("    ".utf8)).write(to: URL(fileURLWithPath: files.previousJournal))  // spaces a writer kept ahead
        try Data(lines(31...40)).write(to: URL(fileURLWithPath: files.journal))
        let cursor = JournalCursor(files: files, maxLineBytes: 1 << 20)
        var read: [UInt64] = []
        var from: UInt64 = 25
        while from <= 40, case .lines(let bytes, let last) = cursor.read(from: from, durable: 40, maxBytes: line(25).count * 4) {
            read += seqs(bytes)
            from = last + 1
        }
        #expect(read == Array(25...40))
    }

    @Test("files: a line that does not match its checksum, or is not the record its place says, is damage, named with its file")
    func cursorReportsDamage() throws {
        let dir = tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let files = DataFiles(path: dir)
        var kept = lines(1...10)
        let third = line(1).count + line(2).count + 20  // a byte inside record 3
        kept[third] = kept[third] == UInt8(ascii: "x") ? UInt8(ascii: "y") : UInt8(ascii: "x")
        try Data(kept).write(to: URL(fileURLWithPath: files.previousJournal))
        try Data(lines(11...12) + line(14) + lines(15...16)).write(to: URL(fileURLWithPath: files.journal))
        let cursor = JournalCursor(files: files, maxLineBytes: 1 << 20)
        guard case .damaged(let why, let inKept) = cursor.read(from: 2, durable: 16, maxBytes: 1 << 20) else { Issue.record("record 3 is damaged"); return }
        #expect(inKept && why == "\(files.previousJournal): record 3 does not match its checksum")
        guard case .damaged(let gap, let keptGap) = cursor.read(from: 11, durable: 16, maxBytes: 1 << 20) else { Issue.record("13 is missing"); return }
        #expect(!keptGap && gap == "\(files.journal): the line where record 13 belongs holds record 14")
        #expect(JournalCursor.damage(in: lines(11...12), from: 11) == nil)
        let unsealed = Array(#"{"id":"r11","method":"user.createUser","param":{"id":"u","name":"N","email":"e@x"},"seq":11}"#.utf8) + [10]
        #expect(JournalCursor.damage(in: unsealed, from: 11) == "record 11 has no checksum", "a follower takes sealed records only")
    }

    @Test("the files' bound: a compaction that kept the journal it replaced leaves earlier records readable; a damaged one, or none kept, moves the bound to the snapshot")
    func filesFrom() {
        let feed = ReplicationFeed(files: DataFiles(path: "/nonexistent"), durable: 100, snapshotSeq: 0, maxLineBytes: 1 << 20, log: Logger(level: .error))
        feed.compacted(at: 100, keptJournal: true)
        #expect(feed.sequences.snapshot == 100 && feed.sequences.filesFrom == 0, "the first journal, from record 1, is kept")
        feed.compacted(at: 250, keptJournal: true)
        #expect(feed.sequences.snapshot == 250 && feed.sequences.filesFrom == 100)
        feed.stopReadingKeptJournal(because: "test")
        #expect(feed.sequences.filesFrom == 250)
        feed.compacted(at: 400, keptJournal: true)
        #expect(feed.sequences.filesFrom == 250)
        feed.compacted(at: 500, keptJournal: false)
        #expect(feed.sequences.filesFrom == 500, "none kept")
        feed.restarted(at: 42)
        #expect(feed.sequences.filesFrom == 42 && feed.sequences.snapshot == 42)
    }

    @Test("seq(ofLine:) reads the envelope's seq, not a param field named seq")
    func seqOfLine() {
        var out: [UInt8] = []
        JournalRecord.encode(Request(id: "r9", method: CreateUser.method, param: ["id": "u", "name": #""seq":5"#, "email": "e"]), seq: 9, into: &out)
        #expect(JournalCursor.seq(ofLine: out[..<(out.count - 1)]) == 9)
    }

    @Test("a subscriber's acknowledgement is read off the line's start; anything else is left to the decoder")
    func acknowledgements() {
        func ack(_ text: String) -> UInt64? { Array(text.utf8).withUnsafeBytes { RequestCodec.feedAcknowledgement($0) } }
        #expect(ack(#"{"id":"r42","method":"user.createUserResult","param":{"id":"u1"}}"#) == 42)
        #expect(ack(#"{"id":"r7","method":"error.error","param":{"errorMessage":"x","code":"conflict"}}"#) == 7)
        #expect(ack(#"{"id":"r42","method":"user.createUser","param":{}}"#) == nil, "a request, not an answer")
        #expect(ack(#"{"id":"r","method":"user.createUserResult"}"#) == nil)
        #expect(ack(#"{"id":"r99999999999999999999999","method":"user.createUserResult"}"#) == nil, "overflow")
        #expect(ack(#"{"id":"x42","method":"user.createUserResult"}"#) == nil)
        #expect(ack(#"{"id":"r42","method":"Result"}"#) == nil)
    }
}
