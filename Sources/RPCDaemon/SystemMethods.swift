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
    private var authenticator: (@Sendable (_ name: String, _ token: String) -> (name: String, role: RPCRole)?)?
    private var throttle = AuthThrottle()
    private let log: Logger
    let audit: AuditTrail
    /// Standing warnings for `system.stats` (set before serving).
    var warnings: [String] {
        get { lock.withLock { standingWarnings } }
        set { lock.withLock { standingWarnings = newValue } }
    }
    private var standingWarnings: [String] = []

    init(log: Logger) {
        self.log = log
        self.audit = AuditTrail(log: log)
    }

    func attach(_ server: Server) { lock.withLock { self.server = server } }

    /// The change feed `replication.subscribe` starts; set before serving.
    private var feed: ReplicationFeed?
    func attach(_ feed: ReplicationFeed) { lock.withLock { self.feed = feed } }

    func feedSequences() -> Result<(durable: UInt64, snapshot: UInt64, filesFrom: UInt64), RPCError> {
        guard let feed = lock.withLock({ feed }) else { return .failure(.internal("this daemon keeps no journal to feed changes from")) }
        guard feed.subscriberCount < ReplicationFeed.maxSubscribers else {
            return .failure(.overloaded("this daemon feeds at most \(ReplicationFeed.maxSubscribers) subscribers at once; subscribe to one of its followers instead (chains), or try again later"))
        }
        return .success(feed.sequences)
    }

    /// This daemon's place in its chain (set before serving).
    var position: (@Sendable () -> PositionResult)? {
        get { lock.withLock { positionSource } }
        set { lock.withLock { positionSource = newValue } }
    }
    private var positionSource: (@Sendable () -> PositionResult)?

    func replicationPosition() -> Result<PositionResult, RPCError> {
        guard let position else { return .failure(.internal("this daemon keeps no journal to feed changes from")) }
        return .success(position())
    }

    /// This daemon's term history (set before serving).
    var history: (@Sendable () -> [TermMark])? {
        get { lock.withLock { historySource } }
        set { lock.withLock { historySource = newValue } }
    }
    private var historySource: (@Sendable () -> [TermMark])?

    func termMarks() -> [TermMark] { history?() ?? [] }

    /// This daemon's history origin (set before serving).
    var historyOrigin: HistoryOrigin? {
        get { lock.withLock { originSource } }
        set { lock.withLock { originSource = newValue } }
    }
    private var originSource: HistoryOrigin?

    func origin() -> String? { historyOrigin?.value }

    /// Sets how tokens are checked (nil: no principals, every `system.auth` fails).
    func setAuthenticator(_ check: (@Sendable (_ name: String, _ token: String) -> (name: String, role: RPCRole)?)?) {
        lock.withLock { authenticator = check }
    }

    var uptimeSeconds: Double { Double(DispatchTime.now().uptimeNanoseconds &- startedAt) / 1e9 }

    func stats(_ done: @escaping @Sendable (StatsResult) -> Void) {
        guard let server = lock.withLock({ server }) else { return }
        server.collectStats { [audit, self] result in
            var result = result
            let refusals = audit.records
            result.refusals = refusals.isEmpty ? nil : refusals
            let warnings = self.warnings
            result.warnings = warnings.isEmpty ? nil : warnings
            done(result)
        }
    }

    func authenticate(name: String, token: String, session: Session) -> AuthOutcome {
        let now = DispatchTime.now().uptimeNanoseconds
        let (check, wait) = lock.withLock { (authenticator, throttle.wait(host: session.peerHost, now: now)) }
        if let wait {
            log.warning(key: "auth-throttled", "\(session.peer): system.auth not checked: \(session.peerHost) failed too often lately (wait \(SystemMethods.seconds(wait)) s)")
            return .throttled(retryAfter: wait)
        }
        if let (principal, role) = check?(name, token) {
            log.info("\(session.peer): authenticated as \"\(principal)\" (role \(role.rawValue))")
            return .authenticated(principal: principal, role: role)
        }
        let failures = lock.withLock { throttle.failed(host: session.peerHost, now: now) }
        let delay = AuthThrottle.delay(afterFailures: failures)
        // Each of a host's first failures is logged; past them, a line per host and window.
        log.log(
            .warning, key: failures > AuthThrottle.freeFailures ? "auth-failed-\(session.peerHost)" : nil,
            "\(session.peer): system.auth failed for name \"\(Echo.text(name))\" (\(failures) failure\(failures == 1 ? "" : "s") from \(session.peerHost) lately"
                + (delay > 0 ? "; its next try waits \(SystemMethods.seconds(delay)) s)" : ")"))
        return .failed
    }

    func refused(_ method: RPCMethod, _ error: RPCError, session: Session) {
        audit.record(method, error, session: session)
    }
}
