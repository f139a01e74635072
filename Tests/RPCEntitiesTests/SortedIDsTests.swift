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

    /// Ids from a space of `space`, some with non-ASCII and canonically equivalent spellings, some
    /// sharing their first 16 bytes (compared past the eight-byte words), some with zero bytes
    /// (an id that is another plus a zero byte sorts right after it).
    static func id(_ n: Int) -> ExactID {
        switch n % 8 {
        case 0: return ExactID("u\(n)")
        case 1: return ExactID("caf\u{E9}\(n)")
        case 2: return ExactID("cafe\u{301}\(n)")
        case 3: return ExactID("a-shared-prefix-\(n)")
        case 4: return ExactID("z\u{0}\(n % 3 == 0 ? "" : "\u{0}")\(n)")
        case 5: return ExactID("a-shared-prefix-\(n / 10)\(n % 2 == 0 ? "" : "\u{0}")")
        case 6: return ExactID("\(n)\u{212A}")
        // Longer than 24 bytes (a tail in the key), with a character across byte 24 or not.
        default: return ExactID(String(repeating: "x", count: n % 5) + "longer-than-24-bytes-\u{20AC}\u{1F600}\(n % 97)")
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

    /// Ids that come in order fill their leaves: a leaf past which an id goes splits it off alone
    /// (a half split left every leaf half full, the index's memory doubled); ids that come
    /// in reverse still split in halves.
    @Test func idsInOrderFillTheirLeaves() {
        var up = SortedIDs()
        for n in 0..<20_000 { up.insert(ExactID(String(format: "%08d", n))) }
        func leaves(_ node: SortedIDs.Node) -> Int { node.isLeaf ? 1 : node.children.reduce(0) { $0 + leaves($1) } }
        #expect(leaves(up.root) <= 20_000 / SortedIDs.leafCapacity + 1, "\(leaves(up.root)) leaves for 20,000 ids")
        #expect(up.violation() == nil && up.count == 20_000)
        up.insert(ExactID("00000100a"))
        #expect(up.violation() == nil && up.ids(after: "00000100", limit: 2) == ["00000100a", "00000101"])
    }

    /// Each id of the index costs its text and the three words beside it: 40 bytes, not more.
    @Test func aKeyIsFortyBytes() {
        #expect(MemoryLayout<SortedIDs.Key>.stride == 40)
        let key = SortedIDs.Key(ExactID("a-shared-prefix-and-more"))
        #expect(key.id == ExactID("a-shared-prefix-and-more") && key.id.fingerprint == ExactID("a-shared-prefix-and-more").fingerprint)
    }

    /// A bulk-built index (a restart: leaves 3/4 full, no room) that then takes ids in no order
    /// grows each leaf to what it holds before a split, not to twice its count.
    @Test func leavesGrowToTheirCapacityAfterABulkBuild() {
        func uuid(_ n: Int) -> ExactID {
            ExactID(String(format: "%08x-%04x-4%03x-9%03x-%012x", UInt32(truncatingIfNeeded: n &* 2_654_435_761), n & 0xFFFF, n % 4096, (n / 7) % 4096, n))
        }
        var ids = SortedIDs()
        ids.insert(contentsOf: (0..<50_000).map(uuid))
        for n in 50_000..<60_000 { ids.insert(uuid(n)) }
        func leaves(_ node: SortedIDs.Node) -> [SortedIDs.Node] { node.isLeaf ? [node] : node.children.flatMap(leaves) }
        let all = leaves(ids.root)
        let slots = all.reduce(0) { $0 + $1.keys.capacity }
        #expect(ids.violation() == nil && ids.count == 60_000)
        #expect(all.allSatisfy { $0.keys.capacity <= SortedIDs.leafCapacity + 8 }, "a leaf of \(all.map(\.keys.capacity).max() ?? 0) slots")
        #expect(slots < 60_000 * 6 / 5, "\(slots) slots for 60,000 ids")
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

    /// Ids of 16 to 24 bytes live in their key's prefix (no text of their own), unless they end in
    /// NUL; mixed with ids one byte shorter or longer, ending in NUL, empty, or sharing all 24
    /// prefix bytes, they sort in byte order and come back byte for byte.
    @Test func idsHeldInTheirPrefix() {
        let base = "customer-user-0000000042"  // 24 bytes
        let b15 = String(base.prefix(15)), b16 = String(base.prefix(16)), b20 = String(base.prefix(20)), b23 = String(base.prefix(23))
        var texts: [String] = ["", "\u{0}", b15, b16, b16 + "\u{0}", b23 + "\u{E9}", base, base + "\u{0}", base + "x"]
        texts += [b20, b20 + "\u{0}\u{0}\u{0}\u{0}z", "caf\u{E9}-caf\u{E9}-caf\u{E9}-x"]
        // Longer than 24 bytes: a UUID; NUL as byte 24; a character of 2, 3 or 4 bytes across byte 24.
        texts += ["8f14e45f-ceea-467a-9b4f-5d2c8e1a7b3c", b23 + "\u{0}tail", b23 + "\u{0}", base + "\u{0}x"]
        for head in [b20, b20 + "-", b20 + "--", b23] {
            texts += [head + "\u{E9}tail", head + "\u{20AC}tail", head + "\u{1F600}tail", head + "\u{1F600}", head + "\u{1F600}\u{0}"]
        }
        texts += texts.map { $0 + "1" }
        let ids = texts.map { ExactID($0) }
        for id in ids {
            let count = id.string.utf8.count
            let inPrefix = count >= 16 && count <= 24 && id.string.utf8.last != 0
            #expect(SortedIDs.Key(id).isInPrefix == (inPrefix || count == 0), "\(Array(id.string.utf8))")
            #expect(SortedIDs.Key(id).id == id && SortedIDs.Key(id).text.utf8.elementsEqual(id.string.utf8), "\(Array(id.string.utf8))")
            // Past 24 bytes the key keeps a tail (short ones inline), unless byte 24 is NUL.
            let tail = count > 24 && Array(id.string.utf8)[23] != 0
            #expect(SortedIDs.Key(id).isTail == tail, "\(Array(id.string.utf8))")
            if tail { #expect(SortedIDs.Key(id).string.utf8.count <= count - 21, "\(Array(id.string.utf8))") }
        }
        #expect(SortedIDs.Key(ExactID("8f14e45f-ceea-467a-9b4f-5d2c8e1a7b3c")).string == "5d2c8e1a7b3c")
        let sorted = Set(ids).sorted()
        #expect(SortedIDs.sortedUnique(ids + ids).map(\.id) == sorted)
        var one = SortedIDs()
        for id in ids.reversed() { one.insert(id) }
        #expect(one.violation() == nil && one.all == sorted)
        let after = ExactID(b16)
        let expected: [ExactID] = Array(sorted.filter { after < $0 }.prefix(2))
        #expect(one.ids(after: after, limit: 2) == expected)
        for id in ids { #expect(one.contains(id) && one.remove(id)) }
        #expect(one.count == 0)
    }

    /// Ids that share their first 8 bytes (a tenant or a run's tag) and differ in any byte after,
    /// up to and past the 24 the bulk sort's radix passes read, with repeats: a bulk sort puts them
    /// in byte order, each once.
    @Test func idsWithASharedPrefixSortByEveryByte() {
        var random = Random(state: 11)
        let alphabet = Array("09AZaz-_.\u{0}\u{E9}\u{7F}".unicodeScalars)
        let ids: [ExactID] = (0..<30_000).map { _ in
            var suffix = ""
            for _ in 0..<random.below(24) { suffix.unicodeScalars.append(alphabet[random.below(alphabet.count)]) }
            return ExactID("bB21EC1C" + suffix)
        }
        let sorted = SortedIDs.sortedUnique(ids)
        #expect(sorted.map(\.id) == Set(ids).sorted())
        var bulk = SortedIDs()
        bulk.insert(contentsOf: ids)
        #expect(bulk.violation() == nil && bulk.all == Set(ids).sorted())
    }

    /// Bulk inserts (journal replay): into an empty set (a bottom-up build at every size around a
    /// node's capacity and up to three levels), into a large set (a merge and rebuild) and into a
    /// small one (inserts in order), with repeats and ids already present; the tree keeps its shape
    /// rules, and single inserts and removals work on it afterwards.
    @Test func bulkInsertsMatchASortedModel() {
        var random = Random(state: 7)
        for size in [0, 1, 2, 191, 192, 193, 255, 256, 257, 384, 385, 12_288, 12_289, 40_000] {
            let ids = (0..<size).map { _ in Self.id(random.below(size * 2 + 1)) }
            var bulk = SortedIDs()
            bulk.insert(contentsOf: ids)
            expectMatches(bulk, Set(ids), &random, "built from \(size)")
        }
        var ids = SortedIDs()
        var model = Set<ExactID>()
        for round in 0..<6 {
            // Batches of 20,000, then 100 (below an eighth of the ids here: inserted one by one).
            let batch = (0..<(round < 3 ? 20_000 : 100)).map { _ in Self.id(random.below(40_000)) }
            ids.insert(contentsOf: batch)
            model.formUnion(batch)
            for _ in 0..<2_000 {
                let id = Self.id(random.below(40_000))
                if random.below(2) == 0 {
                    #expect(ids.insert(id) == model.insert(id).inserted)
                } else {
                    #expect(ids.remove(id) == (model.remove(id) != nil))
                }
            }
            expectMatches(ids, model, &random, "bulk round \(round)")
        }
    }

    /// Ids sharing their first 8, 16 or 24 bytes (orderPrefix ties) and ids that differ only after
    /// a NUL or in length sort in byte order, in bulk and one by one.
    @Test func prefixTiesSortInByteOrder() {
        let ids: [ExactID] = [
            "abcdefghijklmnop2", "abcdefghijklmnop10", "abcdefghijklmnop", "ab\u{0}", "ab", "ab\u{0}\u{0}", "a", "", "abcdefghijklmnop2",
            "\u{212A}", "K", "abcdefghijklmnopqrstuvwx9", "abcdefghijklmnopqrstuvwx10", "abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvw\u{0}",
            "abcdefgh2", "abcdefgh10", "abcdefghijklmnopqrstuvwx10",
        ]
        let sorted = SortedIDs.sortedUnique(ids)
        #expect(sorted.map(\.id) == Set(ids).sorted())
        #expect(sorted.count == 16)
        var oneByOne = SortedIDs()
        for id in ids.reversed() { oneByOne.insert(id) }
        #expect(oneByOne.ids(after: nil, limit: 100) == Set(ids).sorted() && oneByOne.violation() == nil)
    }

    /// While the order is deferred (journal replay), lists, counts and removals stay right.
    @Test func recordsWithADeferredOrder() {
        var records = Records<Int>()
        for n in 0..<1_000 { records.insert(n, id: "u\(n)") }
        records.deferOrder()
        for n in 1_000..<3_000 { records.insert(n, id: "u\(n)") }
        records.insert(-1, id: "u5")  // an update: not a new id
        #expect(records.count == 3_000)
        #expect(records.page(after: "u1999", limit: 3).records == [2, 20, 200])
        #expect(records.remove("u2500") == 2_500 && records.remove("u2500") == nil && records.count == 2_999)
        for n in 3_000..<3_010 { records.insert(n, id: "u\(n)") }
        records.restoreOrder()
        records.insert(9, id: "u")
        let all = records.page(after: nil, limit: nil).records
        #expect(all.count == 3_010 && all.first == 9)
        let expected = (0..<3_010).filter { $0 != 2_500 }.map { "u\($0)" }.sorted(by: { ExactID($0) < ExactID($1) })
        #expect(records.page(after: "u", limit: nil).records == expected.map { $0 == "u5" ? -1 : Int($0.dropFirst())! })
    }

    @Test func exactIDsCompareBytesNotCanonicalEquivalence() {
        let composed = ExactID("caf\u{E9}")
        let decomposed = ExactID("cafe\u{301}")
        #expect(composed.string == decomposed.string, "Swift String == says they are equal")
        #expect(composed != decomposed && Set([composed, decomposed]).count == 2)
        #expect(decomposed < composed, "byte order: 0x65 (e) sorts before 0xC3 (é)")
        #expect(ExactID("\u{212A}") != ExactID("K") && ExactID("K") < ExactID("\u{212A}"))
        #expect(ExactID("ab") < ExactID("abc") && ExactID("abcdefgh1") < ExactID("abcdefgh2") && ExactID("") < ExactID("a"))
        // Lengths 9 to 15: the last eight common bytes are compared as one word.
        #expect(ExactID("abcdefghiXk") < ExactID("abcdefghiYa") && ExactID("abcdefghijklmnZ") > ExactID("abcdefghijklmnA"))
        #expect(ExactID("abcdefghijkl") < ExactID("abcdefghijklm") && ExactID("0123456789") == ExactID("0123456789"))
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
