import RPCEntities
import RPCSchema
import Testing

/// Damage against the pure replay, byte by byte: what a start would do with each file.
@Suite("journal damage: byte flips, truncation, NUL runs, old lines (pure)")
struct JournalDamageTests {
    /// Three records of three kinds, as the daemon writes them.
    static let records = [
        JournalText.create("u1", seq: 1),
        JournalText.create("u2", seq: 2),
        JournalText.line(Request(id: "b", method: AddBuilding.method, param: [
            "id": "b1", "name": "Tower", "address": "1 Main", "residents": ["u1", "u2"],
        ]), seq: 3),
    ]
    static let journal = Array(records.joined().utf8)

    /// The state after the first k records, for k = 0...3.
    static let prefixes: [StateFingerprint] = (0...records.count).map { k in
        var replay = JournalReplay()
        _ = replay.replayJournal(Array(records.prefix(k).joined().utf8))
        return StateFingerprint(replay)
    }

    /// The 1-based line holding byte `offset` (a newline belongs to the line it ends).
    private func line(of offset: Int, in bytes: [UInt8]) -> Int {
        bytes[..<offset].filter { $0 == UInt8(ascii: "\n") }.count + 1
    }

    @Test("every byte flipped (8 ways) in a 3-record journal refuses, naming the line, but a last newline turned NUL; inside lines the reason is a checksum mismatch")
    func flipEveryByte() {
        let flips: [(String, (UInt8) -> UInt8)] = [
            ("^0x01", { $0 ^ 0x01 }), ("^0x20", { $0 ^ 0x20 }), ("^0x80", { $0 ^ 0x80 }), ("^0xFF", { $0 ^ 0xFF }),
            ("NUL", { _ in 0 }), ("newline", { _ in 0x0A }), ("}", { _ in UInt8(ascii: "}") }), ("\"", { _ in UInt8(ascii: "\"") }),
        ]
        var accepted: [String] = []
        for offset in Self.journal.indices {
            for (name, flip) in flips {
                var bytes = Self.journal
                bytes[offset] = flip(bytes[offset])
                guard bytes[offset] != Self.journal[offset] else { continue }
                var replay = JournalReplay()
                switch replay.replayJournal(bytes) {
                case .success(let outcome):
                    // Allowed only as a torn tail, and then only with a prefix of the records.
                    let fingerprint = StateFingerprint(replay)
                    #expect(outcome.tornBytes > 0 && Self.prefixes.contains(fingerprint), "byte \(offset) \(name): state \(fingerprint)")
                    accepted.append("byte \(offset) \(name)")
                case .failure(let failure):
                    #expect(failure.kind == .damaged, "byte \(offset) \(name): \(failure)")
                    // A newline put in front of a line leaves a blank line there and the damage on the next.
                    let lines = name == "newline" ? [line(of: offset, in: Self.journal), line(of: offset, in: Self.journal) + 1] : [line(of: offset, in: Self.journal)]
                    #expect(lines.contains(failure.line), "byte \(offset) \(name): \(failure)")
                    if offset < Self.journal.count - 1 {
                        #expect(failure.reason.hasPrefix("checksum mismatch"), "byte \(offset) \(name): \(failure)")
                    }
                }
            }
        }
        // Every complete line is sealed and the last newline is checked too: no flip gets through,
        // but one: the last newline turned NUL is what a power cut leaves of a record whose newline
        // never reached the disk (never acknowledged): a tail to cut, with the first two records kept.
        #expect(accepted == ["byte \(Self.journal.count - 1) NUL"], "accepted: \(accepted)")
    }

    @Test("truncation at every byte offset replays a prefix of the records and reports the rest as torn; never refuses")
    func truncateEveryOffset() throws {
        for length in 0...Self.journal.count {
            let bytes = Array(Self.journal[..<length])
            var replay = JournalReplay()
            let outcome = try replay.replayJournal(bytes).get()
            let complete = bytes.filter { $0 == UInt8(ascii: "\n") }.count
            let boundary = bytes.lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 } ?? 0
            #expect(StateFingerprint(replay) == Self.prefixes[complete], "length \(length)")
            #expect(outcome.applied == complete && outcome.validBytes == boundary && outcome.tornBytes == length - boundary, "length \(length): \(outcome)")
        }
    }

    @Test("NUL bytes after the last newline are a tail to cut (a power cut can leave them); before it they are damage")
    func nulTails() throws {
        let nuls = [UInt8](repeating: 0, count: 4096)
        for (bytes, applied) in [(nuls, 0), (Self.journal + nuls, 3), (Self.journal + Array(#"{"id":"r4","me"#.utf8) + nuls, 3)] {
            var replay = JournalReplay()
            let outcome = try replay.replayJournal(bytes).get()
            #expect(outcome.applied == applied && outcome.tornBytes == bytes.count - outcome.validBytes && outcome.tornRecordBytes == outcome.tornBytes)
            #expect(outcome.tornDescription?.contains("NUL") == true, "\(outcome)")
        }
    }

    @Test("NUL bytes before the last newline are damage: a run ended by a newline, a NUL line between records")
    func nulRuns() {
        let nuls = [UInt8](repeating: 0, count: 4096)
        let cases: [(String, [UInt8], Int)] = [
            ("records then NULs and a newline", Self.journal + nuls + [0x0A], 4),
            ("a NUL line between records", Array(Self.records[0].utf8) + nuls + [0x0A] + Array(Self.records[1].utf8), 2),
        ]
        for (name, bytes, line) in cases {
            var replay = JournalReplay()
            guard case .failure(let failure) = replay.replayJournal(bytes) else {
                Issue.record("\(name): replayed")
                continue
            }
            #expect(failure.line == line && failure.kind == .damaged, "\(name): \(failure)")
        }
    }

    @Test("whatever follows the last newline is a tail to cut; what it was is described when it cannot start a record", arguments: [
        (#"{"id":"r4","method":"user.crea"#, nil),
        (String(JournalText.create("u4", seq: 4).dropLast()), nil),  // whole record, newline missing
        (#"{"#, nil),
        (#"{"id":"r4"\#u{01}"#, "control byte 0x1"),
        (#"[1,2]"#, "do not start like a record"),
        (String(JournalText.create("u4", seq: 4).dropLast()) + "\0\0", "NUL bytes"),  // whole record, then a power cut's NULs
    ] as [(String, String?)])
    func tornTails(_ tail: String, _ problem: String?) {
        var replay = JournalReplay()
        let result = replay.replayJournal(Self.journal + Array(tail.utf8))
        guard case .success(let outcome) = result else {
            Issue.record("tail \(tail): \(result)")
            return
        }
        #expect(outcome.tornBytes == tail.utf8.count && outcome.applied == 3)
        #expect(outcome.tornDescription == nil && problem == nil || outcome.tornDescription?.contains(problem ?? "-") == true, "\(outcome)")
    }

    @Test("lines written before checksums replay, before sealed lines too; after a sealed line they are damage")
    func unsealedLines() throws {
        var old = JournalReplay()
        let oldText = JournalText.unsealedCreate("u1", seq: 1) + JournalText.unsealedCreate("u2", seq: 2)
        let outcome = try old.replayJournal(Array(oldText.utf8)).get()
        #expect(outcome.unsealed == 2 && outcome.sealed == 0 && old.state.users.count == 2)

        var upgraded = JournalReplay()  // an old journal a new daemon appended to
        let mixed = try upgraded.replayJournal(Array((oldText + JournalText.create("u3", seq: 3)).utf8)).get()
        #expect(mixed.unsealed == 2 && mixed.sealed == 1 && upgraded.lastSeq == 3)

        var damaged = JournalReplay()
        let text = JournalText.create("u1", seq: 1) + JournalText.unsealedCreate("u2", seq: 2)
        guard case .failure(let failure) = damaged.replayJournal(Array(text.utf8)) else {
            Issue.record("an unsealed line after a sealed one replayed")
            return
        }
        #expect(failure.line == 2 && failure.reason.hasPrefix("checksum mismatch"), "\(failure)")

        // A snapshot written before checksums replays too.
        var snapshot = JournalReplay()
        let oldSnapshot = #"{"rpcdSnapshot":1,"seq":7,"records":1}"# + "\n"
            + #"{"id":"s","method":"user.createUser","param":{"id":"u1","name":"N","email":"n@x"}}"# + "\n"
        let snap = try Array(oldSnapshot.utf8).withUnsafeBytes { snapshot.replaySnapshot($0) }.get()
        #expect(snap.unsealed == 2 && snapshot.lastSeq == 7 && snapshot.snapshotSeq == 7)
    }

    @Test("every byte of a snapshot flipped is refused")
    func snapshotFlips() throws {
        var source = JournalReplay()
        _ = try source.replayJournal(Self.journal).get()
        var bytes = JournalSnapshot.header(seq: 3, records: JournalSnapshot.recordCount(source.state))
        JournalSnapshot.encodeRecords(source.state) { bytes += $0 }
        #expect(String(decoding: bytes, as: UTF8.self).split(separator: "\n").allSatisfy { $0.hasSuffix("\"}") && $0.contains(#","crc":""#) })
        for offset in bytes.indices {
            var flipped = bytes
            flipped[offset] ^= 0x01
            var replay = JournalReplay()
            let result = flipped.withUnsafeBytes { replay.replaySnapshot($0) }
            guard case .failure(let failure) = result else {
                Issue.record("byte \(offset) flipped: the snapshot replayed")
                continue
            }
            #expect(failure.kind == .damaged, "byte \(offset): \(failure)")
        }
    }

    @Test("a journal that starts past what the snapshot covers is missing its snapshot")
    func missingSnapshot() throws {
        let tail = Array((JournalText.create("u5", seq: 5) + JournalText.create("u6", seq: 6)).utf8)
        var none = JournalReplay()
        guard case .failure(let failure) = none.replayJournal(tail) else {
            Issue.record("replayed")
            return
        }
        #expect(failure.kind == .missingSnapshot && failure.line == 1, "\(failure)")
        #expect(failure.reason.contains("no snapshot") && failure.reason.contains("records 1...4 are missing"), "\(failure)")

        func snapshot(seq: UInt64) -> [UInt8] {
            var bytes = JournalSnapshot.header(seq: seq, records: 0)
            JournalSnapshot.encodeRecords(Entities()) { bytes += $0 }
            return bytes
        }
        var older = JournalReplay()
        _ = try snapshot(seq: 2).withUnsafeBytes { older.replaySnapshot($0) }.get()
        guard case .failure(let stale) = older.replayJournal(tail) else {
            Issue.record("replayed")
            return
        }
        #expect(stale.kind == .missingSnapshot && stale.reason.contains("snapshot ends at 2"), "\(stale)")

        var covering = JournalReplay()
        _ = try snapshot(seq: 4).withUnsafeBytes { covering.replaySnapshot($0) }.get()
        #expect(try covering.replayJournal(tail).get().applied == 2)
    }

    @Test("intact records after a damaged line are counted (repair cuts without --force only when none follow)")
    func intactRecordsAfterDamage() {
        var bytes = Self.journal
        let second = Self.records[0].utf8.count
        bytes[second + 10] ^= 0x01
        let third = second + Self.records[1].utf8.count
        bytes.withUnsafeBytes { raw in
            let after = JournalReplay.intactRecords(raw, from: second + Self.records[1].utf8.count)
            #expect(after.count == 1 && after.firstOffset == third, "\(after)")
            #expect(JournalReplay.intactRecords(raw).count == 2)
            #expect(JournalReplay.intactRecords(raw, from: bytes.count).count == 0)
        }
        // Damage that runs to the end: nothing intact follows.
        let nulTail = Array(Self.records[0].utf8) + [UInt8](repeating: 0, count: 100) + [0x0A] + [UInt8](repeating: 0, count: 50)
        nulTail.withUnsafeBytes { raw in
            #expect(JournalReplay.intactRecords(raw, from: second).count == 0)
        }
    }
}

@Suite struct JournalSequenceEdgeTests {
    @Test("sequence numbers at UInt64.max never trap: a skipped record at the maximum, then another, is a sequence problem")
    func seqAtMaximum() throws {
        var replay = JournalReplay()
        let header = JournalSnapshot.header(seq: .max, records: 0)
        _ = try header.withUnsafeBytes { replay.replaySnapshot($0) }.get()
        let journal = Array((JournalText.create("a", seq: .max) + JournalText.create("b", seq: 1)).utf8)
        guard case .failure(let failure) = replay.replayJournal(journal) else {
            Issue.record("replayed a record after the maximum sequence number")
            return
        }
        #expect(failure.kind == .sequence, "\(failure)")
        var fresh = JournalReplay()
        let zero = Array(JournalText.create("z", seq: 0).utf8)
        if case .success = fresh.replayJournal(zero) { Issue.record("sequence number 0 replayed") }
    }
}

/// The spaces a journal writer keeps ahead of the end under a sustained `fsync always` load
/// (`Journal.keepSpaceAhead`), as a crash leaves them: dropped by a start, apart from damage.
@Suite("journal damage: spaces written ahead of the end (pure)")
struct JournalSpaceAheadTests {
    static let spaces = String(repeating: " ", count: 4096)
    static let torn = #"{"id":"r4","method":"user.crea"#

    @Test("spaces after the last line, a torn record before them, or one appended after them: dropped, every record replayed", arguments: [
        (spaces, 4096),
        (torn + spaces, 4096),
        (spaces + torn, 4096),
        (String(JournalText.create("u4", seq: 4).dropLast()) + spaces, 4096),  // a whole record, its newline not written
    ] as [(String, Int)])
    func dropped(_ tail: String, _ spaceBytes: Int) throws {
        var replay = JournalReplay()
        let outcome = try replay.replayJournal(JournalDamageTests.journal + Array(tail.utf8)).get()
        #expect(outcome.applied == 3 && outcome.validBytes == JournalDamageTests.journal.count)
        #expect(outcome.tornBytes == tail.utf8.count && outcome.spaceBytes == spaceBytes, "\(outcome)")
    }

    @Test("a file of spaces alone is an empty journal")
    func onlySpaces() throws {
        var replay = JournalReplay()
        let outcome = try replay.replayJournal(Array(Self.spaces.utf8)).get()
        #expect(outcome.applied == 0 && outcome.validBytes == 0 && outcome.spaceBytes == 4096)
    }

    @Test("damage, not a tail to cut: a line of spaces between records, a whole record whose newline was overwritten", arguments: [
        ("    \n" + JournalText.create("u4", seq: 4), 4, ""),
        (String(JournalText.create("u4", seq: 4).dropLast()) + "x", 4, "its newline is damaged"),  // a whole record may have been acknowledged
    ] as [(String, Int, String)])
    func damage(_ tail: String, _ line: Int, _ reason: String) {
        var replay = JournalReplay()
        guard case .failure(let failure) = replay.replayJournal(JournalDamageTests.journal + Array(tail.utf8)) else {
            Issue.record("replayed: \(tail.prefix(40))")
            return
        }
        #expect(failure.line == line && failure.kind == .damaged && (reason.isEmpty || failure.reason.contains(reason)), "\(failure)")
    }
}
