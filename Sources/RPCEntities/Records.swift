import RPCSchema

/// Records of one kind by id, listable in id order. Ids are `ExactID`s: two ids are the same
/// record only when their UTF-8 bytes are, and lists are in byte order.
///
/// Kept in 64 shards (by the id's hash), each in a box of its own, so that a copy of the state (the
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
    /// One shard's records. A box rather than bare arrays so a change can tell (by the box's
    /// reference count) whether a copy of the state still reads it.
    ///
    /// The records sit in an array in the order they came (a removal moves the last one into the
    /// gap), their ids in another, and a `SlotIndex` finds an id's position. A create appends to
    /// the arrays and writes one slot, a cache line the lock's holder asked for ahead
    /// (`prefetch`), where a `Dictionary` wrote its keys', values' and bitmap's lines, three cache
    /// misses at a million records, each holding the state lock; and a snapshot reads the records
    /// in the order they (and their strings) were allocated, not in hash order.
    private final class Shard: @unchecked Sendable {
        // @unchecked: these change only while the box is uniquely referenced (the owner's
        // `ownsShard`), the discipline Array's storage follows; shared boxes are only read.
        // Unchecked exclusivity: no access to them overlaps another (none is held across a call
        // that could reach the box again), and the run-time check cost every read of a record
        // ~180 instructions (callgrind, a get).
        @exclusivity(unchecked) var records: ContiguousArray<Record> = []
        @exclusivity(unchecked) var keys: ContiguousArray<ExactID> = []
        @exclusivity(unchecked) var index = SlotIndex()

        init() {}

        /// A box of its own with `shard`'s records.
        init(copying shard: Shard) {
            records = shard.records
            keys = shard.keys
            index = shard.index
        }

        @inline(__always)
        func position(of key: ExactID) -> Int? {
            index.find(hash: key.fingerprint) { keys[$0] == key }
        }

        @inline(__always)
        func record(_ key: ExactID) -> Record? { position(of: key).map { records[$0] } }

        /// Adds `record` as `key`'s, which the shard does not hold.
        @inline(__always)
        func append(_ record: Record, for key: ExactID) {
            index.insert(hash: key.fingerprint, number: records.count) { self.keys[$0].fingerprint }
            records.append(record)
            keys.append(key)
        }

        /// Sets `key`'s record: whether the key is new.
        func set(_ record: Record, for key: ExactID) -> Bool {
            if let position = position(of: key) {
                records[position] = record
                return false
            }
            append(record, for: key)
            return true
        }

        func remove(_ key: ExactID) -> Record? {
            guard let position = position(of: key) else { return nil }
            index.remove(hash: key.fingerprint, number: position)
            let last = records.count - 1
            if position != last {
                records.swapAt(position, last)
                keys.swapAt(position, last)
                index.renumber(hash: keys[position].fingerprint, from: last, to: position)
            }
            keys.removeLast()
            return records.removeLast()
        }

        func reserveCapacity(adding count: Int) {
            records.reserveCapacity(records.count + count)
            keys.reserveCapacity(keys.count + count)
            index.reserveCapacity(records.count + count) { self.keys[$0].fingerprint }
        }
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

    /// Changes waiting in overlays: zero once no copy reads a shard and each was changed since
    /// (`system.stats` reports it; a copy that never lets go shows as a count that only grows).
    public var overlaid: Int { overlays.reduce(0) { $0 + $1.count } }

    @inline(__always)
    private func lookup(_ key: ExactID, in shard: Int) -> Record? {
        if !overlays[shard].isEmpty, let changed = overlays[shard][key] { return changed }
        // The box borrowed, not retained: `shards` holds it, and nothing changes it during a lookup.
        return Unmanaged.passUnretained(shards[shard])._withUnsafeGuaranteedRef { $0.record(key) }
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
            if let record { _ = shard.set(record, for: key) } else { _ = shard.remove(key) }
        }
    }

    /// Asks the CPU for the slot where an id with this hash (`ExactID.fingerprint`) is looked up
    /// (see `SlotIndex.prefetch`).
    @inline(__always)
    func prefetch(hash: Int) {
        Unmanaged.passUnretained(shards[hash & (Self.shardCount - 1)])._withUnsafeGuaranteedRef { $0.index.prefetch(hash: hash) }
    }

    public subscript(id: String) -> Record? { self[ExactID(id)] }

    /// The record of an id hashed already (a call's `Touch`).
    public subscript(key: ExactID) -> Record? { lookup(key, in: Self.shard(key)) }

    public func contains(_ id: String) -> Bool { self[id] != nil }

    public mutating func insert(_ record: Record, id: String) { insert(record, key: ExactID(id)) }

    public mutating func insert(_ record: Record, key: ExactID) {
        let s = Self.shard(key)
        let added: Bool
        if ownsShard(s) {
            added = shards[s].set(record, for: key)
        } else {
            added = lookup(key, in: s) == nil
            overlays[s][key] = .some(record)
        }
        if added { addToOrder(key) }
    }

    /// Inserts `record` unless `id` is taken (then nothing changes): false if it was. One hash
    /// lookup where `contains` then `insert` take two (a create on a hot path, and in replay).
    public mutating func insertNew(_ record: Record, id: String) -> Bool { insertNew(record, key: ExactID(id)) }

    public mutating func insertNew(_ record: Record, key: ExactID) -> Bool {
        let s = Self.shard(key)
        if ownsShard(s) {
            let shard = shards[s]
            guard shard.position(of: key) == nil else { return false }
            shard.append(record, for: key)
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
    public mutating func remove(_ id: String) -> Record? { remove(key: ExactID(id)) }

    @discardableResult
    public mutating func remove(key: ExactID) -> Record? {
        let s = Self.shard(key)
        let removed: Record?
        if ownsShard(s) {
            removed = shards[s].remove(key)
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
            shards[s].reserveCapacity(adding: count / Self.shardCount)
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
                shards[s] = Shard(copying: shards[s])  // a box of this value's own, then its overlay in it
                fold(s)
            }
            let shard = shards[s]
            for index in shard.records.indices { body(&shard.records[index]) }
        }
    }

    /// Calls `body` with the records of shard `s`, in no particular order.
    private func forEach(inShard s: Int, _ body: (Record) throws -> Void) rethrows {
        let overlay = overlays[s]
        let shard = shards[s]
        guard !overlay.isEmpty else {
            // The records alone: a key copied out is one more retain and release of a string
            // per record (a snapshot reads a million).
            guard let prefetch = Self.storagePrefetch else {
                for record in shard.records { try body(record) }
                return
            }
            try shard.records.withUnsafeBufferPointer { records in
                guard let first = records.baseAddress else { return }
                for index in records.indices {
                    if index &+ Self.prefetchDistance < records.count { prefetch(first + index + Self.prefetchDistance) }
                    try body(records[index])
                }
            }
            return
        }
        for index in shard.records.indices where overlay[shard.keys[index]] == nil { try body(shard.records[index]) }
        for case let record? in overlay.values { try body(record) }
    }

    /// How many records ahead `forEach` asks for a record's strings (`PrefetchedRecord`).
    private static var prefetchDistance: Int { 8 }

    /// The record type's `PrefetchedRecord.prefetchStorage`, if it has one.
    private static var storagePrefetch: ((UnsafePointer<Record>) -> Void)? {
        (Record.self as? any PrefetchedRecord.Type).map { type in { type.prefetchStorage(of: UnsafeRawPointer($0)) } }
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
