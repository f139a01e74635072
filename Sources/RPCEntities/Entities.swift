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
    /// The leaderships this history went through.
    public var terms = TermHistory()

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

    /// Asks the CPU for where a call's record is looked up (`MethodTable.Prepared.lookup`): the
    /// state lock's holder does for every call of its batch before it runs any.
    @inline(__always)
    func prefetch(table: Int, hash: Int) {
        switch table {
        case Self.usersTable: users.prefetch(hash: hash)
        case Self.buildingsTable: buildings.prefetch(hash: hash)
        default: break
        }
    }

    static var usersTable: Int { 0 }
    static var buildingsTable: Int { 1 }

    /// Every method the daemon serves, by entity.
    public static let table: MethodTable<Entities> = {
        var table = MethodTable<Entities>()
        UserMethods.register(in: &table)
        BuildingMethods.register(in: &table)
        SystemMethods.register(in: &table)
        return table
    }()
}

extension MethodTable<Entities>.Touch {
    static func user(_ id: String) -> Self { Self(table: Entities.usersTable, id: id) }
    static func building(_ id: String) -> Self { Self(table: Entities.buildingsTable, id: id) }
}
