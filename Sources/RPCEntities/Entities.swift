import RPCSchema

/// All entity state: the users and the buildings, and the rules that span them.
///
/// A plain value with no locks and no I/O: the dispatcher owns the one instance and serialises
/// access; tests and journal replay drive it directly.
public struct Entities: Sendable {
    public var users = Records<User>()
    public var buildings = Records<Building>()

    public init() {}

    /// Every method the daemon serves, by entity.
    public static let table: MethodTable<Entities> = {
        var table = MethodTable<Entities>()
        UserMethods.register(in: &table)
        BuildingMethods.register(in: &table)
        return table
    }()
}

/// Records of one kind by id, listable in id order.
///
/// Kept in 64 shards rather than one dictionary, so that the expensive moments of a large table
/// come in small pieces: after compaction takes a copy-on-write copy of the state, the next
/// mutation copies one shard (1/64 of the records), not all of them, under the state lock; and a
/// growing table rehashes one shard at a time.
public struct Records<Record: Sendable>: Sendable {
    private static var shardCount: Int { 64 }
    private var shards = [[String: Record]](repeating: [:], count: Records.shardCount)
    public private(set) var count = 0
    /// Ids in ascending order; rebuilt lazily after inserts and deletes.
    private var sortedIDs: [String] = []
    private var sortedIsStale = false

    public init() {}

    @inline(__always)
    private static func shard(_ id: String) -> Int { id.hashValue & (shardCount - 1) }

    public subscript(id: String) -> Record? { shards[Self.shard(id)][id] }
    public func contains(_ id: String) -> Bool { self[id] != nil }

    public mutating func insert(_ record: Record, id: String) {
        if shards[Self.shard(id)].updateValue(record, forKey: id) == nil {
            count += 1
            sortedIsStale = true
        }
    }

    @discardableResult
    public mutating func remove(_ id: String) -> Record? {
        let removed = shards[Self.shard(id)].removeValue(forKey: id)
        if removed != nil {
            count -= 1
            sortedIsStale = true
        }
        return removed
    }

    /// Mutates every record in place.
    public mutating func updateAll(_ body: (inout Record) -> Void) {
        for shard in shards.indices {
            for index in shards[shard].values.indices { body(&shards[shard].values[index]) }
        }
    }

    /// Every record, in no particular order.
    public var values: some Sequence<Record> { shards.lazy.flatMap { $0.values } }

    /// At most `limit` records with ids after `after`, in id order, and the last id returned when more remain.
    public mutating func page(after: String?, limit: Int?) -> (records: [Record], next: String?) {
        if sortedIsStale {
            sortedIDs = shards.flatMap { $0.keys }.sorted()
            sortedIsStale = false
        }
        var start = 0
        if let after {
            // First id strictly greater than `after`.
            var low = 0
            var high = sortedIDs.count
            while low < high {
                let mid = (low + high) / 2
                if sortedIDs[mid] <= after { low = mid + 1 } else { high = mid }
            }
            start = low
        }
        let end = limit.map { min(sortedIDs.count, start + $0) } ?? sortedIDs.count
        let records = sortedIDs[start..<end].compactMap { self[$0] }
        let next = end < sortedIDs.count && end > start ? sortedIDs[end - 1] : nil
        return (records, next)
    }
}
