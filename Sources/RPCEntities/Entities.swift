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
    /// The stores of registered entities (`EntityDeclaration`), by declaration.
    private var stores: [ObjectIdentifier: any Sendable] = [:]

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

    /// A registered entity's store, in place.
    public subscript<E: EntityDeclaration>(entity: E.Type) -> E.Store {
        get { stores[ObjectIdentifier(E.self)].flatMap { $0 as? E.Store } ?? E.emptyStore }
        _modify {
            // Taken out while it changes, so the dictionary holds no second reference to copy for.
            let key = ObjectIdentifier(E.self)
            var store = stores.removeValue(forKey: key).flatMap { $0 as? E.Store } ?? E.emptyStore
            defer { stores[key] = store }
            yield &store
        }
    }

    private static let registry = EntityRegistry()

    /// Adds an entity to every daemon of this process: call it before the daemon starts (before
    /// the first use of `table`), once per entity.
    public static func register(_ entity: any EntityDeclaration.Type) { registry.add(entity) }

    /// The entities registered with `register(_:)`, in order.
    public static var registered: [any EntityDeclaration.Type] { registry.entities }

    /// Records of every entity, registered ones included.
    public var recordCount: Int {
        Self.registered.reduce(users.count + buildings.count) { $0 + $1.recordCount(in: self) }
    }

    /// Records of each registered entity, by name; nil when none is registered.
    public var registeredCounts: [String: Int]? {
        let entities = Self.registered
        guard !entities.isEmpty else { return nil }
        return Dictionary(entities.map { ($0.name, $0.recordCount(in: self)) }, uniquingKeysWith: +)
    }

    /// Every method the daemon serves, by entity.
    public static let table: MethodTable<Entities> = {
        var table = MethodTable<Entities>()
        UserMethods.register(in: &table)
        BuildingMethods.register(in: &table)
        SystemMethods.register(in: &table)
        for entity in registry.freeze() {
            precondition(!table.hasEntity(entity.name), "entity \(entity.name) is declared twice")
            entity.register(in: &table)
        }
        return table
    }()
}

extension MethodTable<Entities>.Touch {
    static func user(_ id: String) -> Self { Self(table: Entities.usersTable, id: id) }
    static func building(_ id: String) -> Self { Self(table: Entities.buildingsTable, id: id) }
}
