import CRPCLinux

/// An open-addressing index from a key's hash to a number the owner gives it (where the owner
/// keeps the key: an array position, an entry number), for one shard of a table whose 64 shards
/// are chosen by the hash's low 6 bits (`Records`, `IdempotencyKeys`).
///
/// Each slot is 8 bytes: `number + 1 | tag << 40`, 0 when empty. The tag is 24 bits of the hash,
/// the low bits of the key's home slot, so
/// - a lookup that meets other keys on its way reads only slots (one cache line, which the lock's
///   holder can ask for ahead, `prefetch`), and asks the owner to compare keys only where a tag
///   matches (one in 16 million for another key);
/// - growing moves slots without reading any key, up to 2^24 slots a shard.
/// At most half full (removals leave tombstones until the next rebuild), about a quarter after a growth.
struct SlotIndex: Sendable {
    private(set) var slots: [UInt64] = []
    /// Live slots, and live plus tombstones.
    private(set) var live = 0
    private var used = 0

    init() {}

    private static var tagShift: UInt64 { 40 }
    private static var numberMask: UInt64 { (1 << tagShift) - 1 }
    private static var tagMask: UInt64 { (1 << (64 - tagShift)) - 1 }
    private static var tombstone: UInt64 { numberMask }
    /// Numbers stay below this (the owner's array positions, far below it).
    static var numberLimit: UInt64 { numberMask - 1 }

    /// The hash's bits past the shard's.
    @inline(__always) private static func home(_ hash: Int) -> Int { Int(truncatingIfNeeded: UInt(bitPattern: hash) >> 6) }
    @inline(__always) private static func tag(_ hash: Int) -> UInt64 { UInt64(UInt(bitPattern: hash) >> 6) & tagMask }
    @inline(__always) private static func slot(number: Int, hash: Int) -> UInt64 { UInt64(number &+ 1) | tag(hash) << tagShift }
    @inline(__always) private static func number(in slot: UInt64) -> Int { Int(truncatingIfNeeded: (slot & numberMask) &- 1) }
    /// Neither empty nor a tombstone.
    @inline(__always) private static func isLive(_ slot: UInt64) -> Bool { slot != 0 && slot & numberMask != tombstone }

    /// Asks the CPU for the slot where a lookup of `hash` starts: a batch asks for all of its keys'
    /// before it looks any up, so their cache misses overlap instead of queuing.
    @inline(__always)
    func prefetch(hash: Int) {
        slots.withUnsafeBufferPointer { slots in
            guard let base = slots.baseAddress else { return }
            crpc_prefetch(base + (Self.home(hash) & (slots.count - 1)))
        }
    }

    /// The number of the key with `hash` that `holds` (given a number whose tag matches) says is
    /// the one looked for.
    @inline(__always)
    func find(hash: Int, _ holds: (Int) -> Bool) -> Int? {
        guard live > 0 else { return nil }
        return slots.withUnsafeBufferPointer { slots in
            let mask = slots.count - 1
            let tag = Self.tag(hash)
            var i = Self.home(hash) & mask
            while true {
                let slot = slots[i]
                if slot == 0 { return nil }
                if slot >> Self.tagShift == tag && Self.isLive(slot) && holds(Self.number(in: slot)) { return Self.number(in: slot) }
                i = (i &+ 1) & mask
            }
        }
    }

    /// Whether one more `insert` grows the table first (a caller whose `hashOf` costs a retain to
    /// build checks this, and builds it only then: `makeRoom`).
    var isFull: Bool { (used + 1) * 2 > slots.count }

    /// Grows the table for one more key (what `insert` does when `isFull`).
    mutating func makeRoom(hashOf: (Int) -> Int) { rebuild(forLive: live + 1, hashOf: hashOf) }

    /// Adds `number` for a key with `hash` (not in the index). `hashOf` gives a held number's hash
    /// when a growing index outgrows the tags (over 2^24 slots).
    mutating func insert(hash: Int, number: Int, hashOf: (Int) -> Int) {
        if isFull { makeRoom(hashOf: hashOf) }
        insert(hash: hash, number: number)
    }

    /// `insert` into a table with room for it (`isFull` false, or `makeRoom` done).
    mutating func insert(hash: Int, number: Int) {
        precondition(number >= 0 && UInt64(number) < Self.numberLimit, "a slot index number out of range: \(number)")
        precondition(!isFull, "a slot index grows before an insert that needs room")
        let value = Self.slot(number: number, hash: hash)
        let mask = slots.count - 1
        var i = Self.home(hash) & mask
        let fresh = slots.withUnsafeMutableBufferPointer { slots in
            while Self.isLive(slots[i]) { i = (i &+ 1) & mask }
            defer { slots[i] = value }
            return slots[i] == 0
        }
        if fresh { used += 1 }
        live += 1
    }

    /// Removes `number`, held for a key with `hash`.
    mutating func remove(hash: Int, number: Int) {
        let i = position(of: Self.slot(number: number, hash: hash), hash: hash)
        slots[i] = Self.tombstone
        live -= 1
    }

    /// The key with `hash` held as `number` is held as `newNumber` from now on (the owner moved it).
    mutating func renumber(hash: Int, from number: Int, to newNumber: Int) {
        let i = position(of: Self.slot(number: number, hash: hash), hash: hash)
        slots[i] = Self.slot(number: newNumber, hash: hash)
    }

    private func position(of value: UInt64, hash: Int) -> Int {
        let mask = slots.count - 1
        var i = Self.home(hash) & mask
        while slots[i] != value {
            precondition(slots[i] != 0, "a key is missing from its slot index")
            i = (i &+ 1) & mask
        }
        return i
    }

    /// Room for `count` live keys without growing.
    mutating func reserveCapacity(_ count: Int, hashOf: (Int) -> Int) {
        if count * 2 > slots.count { rebuild(forLive: max(count, live), hashOf: hashOf) }
    }

    /// Rehashes into the smallest table at most 40% full for `live` keys (tombstones dropped): a
    /// growth doubles it, to a quarter full, and churn at a steady count rebuilds only after a
    /// tenth of the table turned into tombstones. (Room for four times `live` quadrupled it at
    /// each growth: up to 64 bytes of slots a record.)
    private mutating func rebuild(forLive live: Int, hashOf: (Int) -> Int) {
        var capacity = 16
        while capacity < live * 5 / 2 { capacity *= 2 }
        var rebuilt = [UInt64](repeating: 0, count: capacity)
        let mask = capacity - 1
        let tagHoldsHome = UInt64(capacity) <= Self.tagMask + 1
        rebuilt.withUnsafeMutableBufferPointer { rebuilt in
            for slot in slots where Self.isLive(slot) {
                var i = (tagHoldsHome ? Int(slot >> Self.tagShift) : Self.home(hashOf(Self.number(in: slot)))) & mask
                while rebuilt[i] != 0 { i = (i &+ 1) & mask }
                rebuilt[i] = slot
            }
        }
        slots = rebuilt
        used = self.live
    }
}
