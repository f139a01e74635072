import RPCSchema

/// All entity state: the users and the buildings, and the rules that span them.
///
/// A plain value with no locks and no I/O: the dispatcher owns the one instance and serialises
/// access; tests and journal replay drive it directly.
public struct Entities: Sendable {
    public var users = Records<User>()
    public var buildings = Records<Building>()
    /// Outcomes of keyed mutations, for retries (exactly once).
    public var keys = IdempotencyKeys()

    public init() {}

    /// Defers keeping the records' id order until `restoreOrder` (see `Records.deferOrder`).
    public mutating func deferOrder() {
        users.deferOrder()
        buildings.deferOrder()
    }

    public mutating func restoreOrder() {
        users.restoreOrder()
        buildings.restoreOrder()
    }

    /// Every method the daemon serves, by entity.
    public static let table: MethodTable<Entities> = {
        var table = MethodTable<Entities>()
        UserMethods.register(in: &table)
        BuildingMethods.register(in: &table)
        SystemMethods.register(in: &table)
        return table
    }()
}

/// Records of one kind by id, listable in id order. Ids are `ExactID`s: two ids are the same
/// record only when their UTF-8 bytes are, and lists are in byte order.
///
/// Kept in 64 shards rather than one dictionary, so that the expensive moments of a large table
/// come in small pieces: after compaction takes a copy-on-write copy of the state, the next
/// mutation copies one shard (1/64 of the records), not all of them, under the state lock; and a
/// growing table rehashes one shard at a time. The id order is kept as it changes (`SortedIDs`,
/// copy-on-write per node for the same reason), so a list never sorts.
public struct Records<Record: Sendable>: Sendable {
    private static var shardCount: Int { 64 }
    private var shards = [[ExactID: Record]](repeating: [:], count: Records.shardCount)
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

    public subscript(id: String) -> Record? {
        let key = ExactID(id)
        return shards[Self.shard(key)][key]
    }

    public func contains(_ id: String) -> Bool { self[id] != nil }

    public mutating func insert(_ record: Record, id: String) {
        let key = ExactID(id)
        if shards[Self.shard(key)].updateValue(record, forKey: key) == nil { addToOrder(key) }
    }

    /// Inserts `record` unless `id` is taken (then nothing changes): false if it was. One hash
    /// lookup where `contains` then `insert` take two (a create on a hot path, and in replay).
    public mutating func insertNew(_ record: Record, id: String) -> Bool {
        let key = ExactID(id)
        let shard = Self.shard(key)
        if let existing = shards[shard].updateValue(record, forKey: key) {
            shards[shard].updateValue(existing, forKey: key)
            return false
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
        let removed = shards[Self.shard(key)].removeValue(forKey: key)
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
        for shard in shards.indices {
            shards[shard].reserveCapacity(shards[shard].count + count / Self.shardCount)
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

    /// Mutates every record in place.
    public mutating func updateAll(_ body: (inout Record) -> Void) {
        for shard in shards.indices {
            for index in shards[shard].values.indices { body(&shards[shard].values[index]) }
        }
    }

    /// Every record, in no particular order.
    public var values: some Sequence<Record> { shards.lazy.flatMap { $0.values } }

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
        let records = ids.compactMap { shards[Self.shard($0)][$0] }
        return (records, more ? ids.last?.string : nil)
    }
}
