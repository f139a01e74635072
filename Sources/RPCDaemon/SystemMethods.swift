import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// The daemon's side of the `system` entity (whose handlers live in the method table): the
/// context they read, and the `system.stats` figures added up from the loops.
enum StatsReport {
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
        var result = StatsResult(
            uptimeSeconds: uptime, connections: connections,
            requests: methods.reduce(0) { $0 + $1.requests }, errors: methods.reduce(0) { $0 + $1.errors },
            methods: methods, bytesIn: Int(clamping: snapshot.bytesIn), bytesOut: Int(clamping: snapshot.bytesOut),
            journal: journal)
        result.loops = snapshot.loops.sorted { $0.index < $1.index }.map(\.stats)
        return result
    }
}

/// What `system.*` reads from the daemon: version, uptime, statistics and the authenticator.
/// Created before the server (the dispatcher needs it), attached to it once the server exists.
final class DaemonContext: ServiceContext, @unchecked Sendable {
    // @unchecked: `server`, `feed` and `authenticator` are guarded by `lock`.
    let version = CommandLineParser.version
    let maxAuthFailures = 3
    private let startedAt = DispatchTime.now().uptimeNanoseconds
    private let lock = NSLock()
    /// `unowned`, not `weak`: the server outlives every call that reads it, and a weak reference
    /// would give it a side table (slow retains on every loop's request path).
    private unowned var server: Server?
    private var authenticator: (@Sendable (_ name: String, _ token: String) -> RPCRole?)?
    private let log: Logger

    init(log: Logger) { self.log = log }

    func attach(_ server: Server) { lock.withLock { self.server = server } }

    /// The change feed `replication.subscribe` starts; set before serving.
    private var feed: ReplicationFeed?
    func attach(_ feed: ReplicationFeed) { lock.withLock { self.feed = feed } }

    func feedSequences() -> Result<(durable: UInt64, snapshot: UInt64), RPCError> {
        guard let feed = lock.withLock({ feed }) else { return .failure(.internal("this daemon keeps no journal to feed changes from")) }
        guard feed.subscriberCount < ReplicationFeed.maxSubscribers else {
            return .failure(.overloaded("this daemon feeds at most \(ReplicationFeed.maxSubscribers) subscribers at once; subscribe to one of its followers instead (chains), or try again later"))
        }
        return .success(feed.sequences)
    }

    /// Sets how tokens are checked (nil: no principals, every `system.auth` fails).
    func setAuthenticator(_ check: (@Sendable (_ name: String, _ token: String) -> RPCRole?)?) {
        lock.withLock { authenticator = check }
    }

    var uptimeSeconds: Double { Double(DispatchTime.now().uptimeNanoseconds &- startedAt) / 1e9 }

    func stats(_ done: @escaping @Sendable (StatsResult) -> Void) {
        guard let server = lock.withLock({ server }) else { return }
        server.collectStats(done)
    }

    func authenticate(name: String, token: String, peer: String) -> RPCRole? {
        let check = lock.withLock { authenticator }
        if let role = check?(name, token) {
            log.info("\(peer): authenticated as \"\(name.prefix(64))\" (role \(role.rawValue))")
            return role
        }
        log.warning("\(peer): system.auth failed for name \"\(name.prefix(64))\"")
        return nil
    }
}
