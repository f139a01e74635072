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
public struct Records<Record: Sendable>: Sendable {
    private var byID: [String: Record] = [:]
    /// Ids in ascending order; rebuilt lazily after inserts and deletes.
    private var sortedIDs: [String] = []
    private var sortedIsStale = false

    public init() {}

    public var count: Int { byID.count }
    public subscript(id: String) -> Record? { byID[id] }
    public func contains(_ id: String) -> Bool { byID[id] != nil }

    public mutating func insert(_ record: Record, id: String) {
        if byID.updateValue(record, forKey: id) == nil { sortedIsStale = true }
    }

    public mutating func update(_ id: String, _ body: (inout Record) -> Void) {
        guard var record = byID[id] else { return }
        body(&record)
        byID[id] = record
    }

    @discardableResult
    public mutating func remove(_ id: String) -> Record? {
        let removed = byID.removeValue(forKey: id)
        if removed != nil { sortedIsStale = true }
        return removed
    }

    /// Mutates every record in place.
    public mutating func updateAll(_ body: (inout Record) -> Void) {
        for index in byID.values.indices { body(&byID.values[index]) }
    }

    public var values: Dictionary<String, Record>.Values { byID.values }

    /// At most `limit` records with ids after `after`, in id order, and the last id returned when more remain.
    public mutating func page(after: String?, limit: Int?) -> (records: [Record], next: String?) {
        if sortedIsStale {
            sortedIDs = byID.keys.sorted()
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
        let records = sortedIDs[start..<end].compactMap { byID[$0] }
        let next = end < sortedIDs.count && end > start ? sortedIDs[end - 1] : nil
        return (records, next)
    }
}
