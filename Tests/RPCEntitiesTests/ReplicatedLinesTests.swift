import Testing
import RPCSchema
@testable import RPCEntities

/// A follower applies its leader's journal lines as they came (`Dispatcher.applyReplicated(lines:…)`):
/// in order, the ones it has skipped, its journal given the same bytes, and a gap, a damaged line or
/// a record that does not apply stopping the run after the lines before it.
@Suite struct ReplicatedLinesTests {
    /// The sealed line a leader journals (and feeds) for `request` as record `seq`.
    private static func line(_ seq: UInt64, _ request: Request) -> [UInt8] {
        var out: [UInt8] = []
        JournalRecord.encode(JournalRecord.Body(request), seq: seq, into: &out)
        return out
    }

    private static func request(_ seq: UInt64, key: String? = nil) -> Request {
        Request(id: "x", method: CreateUser.method, param: ["id": .string("u\(seq)"), "name": "N\u{E9}", "email": "e@x"], key: key)
    }

    private static func create(_ seq: UInt64, key: String? = nil) -> [UInt8] { line(seq, request(seq, key: key)) }

    private final class Log: MutationLog, @unchecked Sendable {
        // @unchecked: one test uses it from one thread.
        var bodies: [[UInt8]] = []
        func refusal() -> String? { nil }
        func record(_ body: JournalRecord.Body) -> UInt64? {
            bodies.append(body.bytes)
            return nil
        }
        func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) { done(nil) }
    }

    @Test func linesApplyInOrderSkipWhatCameBeforeAndJournalTheLeadersBytes() {
        let log = Log()
        let dispatcher = Dispatcher(state: Entities(), log: log)
        var applier = JournalReplay()
        let first = (1...3).flatMap { Self.create($0, key: $0 == 2 ? "k2" : nil) }
        let run = first.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 0, applier: &applier) }
        #expect(run.applied == 3 && run.lastSeq == 3 && run.failure == nil && run.refused == nil && run.lastMethod == "user.createUser")
        #expect(log.bodies.count == 3)
        #expect(dispatcher.withState { $0.users.count } == 3 && dispatcher.withState { $0.users["u2"]?.name } == "N\u{E9}")
        #expect(dispatcher.withState { $0.keys.count } == 1, "the keyed record's outcome is remembered")

        // A reconnect sends 2 and 3 again: skipped; 4 and 5 apply.
        let again = (2...5).flatMap { Self.create($0) }
        let second = again.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 3, applier: &applier) }
        #expect(second.applied == 2 && second.lastSeq == 5 && second.failure == nil && log.bodies.count == 5)
        #expect(dispatcher.withState { $0.users.count } == 5)
        // What the follower journals is what the leader did, byte for byte.
        #expect(log.bodies == (1...5).map { JournalRecord.Body(Self.request($0, key: $0 == 2 ? "k2" : nil)).bytes })
    }

    @Test func aGapADamagedLineOrADivergenceStopsTheRunAfterTheLinesBeforeIt() {
        let log = Log()
        let dispatcher = Dispatcher(state: Entities(), log: log)
        var applier = JournalReplay()
        let gap = Self.create(1) + Self.create(3)
        let gapRun = gap.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 0, applier: &applier) }
        #expect(gapRun.applied == 1 && gapRun.lastSeq == 1 && log.bodies.count == 1)
        #expect(gapRun.failure?.contains("does not follow the last one here: sequence number 3 after 1") == true, "\(gapRun.failure ?? "no failure")")

        var damaged = Self.create(2)
        damaged[20] ^= 0x01
        let damagedRun = damaged.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 1, applier: &applier) }
        #expect(damagedRun.applied == 0 && damagedRun.lastSeq == 1 && damagedRun.failure?.contains("damaged") == true && log.bodies.count == 1)

        let update = Self.line(3, Request(id: "x", method: UpdateUser.method, param: ["id": "nobody", "name": "N"]))
        let diverged = (Self.create(2) + update).withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 1, applier: &applier) }
        #expect(diverged.applied == 1 && diverged.lastSeq == 2 && log.bodies.count == 2)
        #expect(diverged.failure?.hasPrefix("record 3 (user.updateUser) does not apply here: ") == true, "\(diverged.failure ?? "no failure")")
        #expect(diverged.failure?.contains("user.updateUser does not apply") == false, "the method is named once: \(diverged.failure ?? "")")
        let unknown = Self.line(3, Request(id: "x", method: RPCMethod("user", "frobnicate"), param: ["id": "u2"]))
        let foreign = unknown.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 2, applier: &applier) }
        #expect(foreign.applied == 0 && foreign.failure == #"record 3 (user.frobnicate) does not apply here: unknown method "user.frobnicate""#, "\(foreign.failure ?? "no failure")")
        #expect(dispatcher.withState { $0.users.count } == 2)
    }

    /// Which lines a follower takes as records without decoding them: `{"id":"r<seq>"` and a seal.
    @Test func aFeedRecordLineIsKnownByItsIdAndItsSeal() {
        func seq(_ text: [UInt8]) -> UInt64? { text.withUnsafeBytes { JournalRecord.feedRecordSequence($0) } }
        #expect(seq(Array(Self.create(42).dropLast())) == 42)
        #expect(seq(Array(Self.create(42))) == nil, "with its newline: not a line")
        #expect(seq(Array(#"{"id":"r7","method":"user.createUserResult","param":{"sequence":7}}"#.utf8)) == nil, "a reply has no seal")
        #expect(seq(Array(#"{"id":"s","method":"user.createUser","param":{},"crc":"00000000"}"#.utf8)) == nil)
        #expect(seq(Array(#"{"id":"r","method":"m.m","param":{},"crc":"00000000"}"#.utf8)) == nil, "no digits")
        #expect(seq(Array(#"{"id":"r99999999999999999999","method":"m.m","crc":"00000000"}"#.utf8)) == nil, "past UInt64")
        #expect(seq(Array(#"{"id":"r5x","method":"m.m","crc":"00000000"}"#.utf8)) == nil)
        #expect(seq(Array(#"{"id":"r5""#.utf8)) == nil)

        func snapshotRecord(_ text: String) -> Bool { Array(text.utf8).withUnsafeBytes { JournalRecord.isFeedSnapshotRecord($0) } }
        #expect(snapshotRecord(#"{"id":"s","method":"user.createUser","param":{"id":"a"},"crc":"0badf00d"}"#))
        #expect(!snapshotRecord(#"{"id":"s","method":"replication.term","param":{"term":1},"crc":"0badf00d"}"#), "a term goes the decoded way")
        #expect(!snapshotRecord(#"{"id":"s","method":"replication.key","param":{},"crc":"0badf00d"}"#))
        #expect(!snapshotRecord(#"{"id":"s","method":"user.createUser","param":{"id":"a"}}"#), "no seal")
        #expect(!snapshotRecord(#"{"id":"s1","method":"user.createUser","param":{"id":"a"},"crc":"0badf00d"}"#))
    }

    /// A leader's snapshot records, applied from their lines: all of them, or the first that fails
    /// says why (a damaged one too).
    @Test func snapshotLinesApplyAsAFileDoes() {
        var replay = JournalReplay()
        replay.receivingSnapshot(records: 3)
        var lines: [UInt8] = []
        for n in 1...3 {
            let start = lines.count
            lines.append(contentsOf: #"{"id":"s","method":"user.createUser","param":{"id":"u\#(4 - n)","name":"N","email":"e@x"}}"#.utf8)
            lines.append(UInt8(ascii: "\n"))
            JournalRecord.seal(lineStart: start, into: &lines)
        }
        #expect(lines.withUnsafeBytes { replay.applySnapshotLines($0) } == nil && replay.applied == 3)
        let state = replay.receivedSnapshot()
        #expect(state.users.page(after: nil, limit: nil).records.map(\.id) == ["u1", "u2", "u3"])
        lines[30] ^= 0x01
        var other = JournalReplay()
        #expect(lines.withUnsafeBytes { other.applySnapshotLines($0) }?.hasPrefix("a record is damaged: ") == true)
    }
}
