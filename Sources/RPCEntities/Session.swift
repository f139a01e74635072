import RPCSchema

/// What a connection remembers between lines: its wire form and who it is. Owned by the
/// connection's loop; the dispatcher reads and updates it per request.
public struct Session: Sendable {
    /// The form of the connection's first request; replies use it.
    public var form: WireForm?
    /// What the connection may call. `admin` where no authentication is asked for (the default, and
    /// a loopback TCP listener without an auth file); nil until `system.auth` succeeds where it is.
    public var role: RPCRole?
    /// Who authenticated (`system.auth`, or the Unix user), for logs and for closing the
    /// connections of a principal that was removed.
    public var principal: String?
    /// The peer's address, for logs.
    public var peer: String
    /// Where the peer comes from, without its port (an IP address, or `uid N` on a Unix socket):
    /// what failed logins are counted and throttled by across connections.
    public var peerHost = ""
    /// Failed `system.auth` calls on this connection; a success does not reset it.
    public var authFailures = 0
    /// Set by a handler: close the connection once the reply is sent (e.g. too many failed logins).
    public var closeAfterReply = false
    /// Set by `system.staleReads`: reads are answered even where they may be stale.
    public var staleReads = false
    /// Set by `replication.subscribe`: after its reply, the connection gets the change feed.
    public var feed: FeedStart?

    /// Where a connection's change feed starts.
    public struct FeedStart: Sendable, Equatable {
        /// The last record the subscriber has: the feed sends the ones after it.
        public var after: UInt64
        /// Send the snapshot first (`after` is older than the journal).
        public var snapshotFirst: Bool
        /// A daemon subscribed (with its term history): a follower that may count as in sync.
        public var replica = false
        /// A member of a coordinated cluster: its advertised address.
        public var member: String?
    }

    public init(role: RPCRole? = .admin, peer: String = "") {
        self.role = role
        self.peer = peer
    }

    /// Why this connection may not call a method needing `access`, or nil when it may.
    public func refusal(of method: RPCMethod, needing access: RPCAccess) -> RPCError? {
        guard access != .open else { return nil }
        guard let role else {
            return .unauthorized("\(method) needs authentication on this connection: call system.auth {\"name\",\"token\"} first (an operator creates a token with rpcd auth add NAME ROLE)")
        }
        guard role.allows(access) else {
            let who = principal.map { "\"\($0)\" has role \(role.rawValue)" } ?? "this connection has role \(role.rawValue)"
            return .forbidden("\(method) needs a role allowing \(access.rawValue) access; \(who); ask the operator for a token with a role that allows it")
        }
        return nil
    }
}

/// What the service methods (`system.*`) read from the daemon around the entity state. The daemon
/// implements it; the handlers live in the method table like every other method.
public protocol ServiceContext: Sendable {
    var version: String { get }
    var uptimeSeconds: Double { get }
    /// `system.stats`, gathered from every event loop; `done` runs on any thread.
    func stats(_ done: @escaping @Sendable (StatsResult) -> Void)
    /// Checks `token` for principal `name` (byte for byte), unless the peer is throttled for earlier
    /// failures. Logs the outcome (never the token).
    func authenticate(name: String, token: String, session: Session) -> AuthOutcome
    /// A call refused for want of a role (`unauthorized`, `forbidden`): for the audit trail.
    func refused(_ method: RPCMethod, _ error: RPCError, session: Session)
    /// Failed `system.auth` calls after which a connection is closed.
    var maxAuthFailures: Int { get }
    /// The last durable sequence number, the one the snapshot covers (0: none) and the last one
    /// the journal files do not hold (a subscriber from before it needs the snapshot), for a new
    /// subscriber; or why the change feed takes none now.
    func feedSequences() -> Result<(durable: UInt64, snapshot: UInt64, filesFrom: UInt64), RPCError>
    /// `replication.position`: this daemon's place in its chain.
    func replicationPosition() -> Result<PositionResult, RPCError>
    /// This daemon's term history, for a subscriber to compare its own with.
    func termMarks() -> [TermMark]
    /// The random id this daemon's history began with (nil: not known).
    func origin() -> String?
}

/// What `ServiceContext.authenticate` decided.
public enum AuthOutcome: Sendable, Equatable {
    /// The token is the principal's: its name as the auth file spells it, and its role.
    case authenticated(principal: String, role: RPCRole)
    /// Unknown name or wrong token.
    case failed
    /// Not checked: the peer failed too often lately; it may try again after `retryAfter` seconds.
    case throttled(retryAfter: Double)
}

extension ServiceContext {
    public func refused(_ method: RPCMethod, _ error: RPCError, session: Session) {}

    public func feedSequences() -> Result<(durable: UInt64, snapshot: UInt64, filesFrom: UInt64), RPCError> {
        .failure(.internal("this daemon keeps no journal to feed changes from"))
    }

    public func replicationPosition() -> Result<PositionResult, RPCError> {
        .failure(.internal("this daemon keeps no journal to feed changes from"))
    }

    public func termMarks() -> [TermMark] { [] }

    public func origin() -> String? { nil }
}
