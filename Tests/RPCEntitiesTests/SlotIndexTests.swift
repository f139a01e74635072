import Testing
@testable import RPCEntities

/// `SlotIndex` against a model dictionary, with hashes chosen to collide: every number must be found
/// under its hash and only there, through removals (tombstones), renumbering and growth.
@Suite struct SlotIndexTests {
    typealias Random = SortedIDsTests.Random

    /// An owner as `Records` is one: numbers are positions in `hashes` (and in `names`), a removal
    /// moves the last one into the gap.
    struct Owner {
        var index = SlotIndex()
        var names: [Int] = []
        var hashes: [Int] = []

        func find(_ name: Int, hash: Int) -> Int? { index.find(hash: hash) { names[$0] == name } }

        mutating func add(_ name: Int, hash: Int) {
            let hashes = self.hashes
            index.insert(hash: hash, number: names.count) { hashes[$0] }
            names.append(name)
            self.hashes.append(hash)
        }

        mutating func remove(_ name: Int, hash: Int) -> Bool {
            guard let number = find(name, hash: hash) else { return false }
            index.remove(hash: hash, number: number)
            let last = names.count - 1
            if number != last {
                names.swapAt(number, last)
                hashes.swapAt(number, last)
                index.renumber(hash: hashes[number], from: last, to: number)
            }
            names.removeLast()
            hashes.removeLast()
            return true
        }
    }

    /// Hashes from a few values (collisions: the same tag, so `holds` decides) or all 64 bits.
    static func hash(_ name: Int, colliding: Bool) -> Int {
        var random = Random(state: UInt64(name))
        return colliding ? Int(truncatingIfNeeded: random.next() % 7) << 6 : Int(truncatingIfNeeded: random.next())
    }

    @Test(arguments: [false, true])
    func findsWhatItHoldsThroughRemovalsAndGrowth(colliding: Bool) {
        var random = Random(state: colliding ? 7 : 8)
        var owner = Owner()
        var model = Set<Int>()
        let space = colliding ? 300 : 5_000
        for step in 0..<(colliding ? 6_000 : 40_000) {
            let name = random.below(space)
            let hash = Self.hash(name, colliding: colliding)
            if random.below(3) == 0 {
                #expect(owner.remove(name, hash: hash) == model.contains(name), "step \(step): remove \(name)")
                model.remove(name)
            } else if !model.contains(name) {
                #expect(owner.find(name, hash: hash) == nil, "step \(step): \(name) is not held yet")
                owner.add(name, hash: hash)
                model.insert(name)
            }
        }
        #expect(owner.index.live == model.count)
        for name in 0..<space {
            let number = owner.find(name, hash: Self.hash(name, colliding: colliding))
            #expect(number.map { owner.names[$0] == name } ?? !model.contains(name), "\(name)")
            #expect((number != nil) == model.contains(name), "\(name) held: \(model.contains(name))")
        }
        // Tombstones are dropped when it grows: at most half full, whatever the churn.
        #expect(owner.index.slots.count <= max(16, model.count * 8), "\(owner.index.slots.count) slots for \(model.count) keys")
    }

    /// A growth doubles the table: at most four slots a key, not eight (room for four times the
    /// keys at each growth quadrupled it).
    @Test func growthDoublesTheTable() {
        var owner = Owner()
        for name in 0..<5_000 { owner.add(name, hash: Self.hash(name, colliding: false)) }
        #expect(owner.index.slots.count <= 4 * 5_000, "\(owner.index.slots.count) slots for 5,000 keys")
        for name in 0..<5_000 { #expect(owner.find(name, hash: Self.hash(name, colliding: false)) == name) }
    }

    @Test func reservedRoomKeepsEveryKey() {
        var owner = Owner()
        for name in 0..<1_000 { owner.add(name, hash: Self.hash(name, colliding: false)) }
        let hashes = owner.hashes
        owner.index.reserveCapacity(50_000) { hashes[$0] }
        #expect(owner.index.slots.count >= 100_000)
        for name in 0..<1_000 { #expect(owner.find(name, hash: Self.hash(name, colliding: false)) == name) }
        #expect(owner.find(1_000, hash: Self.hash(1_000, colliding: false)) == nil)
    }
}
