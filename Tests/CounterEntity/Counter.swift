import RPCEntities
import RPCSchema

// The `counter` entity, whole: README's "Adding an entity" shows this file, and the test target's
// daemon (Tests/counterd) registers it with one line. Nothing else in the package names it.

/// `counter.increment {"name": "visits", "by": 2}`: adds `by` (1 or more) and answers the new value.
public struct IncrementCounter: RPCCall, Hashable {
    public typealias Reply = CounterValue
    public static let method = RPCMethod("counter", "increment")
    public static var isMutation: Bool { true }
    public var name: String
    public var by: Int
    public init(name: String, by: Int) {
        self.name = name
        self.by = by
    }
}

/// `counter.get {"name": "visits"}`: the counter's value.
public struct GetCounter: RPCCall, Hashable {
    public typealias Reply = CounterValue
    public static let method = RPCMethod("counter", "get")
    public var name: String
    public init(name: String) { self.name = name }
}

public struct CounterValue: Codable, Hashable, Sendable {
    public var name: String
    public var value: Int
}

public enum CounterEntity: EntityDeclaration {
    public static let name = "counter"
    /// Counters by name (`ExactID`: names compare byte for byte).
    public static var emptyStore: [ExactID: Int] { [:] }

    public static func register(in table: inout MethodTable<Entities>) {
        table.on(IncrementCounter.self) { state, p throws(RPCError) in
            guard !p.name.isEmpty else { throw .invalidParams("name must not be empty") }
            guard p.by >= 1 else { throw .invalidParams("by is \(p.by); give a whole number from 1 up") }
            let (value, overflow) = state[CounterEntity.self][ExactID(p.name), default: 0].addingReportingOverflow(p.by)
            guard !overflow else { throw .invalidParams("counter \"\(p.name)\" would pass \(Int.max); give a smaller by") }
            state[CounterEntity.self][ExactID(p.name)] = value
            return CounterValue(name: p.name, value: value)
        }
        table.on(GetCounter.self) { state, p throws(RPCError) in
            guard let value = state[CounterEntity.self][ExactID(p.name)] else {
                throw .notFound("no counter \"\(p.name)\"; counter.increment creates it")
            }
            return CounterValue(name: p.name, value: value)
        }
    }

    public static func count(of store: [ExactID: Int]) -> Int { store.count }

    public static func snapshot(_ store: [ExactID: Int], _ write: (any RPCCall) throws -> Void) rethrows {
        for (name, value) in store.sorted(by: { $0.key < $1.key }) { try write(IncrementCounter(name: name.string, by: value)) }
    }
}
