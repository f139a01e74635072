import RPCEntities
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
}
