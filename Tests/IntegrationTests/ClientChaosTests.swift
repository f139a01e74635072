import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// Mutations from clients with a retry policy while the daemon is killed (SIGKILL) and restarted
/// under them (issue 13's acceptance): every call returns, and the final state is what a model
/// that applied each mutation once says.
@Suite("RPCClient chaos: kill -9 under load", .serialized)
struct ClientChaosTests {
    @Test(
        "4 clients, 20,000 mixed keyed mutations, 5 kill -9 and restarts: every call succeeds; the state equals the model",
        .timeLimit(.minutes(3 * TestPace.slowdown)))
    func exactlyOnce() async throws {
        try await ChaosRun(clients: 4, lanesPerClient: 25, opsPerLane: 200, restarts: 5, exactlyOnce: true).run()
    }

    /// Today's daemon ignores keys: a mutation applied before a kill whose reply was lost is applied
    /// again when it is sent again, and a create or delete then fails with `conflict` or
    /// `notFound`. Those (and only those) count as applied; everything else must succeed. Once the
    /// daemon side lands, `exactlyOnce` covers this and more.
    @Test("4 clients, 4,000 mixed mutations, 2 kill -9 and restarts: every call returns, at least once; the state equals the model")
    func atLeastOnce() async throws {
        try await ChaosRun(clients: 4, lanesPerClient: 10, opsPerLane: 100, restarts: 2, exactlyOnce: false).run()
    }
}

/// One chaos run. Each client runs `lanesPerClient` lanes at once; a lane is a seeded script of
/// mutations on records only it touches (ids `c<client>l<lane>-…`), one call at a time, so its
/// model is exact whatever the interleaving.
struct ChaosRun {
    var clients: Int
    var lanesPerClient: Int
    var opsPerLane: Int
    var restarts: Int
    /// true: every call must succeed. false: a create answered `conflict` or a delete answered
    /// `notFound` counts as applied (a repeat of a call applied before the kill).
    var exactlyOnce: Bool

    func run() async throws {
        let daemons = try RestartableDaemon()
        // Long enough to span a restart (a sanitized daemon under the full suite: longer, `TestPace`).
        let options = RPCClientOptions(defaultTimeout: .seconds(20 * TestPace.slowdown), retry: RetryPolicy())
        let failures = Locked<[String]>([])
        let repeats = Locked(0)
        let completed = Locked(0)
        let started = Date()
        let models = try await withThrowingTaskGroup(of: [LaneModel].self) { group in
            for c in 0..<clients {
                group.addTask {
                    let client = try await RPCClient.connect(host: "127.0.0.1", port: daemons.port, options: options)
                    defer { client.close() }
                    return try await withThrowingTaskGroup(of: LaneModel.self) { lanes in
                        for l in 0..<lanesPerClient {
                            lanes.addTask {
                                var lane = LaneModel(prefix: "c\(c)l\(l)-", seed: UInt64(c * 1000 + l + 1))
                                for _ in 0..<opsPerLane {
                                    let op = lane.nextOp()
                                    do {
                                        try await op.call(on: client)
                                    } catch let error as RPCClientError where !exactlyOnce && op.isRepeatOfApplied(error) {
                                        repeats.withLock { $0 += 1 }
                                    } catch {
                                        failures.withLock { $0.append("\(op): \(error)") }
                                    }
                                    lane.apply(op)
                                    completed.withLock { $0 += 1 }
                                }
                                return lane
                            }
                        }
                        return try await lanes.reduce(into: []) { $0.append($1) }
                    }
                }
            }
            group.addTask {
                // Kills spread evenly over the work: kill k when k/(restarts+1) of the calls returned.
                let total = clients * lanesPerClient * opsPerLane
                for k in 0..<restarts {
                    while completed.current < total * (k + 1) / (restarts + 1) {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                    try await offPool { try daemons.killAndRestart() }
                }
                return []
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let elapsed = Date().timeIntervalSince(started)
        print("chaos: \(clients * lanesPerClient * opsPerLane) mutations, \(daemons.restarts) restarts, "
            + "\(repeats.current) repeats of applied calls, \(String(format: "%.1f", elapsed)) s")
        #expect(failures.current.isEmpty, "\(failures.current.count) failed calls, e.g. \(failures.current.prefix(3))")
        #expect(daemons.restarts == restarts)
        if exactlyOnce { #expect(repeats.current == 0) }

        // The final state, read through a fresh client, equals the models' union.
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemons.port)
        defer { client.close() }
        var users: [User] = []
        for try await page in client.pages(ListUsers(limit: 1000)) { users += page.users }
        var buildings: [Building] = []
        for try await page in client.pages(ListBuildings(limit: 1000)) { buildings += page.buildings }
        let wantUsers = models.flatMap(\.users.values).sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }
        let wantBuildings = models.flatMap(\.buildings.values).sorted { $0.id.utf8.lexicographicallyPrecedes($1.id.utf8) }
        #expect(users.count == wantUsers.count && buildings.count == wantBuildings.count)
        #expect(users == wantUsers)
        #expect(buildings == wantBuildings)
    }
}

/// One mutation of a lane.
enum ChaosOp: CustomStringConvertible, Sendable {
    case createUser(CreateUser)
    case updateUser(UpdateUser)
    case deleteUser(DeleteUser)
    case addBuilding(AddBuilding)
    case updateBuilding(UpdateBuilding)
    case deleteBuilding(DeleteBuilding)

    func call(on client: RPCClient) async throws {
        switch self {
        case .createUser(let call): _ = try await client.call(call)
        case .updateUser(let call): _ = try await client.call(call)
        case .deleteUser(let call): _ = try await client.call(call)
        case .addBuilding(let call): _ = try await client.call(call)
        case .updateBuilding(let call): _ = try await client.call(call)
        case .deleteBuilding(let call): _ = try await client.call(call)
        }
    }

    /// Whether `error` is what a repeat of this call gets once the call was applied.
    func isRepeatOfApplied(_ error: RPCClientError) -> Bool {
        switch self {
        case .createUser, .addBuilding: return error.code == .conflict
        case .deleteUser, .deleteBuilding: return error.code == .notFound
        case .updateUser, .updateBuilding: return false  // a repeated update succeeds
        }
    }

    var description: String {
        switch self {
        case .createUser(let call): "createUser \(call.id)"
        case .updateUser(let call): "updateUser \(call.userId)"
        case .deleteUser(let call): "deleteUser \(call.userId)"
        case .addBuilding(let call): "addBuilding \(call.id)"
        case .updateBuilding(let call): "updateBuilding \(call.buildingId)"
        case .deleteBuilding(let call): "deleteBuilding \(call.buildingId)"
        }
    }
}

/// A lane's records as they must be, and the seeded script that changes them.
struct LaneModel: Sendable {
    let prefix: String
    var users: [String: User] = [:]
    var buildings: [String: Building] = [:]
    /// BadInputTests' seeded generator: the same seed, the same script.
    private var rng: SplitMix64
    private var nextID = 0

    init(prefix: String, seed: UInt64) {
        self.prefix = prefix
        rng = SplitMix64(seed: seed)
    }

    /// A mutation valid on the current records (so that, applied once, it succeeds).
    mutating func nextOp() -> ChaosOp {
        nextID += 1
        let n = nextID
        let userIDs = users.keys.sorted()
        let buildingIDs = buildings.keys.sorted()
        switch rng.next() % 10 {
        case 0, 1, 2:
            return .createUser(CreateUser(id: "\(prefix)u\(n)", name: "N\(n)", email: "\(n)@x"))
        case 3 where !userIDs.isEmpty:
            return .updateUser(UpdateUser(userId: pick(userIDs), newName: "R\(n)"))
        case 4 where !userIDs.isEmpty:
            return .deleteUser(DeleteUser(userId: pick(userIDs)))
        case 5, 6:
            let residents = Array(Set((0..<min(2, userIDs.count)).map { _ in pick(userIDs) })).sorted()
            return .addBuilding(AddBuilding(id: "\(prefix)b\(n)", name: "H\(n)", address: "\(n) Main St", residents: residents))
        case 7...8 where !buildingIDs.isEmpty:
            let residents = userIDs.isEmpty ? [] : [pick(userIDs)]
            return .updateBuilding(UpdateBuilding(buildingId: pick(buildingIDs), newName: "H\(n)", newResidents: residents))
        case 9 where !buildingIDs.isEmpty:
            return .deleteBuilding(DeleteBuilding(buildingId: pick(buildingIDs)))
        default:
            return .createUser(CreateUser(id: "\(prefix)u\(n)", name: "N\(n)", email: "\(n)@x"))
        }
    }

    /// The op's effect, as the daemon's rules say.
    mutating func apply(_ op: ChaosOp) {
        switch op {
        case .createUser(let c):
            users[c.id] = User(id: c.id, name: c.name, email: c.email)
        case .updateUser(let c):
            if let name = c.newName { users[c.userId]?.name = name }
            if let email = c.newEmail { users[c.userId]?.email = email }
        case .deleteUser(let c):
            users[c.userId] = nil
            for id in buildings.keys { buildings[id]?.residents.removeAll { $0 == c.userId } }
        case .addBuilding(let c):
            buildings[c.id] = Building(id: c.id, name: c.name, address: c.address, residents: c.residents)
        case .updateBuilding(let c):
            if let name = c.newName { buildings[c.buildingId]?.name = name }
            if let address = c.newAddress { buildings[c.buildingId]?.address = address }
            if let residents = c.newResidents { buildings[c.buildingId]?.residents = residents }
        case .deleteBuilding(let c):
            buildings[c.buildingId] = nil
        }
    }

    private mutating func pick(_ ids: [String]) -> String { ids[Int(rng.next() % UInt64(ids.count))] }
}
