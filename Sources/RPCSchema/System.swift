/// The `system` entity: what an operator or a monitor asks the daemon itself, over the same socket.

/// `system.ping {}` -> `system.pingResult {"version", "uptimeSeconds"}`.
public struct SystemPing: RPCCall, Hashable {
    public typealias Reply = PingResult
    public static let method = RPCMethod("system", "ping")
    public init() {}
}

public struct PingResult: Codable, Hashable, Sendable {
    public var version: String
    public var uptimeSeconds: Double
    public init(version: String, uptimeSeconds: Double) {
        self.version = version
        self.uptimeSeconds = uptimeSeconds
    }
}

/// `system.describe {}` -> every entity, its methods and their param fields, generated from the
/// method table (the same one the dispatcher serves from).
public struct SystemDescribe: RPCCall, Hashable {
    public typealias Reply = ServiceDescription
    public typealias Output = [EntityDescription]
    public static let method = RPCMethod("system", "describe")
    public init() {}
    public static func output(from reply: ServiceDescription) -> [EntityDescription] { reply.entities }
}

public struct ServiceDescription: Codable, Hashable, Sendable {
    public var version: String
    public var entities: [EntityDescription]
    public init(version: String, entities: [EntityDescription]) {
        self.version = version
        self.entities = entities
    }
}

public struct EntityDescription: Codable, Hashable, Sendable {
    public var name: String
    public var methods: [MethodDescription]
    public init(name: String, methods: [MethodDescription]) {
        self.name = name
        self.methods = methods
    }
}

public struct MethodDescription: Codable, Hashable, Sendable {
    /// The method's name within its entity, e.g. `getUser`.
    public var name: String
    /// The method a success is sent back to, e.g. `user.getUserResult`.
    public var result: String
    /// Whether it changes state (and is journaled).
    public var mutation: Bool
    /// What a caller needs (`open`, `read`, `write`, `replicate`, `admin`); absent from older daemons.
    public var access: RPCAccess?
    public var params: [RPCField]
    public init(name: String, result: String, mutation: Bool, access: RPCAccess? = nil, params: [RPCField]) {
        self.name = name
        self.result = result
        self.mutation = mutation
        self.access = access
        self.params = params
    }
}

/// `system.stats {}` -> connections, requests and errors per method, bytes, journal, uptime.
public struct SystemStats: RPCCall, Hashable {
    public typealias Reply = StatsResult
    public static let method = RPCMethod("system", "stats")
    public init() {}
}

public struct StatsResult: Codable, Hashable, Sendable {
    public var uptimeSeconds: Double
    public var connections: ConnectionStats
    /// Requests answered (all methods) and how many of them with `error.error`.
    public var requests: Int
    public var errors: Int
    /// Per method, sorted by name. Lines that were not requests count as `(invalid)`, unknown methods as `(unknown)`.
    public var methods: [MethodStats]
    public var bytesIn: Int
    public var bytesOut: Int
    public var journal: JournalStats
    /// Idempotency keys remembered, retries answered from them, keys forgotten (absent from older daemons).
    public var idempotency: KeyStats?
    /// Leader or follower, subscribers and lag (absent from older daemons).
    public var replication: ReplicationStats?
    /// Records held, and how many changes wait in overlays (absent from older daemons).
    public var state: StateStats?
    /// Each event loop's time since the start (absent from older daemons).
    public var loops: [LoopStats]?
    /// The last calls refused for want of a role, oldest first (absent from older daemons).
    public var refusals: [RefusalRecord]?
    /// Warnings an operator should act on, one line each (absent when there are none).
    public var warnings: [String]?

    public init(
        uptimeSeconds: Double, connections: ConnectionStats, requests: Int, errors: Int, methods: [MethodStats],
        bytesIn: Int, bytesOut: Int, journal: JournalStats
    ) {
        self.uptimeSeconds = uptimeSeconds
        self.connections = connections
        self.requests = requests
        self.errors = errors
        self.methods = methods
        self.bytesIn = bytesIn
        self.bytesOut = bytesOut
        self.journal = journal
    }
}

/// A call refused with `unauthorized` or `forbidden` (`system.stats` keeps the last 64).
public struct RefusalRecord: Codable, Hashable, Sendable {
    /// Seconds since 1970 (UTC).
    public var time: Double
    /// The principal and its address, or the address alone before authentication.
    public var who: String
    public var method: String
    public var code: String

    public init(time: Double, who: String, method: String, code: String) {
        self.time = time
        self.who = who
        self.method = method
        self.code = code
    }
}

public struct ConnectionStats: Codable, Hashable, Sendable {
    public var current: Int
    public var total: Int
    /// Turned away past `max_connections`.
    public var refused: Int
    /// Closed by `idle_timeout`.
    public var idleClosed: Int
    public init(current: Int, total: Int, refused: Int, idleClosed: Int) {
        self.current = current
        self.total = total
        self.refused = refused
        self.idleClosed = idleClosed
    }
}

public struct MethodStats: Codable, Hashable, Sendable {
    public var method: String
    public var requests: Int
    public var errors: Int
    public init(method: String, requests: Int, errors: Int) {
        self.method = method
        self.requests = requests
        self.errors = errors
    }
}

public struct KeyStats: Codable, Hashable, Sendable {
    public var keys: Int
    public var hits: Int
    public var evictions: Int
    public init(keys: Int, hits: Int, evictions: Int) {
        self.keys = keys
        self.hits = hits
        self.evictions = evictions
    }
}

/// The records held. `overlaid`: changes made while a copy of the state (a compaction's snapshot)
/// still read the part they touched, kept beside it until the copy is done; it returns to 0 after
/// each compaction, and a value that only grows means a copy never let go (each write then costs a
/// second lookup).
public struct StateStats: Codable, Hashable, Sendable {
    public var users: Int
    public var buildings: Int
    public var overlaid: Int
    /// Records of each entity registered beside `user` and `building`, by entity name (absent
    /// when there is none).
    public var entities: [String: Int]?
    public init(users: Int, buildings: Int, overlaid: Int, entities: [String: Int]? = nil) {
        self.users = users
        self.buildings = buildings
        self.overlaid = overlaid
        self.entities = entities
    }
}

/// One event loop's time since the start, in seconds: serving (its turns, less the waits below;
/// time the loop's thread was preempted in a turn counts here too), lingering (a turn waiting
/// for the next event instead of returning its thread) and the part of that spent polling
/// without sleeping (`busy_poll`, CPU time), and how many turns. Serving time that grows nearly
/// as fast as the clock means this loop is what limits the daemon.
public struct LoopStats: Codable, Hashable, Sendable {
    public var servingSeconds: Double
    public var lingeringSeconds: Double
    public var pollingSeconds: Double
    public var turns: Int
    public init(servingSeconds: Double, lingeringSeconds: Double, pollingSeconds: Double = 0, turns: Int) {
        self.servingSeconds = servingSeconds
        self.lingeringSeconds = lingeringSeconds
        self.pollingSeconds = pollingSeconds
        self.turns = turns
    }

    /// A daemon from before `busy_poll` sends no `pollingSeconds`: 0.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        servingSeconds = try container.decode(Double.self, forKey: .servingSeconds)
        lingeringSeconds = try container.decode(Double.self, forKey: .lingeringSeconds)
        pollingSeconds = try container.decodeIfPresent(Double.self, forKey: .pollingSeconds) ?? 0
        turns = try container.decode(Int.self, forKey: .turns)
    }
}

/// The journal's size and the latency of its last fsync; 0 until there is a journal. Since the
/// start: the group commit's batches (one write each, and with `--fsync always` one fsync), the
/// records they held, and the journal's fsyncs. Records over batches is how many mutations share
/// a write (and an fsync): what the group commit achieves under the load at hand.
public struct JournalStats: Codable, Hashable, Sendable {
    public var bytes: Int
    public var lastFsyncMicroseconds: Int
    public var batches: Int
    public var records: Int
    public var fsyncs: Int
    public init(bytes: Int = 0, lastFsyncMicroseconds: Int = 0, batches: Int = 0, records: Int = 0, fsyncs: Int = 0) {
        self.bytes = bytes
        self.lastFsyncMicroseconds = lastFsyncMicroseconds
        self.batches = batches
        self.records = records
        self.fsyncs = fsyncs
    }

    /// A daemon from before the counters sends only `bytes` and `lastFsyncMicroseconds`: 0 each.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        bytes = try container.decode(Int.self, forKey: .bytes)
        lastFsyncMicroseconds = try container.decode(Int.self, forKey: .lastFsyncMicroseconds)
        batches = try container.decodeIfPresent(Int.self, forKey: .batches) ?? 0
        records = try container.decodeIfPresent(Int.self, forKey: .records) ?? 0
        fsyncs = try container.decodeIfPresent(Int.self, forKey: .fsyncs) ?? 0
    }
}

/// `system.staleReads {allow}` -> `{allow}`: whether this connection takes reads that may be stale.
/// With a coordinator, a member that is not the leader holding its lease answers reads only on
/// connections that allow it (a follower's data lags its leader's); elsewhere it changes nothing.
public struct SystemStaleReads: RPCCall, Hashable {
    public typealias Reply = StaleReadsResult
    public static let method = RPCMethod("system", "staleReads")
    public var allow: Bool
    public init(allow: Bool) { self.allow = allow }
}

public struct StaleReadsResult: Codable, Hashable, Sendable {
    public var allow: Bool
    public init(allow: Bool) { self.allow = allow }
}

/// `system.auth {name, token}` -> the role granted to this connection. Open to anyone; a few
/// failures close the connection.
public struct SystemAuth: RPCCall, Hashable {
    public typealias Reply = AuthResult
    public static let method = RPCMethod("system", "auth")
    public var name: String
    public var token: String
    public init(name: String, token: String) {
        self.name = name
        self.token = token
    }
}

public struct AuthResult: Codable, Hashable, Sendable {
    public var name: String
    public var role: RPCRole
    public init(name: String, role: RPCRole) {
        self.name = name
        self.role = role
    }
}
