import RPCSchema

/// Records of one kind by id, listable in id order. Ids are `ExactID`s: two ids are the same
/// record only when their UTF-8 bytes are, and lists are in byte order.
///
/// Kept in 64 shards, each a dictionary in a box of its own, so that a copy of the state (the
/// snapshot compaction writes while the daemon serves) costs nothing to take and nothing to
/// keep: while the copy still reads a shard, changes to that shard go to a small overlay beside
/// it (the changed records, and removals), which reads consult first; once the copy has written
/// the shard out and let go of it, the next change folds the overlay into the shard in place.
/// Copy-on-write of plain dictionaries made the first turn after a compaction began copy every
/// shard (every record, a retain per string) on an event loop: tens of milliseconds at a million
/// records, the slowest requests of a durable load.
///
/// The id order is kept as it changes (`SortedIDs`, copy-on-write per node), so a list never sorts.
public struct Records<Record: Sendable>: Sendable {
    /// One shard's records. A box rather than a bare dictionary so a change can tell (by the
    /// box's reference count) whether a copy of the state still reads it.
    private final class Shard: @unchecked Sendable {
        // @unchecked: `records` changes only while the box is uniquely referenced (the owner's
        // `ownsShard`), the discipline Array's storage follows; shared boxes are only read.
        // Unchecked exclusivity: no access to it overlaps another (none is held across a call
        // that could reach the box again), and the run-time check cost every read of a record
        // ~180 instructions (callgrind, a get).
        @exclusivity(unchecked) var records: [ExactID: Record]
        init(_ records: [ExactID: Record] = [:]) { self.records = records }
    }

    private static var shardCount: Int { 64 }
    /// A box each (never one box repeated: a shared box is never changed in place).
    private var shards: [Shard] = (0..<Records.shardCount).map { _ in Shard() }
    /// Per shard, what changed while its box was shared: a record, or nil where one was
    /// removed. Read before the shard; folded into it by the first change once the box is this
    /// value's alone.
    private var overlays = [[ExactID: Record?]](repeating: [:], count: Records.shardCount)
    private var order = SortedIDs()
    /// While the order is deferred (`deferOrder`), new ids wait here, unsorted, instead of `order`.
    private var unordered: [ExactID] = []
    private var defersOrder = false

    public init() {}

    public var count: Int { order.count + unordered.count }

    @inline(__always)
    /// From the id's own seeded hash. Each shard's dictionary hashes with a seed of its own
    /// storage's, so ids that share these bits still spread over its buckets.
    private static func shard(_ id: ExactID) -> Int { id.fingerprint & (shardCount - 1) }

    /// Entries waiting in overlays (tests: zero once no copy reads a shard and each was changed).
    var overlaidEntries: Int { overlays.reduce(0) { $0 + $1.count } }

    @inline(__always)
    private func lookup(_ key: ExactID, in shard: Int) -> Record? {
        if !overlays[shard].isEmpty, let changed = overlays[shard][key] { return changed }
        // The box borrowed, not retained: `shards` holds it, and nothing changes it during a lookup.
        return Unmanaged.passUnretained(shards[shard])._withUnsafeGuaranteedRef { $0.records[key] }
    }

    /// True when shard `s` may change in place (no copy reads it), its overlay folded in first;
    /// false while a copy still reads it, and changes go to the overlay.
    @inline(__always)
    private mutating func ownsShard(_ s: Int) -> Bool {
        guard isKnownUniquelyReferenced(&shards[s]) else { return false }
        if !overlays[s].isEmpty { fold(s) }
        return true
    }

    private mutating func fold(_ s: Int) {
        let changes = overlays[s]
        overlays[s] = [:]
        let shard = shards[s]
        for (key, record) in changes {
            if let record { shard.records[key] = record } else { shard.records.removeValue(forKey: key) }
        }
    }

    public subscript(id: String) -> Record? {
        let key = ExactID(id)
        return lookup(key, in: Self.shard(key))
    }

    public func contains(_ id: String) -> Bool { self[id] != nil }

    public mutating func insert(_ record: Record, id: String) {
        let key = ExactID(id)
        let s = Self.shard(key)
        let added: Bool
        if ownsShard(s) {
            added = shards[s].records.updateValue(record, forKey: key) == nil
        } else {
            added = lookup(key, in: s) == nil
            overlays[s][key] = .some(record)
        }
        if added { addToOrder(key) }
    }

    /// Inserts `record` unless `id` is taken (then nothing changes): false if it was. One hash
    /// lookup where `contains` then `insert` take two (a create on a hot path, and in replay).
    public mutating func insertNew(_ record: Record, id: String) -> Bool {
        let key = ExactID(id)
        let s = Self.shard(key)
        if ownsShard(s) {
            let shard = shards[s]
            if let existing = shard.records.updateValue(record, forKey: key) {
                shard.records.updateValue(existing, forKey: key)
                return false
            }
        } else {
            guard lookup(key, in: s) == nil else { return false }
            overlays[s][key] = .some(record)
        }
        addToOrder(key)
        return true
    }

    private mutating func addToOrder(_ key: ExactID) {
        if defersOrder { unordered.append(key) } else { order.insert(key) }
    }

    @discardableResult
    public mutating func remove(_ id: String) -> Record? {
        let key = ExactID(id)
        let s = Self.shard(key)
        let removed: Record?
        if ownsShard(s) {
            removed = shards[s].records.removeValue(forKey: key)
        } else {
            removed = lookup(key, in: s)
            // `.some(nil)`: a removal. Assigning plain nil would drop the overlay's entry instead.
            if removed != nil { overlays[s][key] = .some(nil) }
        }
        if removed != nil {
            orderWaitingIDs()
            order.remove(key)
        }
        return removed
    }

    /// Room for `count` more records (a replay that knows how many are coming): the shards do
    /// not grow, rehashing every id, on the way. Each shard gets its share.
    public mutating func reserveCapacity(adding count: Int) {
        guard count > 0 else { return }
        for s in shards.indices where ownsShard(s) {
            shards[s].records.reserveCapacity(shards[s].records.count + count / Self.shardCount)
        }
    }

    /// Until `restoreOrder`, new ids are not put in order one by one but all at once, with one sort
    /// (journal replay: a tree insert per record was a third of a restart). Lists stay right
    /// meanwhile, only slower; a removal puts the waiting ids in order first.
    public mutating func deferOrder() { defersOrder = true }

    /// Puts the ids inserted since `deferOrder` in order, and inserts keep the order again.
    public mutating func restoreOrder() {
        orderWaitingIDs()
        defersOrder = false
    }

    private mutating func orderWaitingIDs() {
        guard !unordered.isEmpty else { return }
        order.insert(contentsOf: unordered)
        unordered = []
    }

    /// Mutates every record in place. A shard a copy still reads is copied first (with its
    /// overlay), as a plain dictionary would be: this is rare (a user's removal updates buildings).
    public mutating func updateAll(_ body: (inout Record) -> Void) {
        for s in shards.indices {
            if !ownsShard(s) {
                shards[s] = Shard(shards[s].records)  // a box of this value's own, then its overlay in it
                fold(s)
            }
            let shard = shards[s]
            for index in shard.records.values.indices { body(&shard.records.values[index]) }
        }
    }

    /// Calls `body` with the records of shard `s`, in no particular order.
    private func forEach(inShard s: Int, _ body: (Record) throws -> Void) rethrows {
        let overlay = overlays[s]
        guard !overlay.isEmpty else {
            // The values alone: a key copied out is one more retain and release of a string
            // per record (a snapshot reads a million; ~1% of a durable create load's CPU).
            for record in shards[s].records.values { try body(record) }
            return
        }
        for (key, record) in shards[s].records where overlay[key] == nil { try body(record) }
        for case let record? in overlay.values { try body(record) }
    }

    /// Every record, in no particular order.
    public var values: some Sequence<Record> {
        shards.indices.lazy.flatMap { s in
            var records: [Record] = []
            self.forEach(inShard: s) { records.append($0) }
            return records
        }
    }

    /// Calls `body` with every record, shard by shard, letting go of each shard once it is read,
    /// so that the value this copy was taken from may change that shard in place again (the
    /// snapshot a compaction writes). This value holds no records afterwards.
    mutating func drain(_ body: (Record) throws -> Void) rethrows {
        for s in shards.indices {
            try forEach(inShard: s, body)
            shards[s] = Shard()
            overlays[s] = [:]
        }
        order = SortedIDs()
        unordered = []
    }

    /// At most `limit` records with ids after `after` (byte order), in id order, and the last id
    /// returned when more remain. No limit, or one above the record count, means all of them; a
    /// limit below 1 returns none (the methods reject it before).
    public func page(after: String?, limit: Int?) -> (records: [Record], next: String?) {
        if !unordered.isEmpty {
            var ordered = self
            ordered.orderWaitingIDs()
            return ordered.page(after: after, limit: limit)
        }
        // Clamped to 0...count, so `cap + 1` cannot overflow whatever the peer sent.
        let cap = Swift.max(0, Swift.min(limit ?? count, count))
        var ids = order.ids(after: after.map { ExactID($0) }, limit: cap + 1)
        let more = ids.count > cap
        if more { ids.removeLast() }
        let records = ids.compactMap { lookup($0, in: Self.shard($0)) }
        return (records, more ? ids.last?.string : nil)
    }
}
