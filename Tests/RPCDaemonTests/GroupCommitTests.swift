import RPCEntities
import RPCSchema
import Testing
@testable import RPCDaemon

@Suite struct GroupCommitTests {
    @Test("a turn's question counts the sequence numbers left: near the end it is refused whole, and each mutation asks alone")
    func refusalForATurnCountsSequenceNumbers() {
        let commit = GroupCommit(lastSeq: .max - 2, maxBehindBytes: 1 << 20)
        #expect(commit.refusal() == nil)
        #expect(commit.refusal(records: 1) == nil)
        #expect(commit.refusal(records: 2) == nil)
        #expect(commit.refusal(records: 3)?.contains("fewer than 3 sequence numbers") == true)
        #expect(commit.refusal(records: .max) != nil)
        let spent = GroupCommit(lastSeq: .max, maxBehindBytes: 1 << 20)
        #expect(spent.refusal()?.contains("used up") == true)
        #expect(spent.refusal(records: 1)?.contains("used up") == true)
        #expect(GroupCommit(lastSeq: 0, maxBehindBytes: 1 << 20).refusal(records: 1_000_000) == nil)
    }

    private static let record = JournalRecord.Body(
        Request(id: "r", method: CreateUser.method, param: ["id": "u1", "name": "Ada", "email": "a@x"]))

    /// Appends `count` records; whether each asked to wake the writer.
    private func wakes(_ commit: inout GroupCommit, _ count: Int = 4) -> [Bool] {
        (0..<count).map { _ in commit.append(Self.record).wakeWriter }
    }

    /// The writer's part: takes the batch, `appendingMeanwhile` records arrive while it is written
    /// and synced, and it is done.
    private func writeBatch(_ commit: inout GroupCommit, appendingMeanwhile count: Int = 0) throws {
        let taken = commit.takeBatch()
        let batch = try #require(taken)
        for _ in 0..<count { _ = commit.append(Self.record) }
        _ = commit.finished(batch, failure: nil)
    }

    /// A commit whose writer wrote a batch of `records` while `appendingMeanwhile` more arrived.
    private func afterBatch(of records: Int, appendingMeanwhile count: Int = 0) throws -> GroupCommit {
        var commit = GroupCommit(lastSeq: 0, maxBehindBytes: 1 << 20)
        for _ in 0..<records { _ = commit.append(Self.record) }
        try writeBatch(&commit, appendingMeanwhile: count)
        return commit
    }

    @Test("a writer waiting for 3 returning records is woken by the append of the 3rd, once; never when they are there already")
    func awaitReturnWakesOnTheLastRecord() {
        var commit = GroupCommit(lastSeq: 10, maxBehindBytes: 1 << 20)
        let waits = commit.awaitReturn(3)
        #expect(waits && commit.awaitsReturn)
        #expect(wakes(&commit) == [false, false, true, false], "the 3rd wakes, once")
        #expect(commit.lastSeq == 14 && !commit.awaitsReturn)
        commit.stopAwaitingReturn()

        // Four are pending: a wait for 3 is over before it starts, and no append wakes anyone.
        let waitsAgain = commit.awaitReturn(3)
        #expect(!waitsAgain && !commit.awaitsReturn)
        #expect(wakes(&commit, 2) == [false, false])
    }

    @Test("the count starts at the durable record: after a batch, only records appended since count")
    func awaitReturnCountsFromTheDurableRecord() throws {
        var commit = try afterBatch(of: 5)
        let waits = commit.awaitReturn(2)
        #expect(waits)
        #expect(wakes(&commit, 3) == [false, true, false])
    }

    @Test("records appended while a batch was written are not among the peers it answered: the wait counts past them")
    func awaitReturnCountsPastRecordsAppendedDuringTheWrite() throws {
        var commit = try afterBatch(of: 5, appendingMeanwhile: 3)
        // The five answered peers: the wait ends at the fifth record after those three.
        let waits = commit.awaitReturn(5)
        #expect(waits)
        #expect(wakes(&commit, 6) == [false, false, false, false, true, false])
        commit.stopAwaitingReturn()
        // The next batch (the three and the five) was written with nothing arriving meanwhile.
        try writeBatch(&commit)
        let waitsAgain = commit.awaitReturn(8)
        #expect(waitsAgain)
        #expect(wakes(&commit, 8) == [false, false, false, false, false, false, false, true])
    }

    @Test("a wait given up (its deadline passed) is woken by no later append")
    func awaitReturnGivenUp() {
        var commit = GroupCommit(lastSeq: 0, maxBehindBytes: 1 << 20)
        let waits = commit.awaitReturn(2)
        #expect(waits)
        _ = commit.append(Self.record)
        commit.stopAwaitingReturn()
        #expect(wakes(&commit, 2) == [false, false])
    }

    @Test("a writer that finds a pass still appending waits for its end, which wakes it once")
    func awaitPassEndWokenByTheEndOfThePass() throws {
        var commit = try afterBatch(of: 3)
        _ = wakes(&commit, 2)
        let waits = commit.awaitPassEnd()
        #expect(waits && commit.awaitsPassEnd)
        let woken = commit.passEnded()
        #expect(woken && !commit.awaitsPassEnd, "the end of the pass wakes the waiting writer")
        let again = commit.passEnded()
        #expect(!again, "once")
    }

    @Test("no wait for a pass when nothing is pending, or when the pass that appended ended already")
    func awaitPassEndSkipped() throws {
        var commit = try afterBatch(of: 3)
        let idle = commit.awaitPassEnd()
        #expect(!idle, "nothing pending")
        _ = wakes(&commit, 2)
        let nobody = commit.passEnded()
        #expect(!nobody, "no writer waits")
        let ended = commit.awaitPassEnd()
        #expect(!ended && !commit.awaitsPassEnd, "the records' pass ended")
        // A wait given up at its deadline: the pass's end later wakes nothing.
        _ = wakes(&commit, 1)
        let waits = commit.awaitPassEnd()
        #expect(waits)
        commit.stopAwaitingPassEnd()
        let late = commit.passEnded()
        #expect(!late)
    }
}
