import RPCSchema

/// One entity, declared in one place: its methods (with their handlers, roles and descriptions),
/// the state it keeps, and how that state is counted and snapshotted. The method table, journal
/// replay, the change feed, `system.describe`, roles, `system.stats` and snapshots all read it;
/// register it once with `Entities.register(_:)` before the daemon starts.
///
/// `user` and `building` predate it and keep hand-tuned fields in `Entities`; a new entity needs
/// nothing but a type that conforms to this and its `RPCCall` types.
public protocol EntityDeclaration {
    /// The entity's state inside `Entities` (`state[Self.self]` in a handler).
    associatedtype Store: Sendable
    /// The part of its methods' names before the dot (`counter` for `counter.increment`).
    static var name: String { get }
    /// The state of a daemon that has no record yet.
    static var emptyStore: Store { get }
    /// Adds the entity's methods (`table.on(Call.self) { state, param in … }`).
    static func register(in table: inout MethodTable<Entities>)
    /// How many records the store holds (`system.stats`, a snapshot's header).
    static func count(of store: Store) -> Int
    /// The store as the mutations that rebuild it from empty, one call per record: a snapshot
    /// journals them, and replay runs them like any mutation.
    static func snapshot(_ store: Store, _ write: (any RPCCall) throws -> Void) rethrows
}

extension EntityDeclaration {
    static func recordCount(in state: Entities) -> Int { count(of: state[Self.self]) }

    static func snapshotCalls(in state: Entities, _ write: (any RPCCall) throws -> Void) rethrows {
        try snapshot(state[Self.self], write)
    }
}

/// The entities registered beside the built-in ones; frozen when the method table is built.
final class EntityRegistry: @unchecked Sendable {
    // @unchecked: `declared` and `frozen` are only touched with `lock` held.
    private let lock = SpinningLock()
    private var declared: [any EntityDeclaration.Type] = []
    private var frozen = false

    func add(_ entity: any EntityDeclaration.Type) {
        lock.withLock {
            precondition(!frozen, "register entity \(entity.name) before the first use of Entities.table (before the daemon starts)")
            precondition(!declared.contains { $0 == entity }, "entity \(entity.name) registered twice")
            declared.append(entity)
        }
    }

    /// The registered entities, and no more from now on.
    func freeze() -> [any EntityDeclaration.Type] {
        lock.withLock {
            frozen = true
            return declared
        }
    }

    var entities: [any EntityDeclaration.Type] { lock.withLock { declared } }
}
