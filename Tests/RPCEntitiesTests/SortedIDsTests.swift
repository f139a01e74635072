import Testing
import RPCSchema
@testable import RPCEntities

/// `SortedIDs` against a model (a set, sorted by bytes when compared), and `Records` paging.
@Suite struct SortedIDsTests {
    /// A small deterministic generator (SplitMix64), so a failure replays.
    struct Random {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }

    /// Ids from a space of `space`, some with non-ASCII and canonically equivalent spellings.
    static func id(_ n: Int) -> ExactID {
        switch n % 4 {
        case 0: return ExactID("u\(n)")
        case 1: return ExactID("caf\u{E9}\(n)")
        case 2: return ExactID("cafe\u{301}\(n)")
        default: return ExactID("\(n)\u{212A}")
        }
    }

    private func expectMatches(_ ids: SortedIDs, _ model: Set<ExactID>, _ random: inout Random, _ note: String) {
        #expect(ids.violation() == nil, "\(note): \(ids.violation() ?? "")")
        let sorted = model.sorted()
        #expect(ids.count == model.count, "\(note)")
        #expect(ids.all == sorted, "\(note): contents differ")
        // Pages after absent and present ids, with small and huge limits.
        for _ in 0..<20 {
            let after: ExactID? = random.below(5) == 0 ? nil : Self.id(random.below(40_000))
            let limit = [1, 2, 7, 300, Int.max][random.below(5)]
            let start = after.map { a in sorted.firstIndex { a < $0 } ?? sorted.count } ?? 0
            let want = Array(sorted[start..<(start + min(limit, sorted.count - start))])
            #expect(ids.ids(after: after, limit: limit) == want, "\(note): page after \(after?.string ?? "nil") limit \(limit)")
        }
        for _ in 0..<20 {
            let probe = Self.id(random.below(40_000))
            #expect(ids.contains(probe) == model.contains(probe), "\(note): contains \(probe)")
        }
    }

    @Test func randomInsertsAndRemovesMatchASortedModel() {
        var random = Random(state: 42)
        var ids = SortedIDs()
        var model = Set<ExactID>()
        // Grow to tens of thousands of ids (three levels), churn, then shrink to empty (merges).
        let phases: [(ops: Int, insertPercent: Int)] = [(30_000, 90), (20_000, 50), (40_000, 5)]
        for (number, phase) in phases.enumerated() {
            for op in 0..<phase.ops {
                let id = Self.id(random.below(40_000))
                if random.below(100) < phase.insertPercent {
                    #expect(ids.insert(id) == model.insert(id).inserted)
                } else {
                    #expect(ids.remove(id) == (model.remove(id) != nil))
                }
                if op % 5_000 == 4_999 { expectMatches(ids, model, &random, "phase \(number) op \(op)") }
            }
        }
        for id in model { ids.remove(id) }
        model.removeAll()
        expectMatches(ids, model, &random, "emptied")
        #expect(ids.root.isLeaf && ids.root.keys.isEmpty)
    }

    @Test func ascendingAndDescendingRunsStayBalanced() {
        var up = SortedIDs()
        var down = SortedIDs()
        for n in 0..<20_000 {
            up.insert(ExactID(String(format: "%08d", n)))
            down.insert(ExactID(String(format: "%08d", 19_999 - n)))
        }
        #expect(up.violation() == nil && down.violation() == nil)
        #expect(up.all == down.all && up.count == 20_000)
        #expect(up.ids(after: "00000099", limit: 2) == ["00000100", "00000101"])
        #expect(up.ids(after: "99999999", limit: 5).isEmpty && up.ids(after: nil, limit: 0).isEmpty)
        #expect(up.ids(after: nil, limit: -1).isEmpty && up.ids(after: nil, limit: Int.min).isEmpty)
    }

    /// After a copy (compaction's snapshot), one insert copies the nodes on its path, not the index.
    @Test func aCopyThenOneInsertSharesEveryOtherLeaf() {
        var ids = SortedIDs()
        for n in 0..<50_000 { ids.insert(ExactID("u\(n)")) }
        let snapshot = ids
        ids.insert("u25000x")
        ids.remove("u1")
        func leaves(_ node: SortedIDs.Node) -> [UnsafeRawPointer?] {
            node.isLeaf ? [node.keys.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }] : node.children.flatMap(leaves)
        }
        let before = leaves(snapshot.root)
        let after = leaves(ids.root)
        #expect(before.count > 100 && before.count == after.count)
        let copied = zip(before, after).filter { $0 != $1 }.count
        #expect(copied <= 2, "\(copied) of \(before.count) leaves were copied")
        // And the copy kept its own contents.
        #expect(snapshot.count == 50_000 && snapshot.contains("u1") && !snapshot.contains("u25000x"))
        #expect(ids.count == 50_000 && !ids.contains("u1") && ids.contains("u25000x"))
    }

    @Test func exactIDsCompareBytesNotCanonicalEquivalence() {
        let composed = ExactID("caf\u{E9}")
        let decomposed = ExactID("cafe\u{301}")
        #expect(composed.string == decomposed.string, "Swift String == says they are equal")
        #expect(composed != decomposed && Set([composed, decomposed]).count == 2)
        #expect(decomposed < composed, "byte order: 0x65 (e) sorts before 0xC3 (é)")
        #expect(ExactID("\u{212A}") != ExactID("K") && ExactID("K") < ExactID("\u{212A}"))
        #expect(ExactID("ab") < ExactID("abc") && ExactID("abcdefgh1") < ExactID("abcdefgh2") && ExactID("") < ExactID("a"))
        #expect(ExactID("abcdefghij") == ExactID("abcdefghij") && ExactUTF8.equal("x\u{E9}", "x\u{E9}"))
        #expect(!ExactUTF8.equal("caf\u{E9}", "cafe\u{301}"))
    }

    /// `Records.page` with every limit a peer can send: no arithmetic overflow, right pages.
    @Test(arguments: [Int.max, Int.max - 1, Int.max - 2, 3, 2, 1, 0, -1, Int.min])
    func pagingWithExtremeLimits(_ limit: Int) {
        var records = Records<String>()
        for id in ["u3", "u1", "u2", "u0"] { records.insert(id, id: id) }
        let page = records.page(after: "u1", limit: limit)
        let expected = ["u2", "u3"].prefix(max(0, limit))
        #expect(page.records == Array(expected), "limit \(limit)")
        #expect(page.next == (limit == 1 ? "u2" : nil), "limit \(limit)")
        #expect(records.page(after: nil, limit: limit).records.count == min(max(0, limit), 4))
    }

    @Test func recordsKeepCanonicallyEquivalentIDsApart() {
        var records = Records<Int>()
        records.insert(1, id: "caf\u{E9}")
        records.insert(2, id: "cafe\u{301}")
        #expect(records.count == 2 && records["caf\u{E9}"] == 1 && records["cafe\u{301}"] == 2)
        #expect(records.page(after: nil, limit: nil).records == [2, 1], "byte order")
        #expect(records.page(after: "cafe\u{301}", limit: nil).records == [1])
        records.remove("cafe\u{301}")
        #expect(records.count == 1 && records["caf\u{E9}"] == 1 && records["cafe\u{301}"] == nil)
    }
}
