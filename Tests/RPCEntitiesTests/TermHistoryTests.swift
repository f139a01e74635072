@testable import RPCEntities
import RPCSchema
import Testing

@Suite("term history: where two histories part, and terms through the journal and a snapshot")
struct TermHistoryTests {
    static func mark(_ term: Int, _ id: String, _ seq: Int) -> TermMark { TermMark(term: term, termId: id, sequence: seq) }

    @Test("the last shared sequence number", arguments: [
        // Same history: all of the shorter one is shared.
        ([mark(1, "a", 11)], 20, [mark(1, "a", 11)], 30, 20),
        ([mark(1, "a", 11)], 30, [mark(1, "a", 11)], 20, 20),
        // Both never promoted: the implicit term 0.
        ([], 15, [], 10, 10),
        // The old leader (term 0 through 15) against the promoted one (term 1 from 11): 10.
        ([], 15, [mark(1, "a", 11)], 14, 10),
        // Two promotions to term 1 with other ids, both at 6: 5.
        ([mark(1, "b", 6)], 9, [mark(1, "a", 6)], 8, 5),
        // The subscriber lacks the leader's newer term but holds records past its start.
        ([mark(1, "a", 11)], 25, [mark(1, "a", 11), mark(2, "c", 21)], 30, 20),
        // ...and none past it: nothing to cut.
        ([mark(1, "a", 11)], 20, [mark(1, "a", 11), mark(2, "c", 21)], 30, 20),
        // A history that starts with a term at 1 has no implicit term 0.
        ([mark(1, "a", 1)], 5, [], 5, 0),
    ])
    func common(mine: [TermMark], last: Int, leader: [TermMark], leaderLast: Int, shared: Int) {
        #expect(TermHistory.common(mine, last: UInt64(last), leader: leader, leaderLast: UInt64(leaderLast)) == UInt64(shared))
    }

    @Test("terms only grow: a lower or equal number is refused, the same term again is no change")
    func onlyGrow() {
        var history = TermHistory()
        #expect(history.add(.init(term: 2, id: "x", start: 5, leader: "h:1")) == nil)
        #expect(history.add(.init(term: 2, id: "x", start: 5, leader: "h:1")) == nil)
        #expect(history.add(.init(term: 2, id: "y", start: 9, leader: "h:2")) != nil)
        #expect(history.add(.init(term: 1, id: "z", start: 9, leader: "h:2")) != nil)
        #expect(history.add(.init(term: 3, id: "z", start: 9, leader: "h:2")) == nil)
        #expect(history.terms.map(\.term) == [2, 3])
        #expect(TermHistory.newID().utf8.count == 32 && TermHistory.newID() != TermHistory.newID())
    }

    @Test("a term record replays into the history, and a snapshot carries the history without counting it as a record")
    func throughJournalAndSnapshot() throws {
        var source = JournalReplay()
        func term(_ number: Int, _ id: String, seq: UInt64) -> String {
            JournalText.line(Request(id: "r\(seq)", method: ReplicationTerm.method, param: ["term": .number(String(number)), "termId": .string(id), "leader": "10.0.0.1:7878"]), seq: seq)
        }
        let journal = JournalText.create("u1", seq: 1) + term(1, "00ff", seq: 2) + JournalText.create("u2", seq: 3)
        _ = try source.replayJournal(Array(journal.utf8)).get()
        #expect(source.state.terms.terms == [TermHistory.Term(term: 1, id: "00ff", start: 2, leader: "10.0.0.1:7878")])

        var bytes = JournalSnapshot.header(seq: source.lastSeq, records: JournalSnapshot.recordCount(source.state))
        JournalSnapshot.encodeRecords(source.state) { bytes += $0 }
        var copy = JournalReplay()
        let outcome = try bytes.withUnsafeBytes { copy.replaySnapshot($0) }.get()
        #expect(outcome.applied == 2 && copy.lastSeq == 3)
        #expect(copy.state.terms == source.state.terms)

        // A term that does not grow is an inconsistent journal, not a skipped line.
        var bad = JournalReplay()
        #expect(throws: JournalReplay.Failure.self) { try bad.replayJournal(Array((journal + term(1, "0abc", seq: 4)).utf8)).get() }
    }
}
