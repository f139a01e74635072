/// The `replication` entity: a change feed any connection may subscribe to, and what the leader
/// sends a subscriber. Nothing else is new on the wire: every change arrives as the ordinary
/// request that made it (its journal line, with id `"r<seq>"` and the envelope key `"seq"`), and a
/// subscriber acknowledges it with the ordinary `…Result` counter-request carrying that id.
///
/// `replication.subscribe {"fromSequence"?, "snapshot"?}` -> `replication.subscribeResult
/// {"sequence", "snapshotSequence"}`, then, as requests: every durable mutation after
/// `fromSequence` (after `sequence` when it is omitted), in journal order. A `fromSequence` below
/// `snapshotSequence` needs `"snapshot": true` (a daemon, which sends its `terms`, only below the
/// journal the leader kept from before its last compaction): the leader then sends
/// `replication.snapshotBegin {"sequence", "records"}`, the snapshot's record lines,
/// `replication.snapshotEnd {"sequence"}`, and the mutations after the snapshot.
public struct ReplicationSubscribe: RPCCall, Hashable {
    public typealias Reply = SubscribeResult
    public static let method = RPCMethod("replication", "subscribe")
    /// Send the mutations after this sequence number (nil: from now on).
    public var fromSequence: Int?
    /// Allow a snapshot first when `fromSequence` is older than the leader's journal.
    public var snapshot: Bool?
    /// The subscriber's term history (a daemon's; absent from plain subscribers): the leader checks
    /// that it holds the same history through `fromSequence`, else answers `rewindTo`.
    public var terms: [TermMark]?
    /// A member of a coordinated cluster names itself (its advertised `HOST:PORT`): the name its
    /// leader publishes in the cluster's sync set.
    public var member: String?
    /// The subscriber's origin: the random id its data directory's history began with (absent:
    /// not known, a directory from before origins). Records before its first term are compared by it.
    public var origin: String?
    public init(fromSequence: Int? = nil, snapshot: Bool? = nil, terms: [TermMark]? = nil, member: String? = nil, origin: String? = nil) {
        self.fromSequence = fromSequence
        self.snapshot = snapshot
        self.terms = terms
        self.member = member
        self.origin = origin
    }
}

/// Where a term starts: its number, its random id and its first record's sequence number.
public struct TermMark: Codable, Hashable, Sendable {
    public var term: Int
    public var termId: String
    public var sequence: Int
    public init(term: Int, termId: String, sequence: Int) {
        self.term = term
        self.termId = termId
        self.sequence = sequence
    }
}

/// A journal record (never a call): a leader starts term `term` (random 128-bit `termId`, hex) at
/// this record's sequence number; `leader` is its address. In a snapshot and a feed's snapshot,
/// `sequence` says where the term started.
public struct ReplicationTerm: Codable, Hashable, Sendable {
    public static let method = RPCMethod("replication", "term")
    public var term: Int
    public var termId: String
    public var leader: String
    public var sequence: Int?
    public init(term: Int, termId: String, leader: String, sequence: Int? = nil) {
        self.term = term
        self.termId = termId
        self.leader = leader
        self.sequence = sequence
    }
}

public struct SubscribeResult: Codable, Hashable, Sendable {
    /// The leader's last durable sequence number when the subscription started.
    public var sequence: Int
    /// The sequence number its snapshot covers (0: no snapshot): mutations up to it come only in a
    /// snapshot (to a daemon, those the journal kept from before the last compaction does not hold).
    public var snapshotSequence: Int
    /// The leader's term and term id (absent before its first term).
    public var term: Int?
    public var termId: String?
    /// Present when the subscriber's history holds records the leader's does not: the last
    /// sequence number the two share. No feed starts; the subscriber cuts its records after it
    /// (if the leader's term is higher) and subscribes again.
    public var rewindTo: Int?
    /// The leader's origin, to a subscriber that sent its terms (absent: not known).
    public var origin: String?
    public init(sequence: Int, snapshotSequence: Int, term: Int? = nil, termId: String? = nil, rewindTo: Int? = nil, origin: String? = nil) {
        self.sequence = sequence
        self.snapshotSequence = snapshotSequence
        self.term = term
        self.termId = termId
        self.rewindTo = rewindTo
        self.origin = origin
    }
}

/// Sent by a leader before the records of a snapshot: replace your state with the `records`
/// lines that follow; they bring you to `sequence`.
public struct SnapshotBegin: Codable, Hashable, Sendable {
    public static let method = RPCMethod("replication", "snapshotBegin")
    public var sequence: Int
    public var records: Int
    public init(sequence: Int, records: Int) {
        self.sequence = sequence
        self.records = records
    }
}

/// Sent by a leader after the last record of a snapshot.
public struct SnapshotEnd: Codable, Hashable, Sendable {
    public static let method = RPCMethod("replication", "snapshotEnd")
    public var sequence: Int
    public init(sequence: Int) { self.sequence = sequence }
}

/// Sent by a leader among a snapshot's records: the remembered outcome of a keyed mutation, so a
/// retry after a failover to the follower gets the same answer (`digest` is the method and param's
/// 64-bit digest as `v2:` and hex, or bare hex from a leader or snapshot older than `v2:`; `reply`
/// the success param that was sent).
public struct SnapshotKey: Codable, Equatable, Sendable {
    public static let method = RPCMethod("replication", "key")
    public var key: String
    public var digest: String
    public var seq: Int
    public var reply: JSONValue
    public init(key: String, digest: String, seq: Int, reply: JSONValue) {
        self.key = key
        self.digest = digest
        self.seq = seq
        self.reply = reply
    }
}

/// `replication.position {}` -> `replication.positionResult`: where this daemon stands in its
/// chain, for a follower of it (the `replicate` role suffices). A follower asks its leader about
/// once a second, so its lag counts from the newest sequence known anywhere up the chain, and it
/// can say when a daemon above it has lost its own leader.
public struct ReplicationPosition: RPCCall, Hashable {
    public typealias Reply = PositionResult
    public static let method = RPCMethod("replication", "position")
    public init() {}
}

public struct PositionResult: Codable, Hashable, Sendable {
    /// `leader` or `follower`.
    public var role: String
    /// The last sequence number this daemon has made durable.
    public var sequence: Int
    /// The newest sequence number known anywhere up the chain (`sequence` on a leader).
    public var newestSequence: Int
    /// A follower's leader, whether it is connected to it now, and why not.
    public var leader: String?
    public var connected: Bool?
    public var reason: String?
    /// The first break further up the chain (a daemon above that lost its leader), or nil.
    public var chain: String?
    public init(
        role: String, sequence: Int, newestSequence: Int, leader: String? = nil, connected: Bool? = nil, reason: String? = nil,
        chain: String? = nil
    ) {
        self.role = role
        self.sequence = sequence
        self.newestSequence = newestSequence
        self.leader = leader
        self.connected = connected
        self.reason = reason
        self.chain = chain
    }
}

/// `system.stats` `replication`: this daemon's place in a chain of leaders and followers.
public struct ReplicationStats: Codable, Hashable, Sendable {
    /// `leader` (takes mutations) or `follower` (mirrors `leader`, serves reads).
    public var role: String
    /// The last sequence number this daemon has made durable (in its journal, on a follower too).
    public var sequence: Int
    /// A follower's leader (`HOST:PORT`), whether it is connected now, the newest sequence known
    /// anywhere up the chain (its leader's, or a daemon's above it), and the difference.
    public var leader: String?
    public var connected: Bool?
    public var leaderSequence: Int?
    public var lagRecords: Int?
    /// A follower's state: `connected`, `reconnecting`, `never reached the leader` or `stopped`;
    /// and why, when it is not connected (absent from older daemons).
    public var state: String?
    public var reason: String?
    /// The term this daemon's history is in (absent before its first term).
    public var term: Int?
    /// A leader's `min_sync_replicas` and how many followers are in sync (absent when 0).
    public var minSyncReplicas: Int?
    public var inSyncReplicas: Int?
    /// A follower's view further up: where the chain above its leader is broken (a daemon that
    /// lost its own leader), absent while every link is connected.
    public var chain: String?
    /// With a coordinator (etcd): what this member does there, e.g. `leader of cluster c, term 3`
    /// or `etcd unreachable (…); serving reads only` (absent without one).
    public var coordinator: String?
    /// Connections subscribed to this daemon's feed (followers, or anyone).
    public var subscribers: [SubscriberStats]
    public init(
        role: String, sequence: Int, leader: String? = nil, connected: Bool? = nil, leaderSequence: Int? = nil,
        lagRecords: Int? = nil, subscribers: [SubscriberStats] = []
    ) {
        self.role = role
        self.sequence = sequence
        self.leader = leader
        self.connected = connected
        self.leaderSequence = leaderSequence
        self.lagRecords = lagRecords
        self.subscribers = subscribers
    }
}

public struct SubscriberStats: Codable, Hashable, Sendable {
    /// `HOST:PORT` of the subscriber's connection.
    public var peer: String
    /// The last sequence number sent to it, and the last it acknowledged (0: none yet).
    public var sentSequence: Int
    public var ackedSequence: Int
    /// Durable records it has not acknowledged (not sent, when it never acknowledges), and about
    /// how many journal bytes they are.
    public var lagRecords: Int
    public var lagBytes: Int
    /// With `min_sync_replicas`: whether this follower is in the sync set (absent otherwise).
    public var inSync: Bool?
    public init(peer: String, sentSequence: Int, ackedSequence: Int, lagRecords: Int, lagBytes: Int) {
        self.peer = peer
        self.sentSequence = sentSequence
        self.ackedSequence = ackedSequence
        self.lagRecords = lagRecords
        self.lagBytes = lagBytes
    }
}
