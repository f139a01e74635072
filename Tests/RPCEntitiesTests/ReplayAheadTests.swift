import Foundation
import RPCSchema
import Testing

@testable import RPCEntities

/// A file parsed a chunk ahead on a second thread (`JournalReplay.forEachLine(_:parsedBy:chunkBytes:_:)`)
/// replays exactly as it does on one: the same outcome or the same failure (line, offset, reason,
/// kind), and the same state, for intact files and damaged ones, at chunk sizes from one byte
/// (a chunk a line) up.
@Suite("replay with lines parsed ahead: the same outcome as on one thread")
struct ReplayAheadTests {
    /// Lines of every kind a journal holds: creates, keyed creates, updates, deletes, buildings.
    static let records: [String] = {
        var lines: [String] = []
        var seq: UInt64 = 0
        func add(_ request: Request) {
            seq += 1
            lines.append(JournalText.line(request, seq: seq))
        }
        for i in 0..<24 {
            add(Request(id: "c\(i)", method: CreateUser.method, param: ["id": .string("u\(i)"), "name": .string("N\(i)"), "email": .string("n\(i)@x")]))
            if i % 5 == 2 {
                add(Request(
                    id: "k\(i)", method: CreateUser.method, param: ["id": .string("k\(i)"), "name": "K", "email": "k@x"], key: "key-\(i)"))
            }
            if i % 6 == 3 { add(Request(id: "d\(i)", method: DeleteUser.method, param: ["userId": .string("u\(i - 1)")])) }
            if i % 7 == 4 { add(Request(id: "p\(i)", method: UpdateUser.method, param: ["userId": .string("u\(i)"), "newName": "Renamed"])) }
            if i % 8 == 5 {
                add(Request(id: "b\(i)", method: AddBuilding.method, param: [
                    "id": .string("b\(i)"), "name": "Tower", "address": "1 Main", "residents": [.string("u\(i)")],
                ]))
            }
        }
        return lines
    }()
    static let journal = Array(records.joined().utf8)
    static let chunkSizes = [1, 7, 64, 300]
    /// The second thread, as the daemon gives it.
    static let thread: JournalReplay.ThreadStarter = { body in Thread.detachNewThread(body) }

    typealias Replay = @Sendable (inout JournalReplay, UnsafeRawBufferPointer, Int) -> Result<JournalReplay.FileOutcome, JournalReplay.Failure>
    static let journalReplay: Replay = { replay, bytes, chunkBytes in replay.replayJournal(bytes, chunkBytes: chunkBytes) }
    static let snapshotReplay: Replay = { replay, bytes, chunkBytes in replay.replaySnapshot(bytes, chunkBytes: chunkBytes) }

    /// Replays `bytes` on one thread and with each chunk size; expects the same result and state.
    private func expectSame(
        _ bytes: [UInt8], _ label: String, chunkSizes: [Int] = Self.chunkSizes, replay: Replay = Self.journalReplay,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        var serial = JournalReplay()
        let expected = bytes.withUnsafeBytes { replay(&serial, $0, .max) }
        for chunkBytes in chunkSizes {
            var ahead = JournalReplay()
            ahead.parsesAheadOn = Self.thread
            let result = bytes.withUnsafeBytes { replay(&ahead, $0, chunkBytes) }
            #expect(result == expected, "\(label), chunks of \(chunkBytes): \(result) against \(expected)", sourceLocation: sourceLocation)
            #expect(StateFingerprint(ahead) == StateFingerprint(serial) && ahead.applied == serial.applied,
                "\(label), chunks of \(chunkBytes)", sourceLocation: sourceLocation)
        }
    }

    @Test("an intact journal, and one with blank lines, spaces ahead of its end and a torn record")
    func intact() throws {
        var serial = JournalReplay()
        let outcome = try Self.journal.withUnsafeBytes { serial.replayJournal($0, chunkBytes: .max) }.get()
        #expect(outcome.applied == Self.records.count && outcome.tornBytes == 0)
        expectSame(Self.journal, "intact")
        expectSame(Array(Self.records.joined(separator: "\n").utf8), "blank lines between records")
        expectSame(Self.journal + Array("      ".utf8), "spaces ahead")
        let next = JournalText.create("late", seq: UInt64(Self.records.count + 1))
        expectSame(Self.journal + Array(next.utf8.prefix(20)), "a torn record")
        expectSame(Self.journal + Array("\n\n".utf8), "blank lines at the end")
    }

    @Test("a byte flipped anywhere, and the journal cut anywhere: the same failure or the same prefix")
    func flipsAndCuts() {
        // Every ninth byte, and a chunk a line or a few lines a chunk: ~5,000 replays.
        for offset in stride(from: 0, to: Self.journal.count, by: 9) {
            var flipped = Self.journal
            flipped[offset] ^= 0x01
            expectSame(flipped, "byte \(offset) flipped", chunkSizes: [1, 300])
            var newline = Self.journal
            newline[offset] = UInt8(ascii: "\n")
            expectSame(newline, "a newline at byte \(offset)", chunkSizes: [1, 300])
            expectSame(Array(Self.journal[..<offset]), "cut at \(offset)", chunkSizes: [1, 300])
        }
    }

    @Test("a sequence gap, a duplicate record, an unsealed line after sealed ones, a record that does not apply")
    func recordsOutOfOrder() {
        var gap = Self.records
        gap.remove(at: 17)
        expectSame(Array(gap.joined().utf8), "a gap")
        var duplicate = Self.records
        duplicate.insert(Self.records[9], at: 10)
        expectSame(Array(duplicate.joined().utf8), "a duplicate")
        var unsealed = Self.records
        unsealed[12] = JournalText.unsealedCreate("old", seq: 13)
        expectSame(Array(unsealed.joined().utf8), "an unsealed line after sealed ones")
        var conflict = Self.records
        conflict[20] = JournalText.create("u0", seq: 21)
        expectSame(Array(conflict.joined().utf8), "a create of an existing id")
    }

    @Test("a snapshot with key lines, intact and with a byte flipped anywhere")
    func snapshots() throws {
        var source = JournalReplay()
        _ = try Self.journal.withUnsafeBytes { source.replayJournal($0) }.get()
        var bytes = JournalSnapshot.header(seq: source.lastSeq, records: JournalSnapshot.recordCount(source.state))
        JournalSnapshot.encodeRecords(source.state) { bytes += $0 }
        #expect(String(decoding: bytes, as: UTF8.self).contains("key-2"), "the snapshot has no key line")
        expectSame(bytes, "intact", replay: Self.snapshotReplay)
        for offset in stride(from: 0, to: bytes.count, by: 11) {
            var flipped = bytes
            flipped[offset] ^= 0x01
            expectSame(flipped, "byte \(offset) flipped", replay: Self.snapshotReplay)
        }
        expectSame(Array(bytes.dropLast(7)), "cut short", replay: Self.snapshotReplay)
    }
}
