import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// The `system` entity (`ping`, `describe`, `stats`), served by the daemon itself because it reports
/// on the daemon. `describe` is generated from the dispatcher's method table and the system call
/// types, never from a hand-kept list.
struct SystemMethods: Sendable {
    static let entity = "system"
    /// The system calls, described like any other method.
    static let calls: [any RPCCall.Type] = [SystemPing.self, SystemDescribe.self, SystemStats.self]

    /// The reply of `system.describe`, built once (the table does not change while serving).
    let description: JSONValue

    init(table: MethodTable<Entities>) {
        var entities: [EntityDescription] = []
        func add(_ method: RPCMethod, fields: [RPCField], mutation: Bool) {
            let described = MethodDescription(
                name: method.name, result: method.result.description, mutation: mutation, params: fields)
            if let index = entities.firstIndex(where: { $0.name == method.entity }) {
                entities[index].methods.append(described)
            } else {
                entities.append(EntityDescription(name: method.entity, methods: [described]))
            }
        }
        for entry in table.entries { add(entry.method, fields: entry.fields, mutation: entry.isMutation) }
        for call in Self.calls { add(call.method, fields: call.fields, mutation: call.isMutation) }
        let reply = ServiceDescription(version: CommandLineParser.version, entities: entities)
        description = (try? JSONValueEncoder().encode(reply)) ?? .null
    }

    /// Whether `method` is one of the system calls.
    static func serves(_ method: RPCMethod) -> Bool {
        calls.contains { $0.method == method }
    }

    /// Rejects any param field: the system calls take none.
    static func checkParam(_ request: Request) -> RPCError? {
        switch request.param {
        case nil: return nil
        case .object(let object)? where object.isEmpty: return nil
        default: return .invalidParams("\(request.method) takes no param fields; send {} or leave param out")
        }
    }


    static func encode<R: Encodable>(_ reply: R) -> JSONValue {
        (try? JSONValueEncoder().encode(reply)) ?? .null
    }

    /// `system.stats` from the loops' snapshot and the server's connection figures.
    static func stats(
        _ snapshot: LoopState.Snapshot, connections: ConnectionStats, uptime: Double, journal: JournalStats
    ) -> StatsResult {
        let methods = snapshot.methods
            .map { key, count in
                MethodStats(method: key.name.isEmpty ? key.entity : key.description, requests: count.requests, errors: count.errors)
            }
            .sorted { $0.method < $1.method }
        var connections = connections
        connections.idleClosed = snapshot.idleClosed
        return StatsResult(
            uptimeSeconds: uptime, connections: connections,
            requests: methods.reduce(0) { $0 + $1.requests }, errors: methods.reduce(0) { $0 + $1.errors },
            methods: methods, bytesIn: Int(clamping: snapshot.bytesIn), bytesOut: Int(clamping: snapshot.bytesOut),
            journal: journal)
    }
}
