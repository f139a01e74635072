import Testing
import RPCSchema
@testable import RPCEntities

/// Every method of the table against every role, from an explicit list: a method added to the
/// table without a line here fails the first test, so its access is decided on purpose.
@Suite struct RoleTableTests {
    /// What each method needs. Reads: read; mutations: write; the daemon's figures: admin.
    static let expected: [String: RPCAccess] = [
        "user.createUser": .write, "user.updateUser": .write, "user.deleteUser": .write,
        "user.getUser": .read, "user.listUsers": .read,
        "building.addBuilding": .write, "building.updateBuilding": .write, "building.deleteBuilding": .write,
        "building.getBuilding": .read, "building.listBuildings": .read,
        "system.ping": .open, "system.auth": .open, "system.describe": .read, "system.staleReads": .read, "system.stats": .admin,
        "replication.subscribe": .replicate,
        "replication.position": .replicate,
    ]

    @Test("every method in the table has a decided access, and no listed method is missing")
    func everyMethodDecided() {
        let table = Set(Entities.table.entries.map(\.method.description))
        #expect(table == Set(Self.expected.keys), "table only: \(table.subtracting(Self.expected.keys).sorted()); list only: \(Set(Self.expected.keys).subtracting(table).sorted())")
        for entry in Entities.table.entries {
            #expect(entry.access == Self.expected[entry.method.description], "\(entry.method) declares \(entry.access)")
        }
    }

    @Test("each role is refused exactly what it may not call: unauthorized before auth, forbidden after")
    func rolesAgainstMethods() {
        let roles: [RPCRole?] = [nil] + RPCRole.allCases
        for entry in Entities.table.entries {
            for role in roles {
                var session = Session(role: role)
                session.principal = role.map { "p-\($0.rawValue)" }
                let refusal = session.refusal(of: entry.method, needing: entry.access)
                let allowed: Bool
                switch (role, entry.access) {
                case (_, .open): allowed = true
                case (nil, _): allowed = false
                case (.read?, let access): allowed = access == .read
                case (.write?, let access): allowed = access == .read || access == .write
                case (.replicate?, let access): allowed = access == .read || access == .replicate
                case (.admin?, _): allowed = true
                }
                #expect((refusal == nil) == allowed, "\(role?.rawValue ?? "unauthenticated") -> \(entry.method): \(refusal?.errorMessage ?? "allowed")")
                if let refusal { #expect(refusal.code == (role == nil ? .unauthorized : .forbidden)) }
            }
        }
    }
}
