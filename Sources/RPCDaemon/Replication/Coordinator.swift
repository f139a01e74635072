import Dispatch
import Foundation
import RPCEntities
import RPCSchema

/// A leader's right to take writes, bounded in time: it lasts two thirds of `leader_ttl` from when
/// its last successful lease renewal was sent (a monotonic clock), so it ends before etcd can let
/// the lease expire and elect someone else. Checked before every mutation and again before its
/// reply goes out, so a leader stopped (SIGSTOP) past the deadline acknowledges nothing on waking.
final class LeaseFence: @unchecked Sendable {
    // @unchecked: every var is guarded by `lock`.
    private let lock = NSLock()
    private var holding = false
    private var deadline: UInt64 = 0
    /// Who leads, for the refusal of a read that may be stale (nil: not known).
    private var leader: String?
    let validity: UInt64

    init(leaderTTL: Double) {
        validity = UInt64(max(1, leaderTTL * 2 / 3) * 1e9)
    }

    /// Leadership starts (or goes on): writes are allowed until `validity` after `sentAt`.
    func renewed(sentAt: UInt64) {
        lock.withLock {
            holding = true
            deadline = max(deadline, sentAt &+ validity)
        }
    }

    /// This member is no longer the leader; `leader` is, when known.
    func release(leader: String? = nil) {
        lock.withLock {
            holding = false
            self.leader = leader
        }
    }

    /// Whether a write may be taken or acknowledged now.
    var isValid: Bool {
        let now = DispatchTime.now().uptimeNanoseconds
        return lock.withLock { holding && now < deadline }
    }

    /// The refusal a mutation gets while the lease is not known to hold.
    func refusal() -> RPCError? {
        guard !isValid else { return nil }
        return .readOnly(
            "this member has not renewed its etcd lease within 2/3 of leader_ttl, so it takes no writes until it does or another member is elected; retry shortly (system.stats shows the leader)")
    }

    /// The refusal a read gets on a connection that did not allow stale reads, while this member is
    /// not the leader holding its lease.
    func readRefusal() -> RPCError? {
        guard !isValid else { return nil }
        let state: (holding: Bool, leader: String?) = lock.withLock { (holding, leader) }
        let why: String
        let whereTo: String
        if let leader = state.leader {
            why = "this member follows the leader at \(leader)"
            whereTo = "read from the leader at \(leader)"
        } else {
            why = state.holding ? "this member has not renewed its etcd lease within 2/3 of leader_ttl" : "this member is not the leader"
            whereTo = "read from the leader (system.stats shows it)"
        }
        return .readOnly("\(why), so its data may be stale: \(whereTo), or allow stale reads on this connection with system.staleReads {\"allow\":true}")
    }

    /// What a mutation whose confirmation came after the deadline gets instead of its success.
    static let lateError = RPCError.replicationTimeout(
        "the leader's etcd lease was not renewed in time, so this change (applied and journaled here) is not acknowledged; retry with the same idempotency key on the current leader: it returns the change's outcome and never applies it twice")
}

/// Which follower runs now: the coordinator replaces it; stats and the shutdown read it.
final class FollowerSlot: @unchecked Sendable {
    // @unchecked: `current` is guarded by `lock`.
    private let lock = NSLock()
    private var current: Follower?

    var follower: Follower? { lock.withLock { current } }

    /// Puts `follower` in the slot; the one it held.
    @discardableResult
    func replace(with follower: Follower?) -> Follower? {
        lock.withLock {
            defer { current = follower }
            return current
        }
    }
}

/// `coordinator = etcd:…`: the members of a cluster elect their leader through etcd, as Patroni
/// does. Every member holds a lease (`leader_ttl`) and publishes itself under
/// `/rpcd/CLUSTER/members/ADDRESS` (its term and durable sequence); the leader key
/// `/rpcd/CLUSTER/leader`, bound to the winner's lease, names the leader and its term. When it
/// is gone, the live member with the highest (term, sequence) takes it (ties to the lowest name;
/// with `min_sync_replicas = 0` only members within `max_failover_lag` of the most advanced run),
/// journals a new term and takes writes; the others follow it. Runs on a queue of its own: its
/// calls to etcd wait for the network.
final class Coordinator: @unchecked Sendable {
    // @unchecked: the vars marked "queue only" are touched on `queue`; `status` is guarded by `lock`.
    struct Settings {
        var cluster: String
        var advertise: String
        var leaderTTL: Double
        var maxFailoverLag: Int
        var minSyncReplicas: Int
    }

    /// Set once, by `start`, before the queue reads it.
    private(set) var settings: Settings
    private let etcd: EtcdClient
    private let dispatcher: Dispatcher
    private let journal: Journal
    let fence: LeaseFence
    private let syncGate: SyncGate?
    private let slot: FollowerSlot
    private let makeFollower: @Sendable (_ leader: String, _ member: String?) -> Follower
    private let log: Logger
    private let queue = DispatchQueue(label: "rpcd.coordinator")

    private let lock = NSLock()
    private var status = "starting"
    private var publicRole = "candidate"
    private var stopped = false

    // Queue only.
    private var lease: Int64 = 0
    private var role = Role.waiting
    private var lostSince: UInt64?
    private var waitingSince: UInt64?
    private var lastNote = ""
    /// The sync set last written to etcd in this term (nil: none yet).
    private var publishedSync: Set<String>?

    enum Role: Equatable {
        case waiting
        case leader(term: UInt64)
        case following(String)

        /// As `system.stats` and the member key say it.
        var name: String {
            switch self {
            case .leader: "leader"
            case .following: "follower"
            case .waiting: "candidate"
            }
        }
    }

    var leaderKey: String { "/rpcd/\(settings.cluster)/leader" }
    /// The leader's sync set; not bound to a lease, so it outlives the leader that wrote it.
    var syncKey: String { "/rpcd/\(settings.cluster)/sync" }
    var membersPrefix: String { "/rpcd/\(settings.cluster)/members/" }

    init(
        settings: Settings, etcd: EtcdClient, dispatcher: Dispatcher, journal: Journal, fence: LeaseFence, syncGate: SyncGate?,
        slot: FollowerSlot, log: Logger, makeFollower: @escaping @Sendable (_ leader: String, _ member: String?) -> Follower
    ) {
        self.settings = settings
        self.etcd = etcd
        self.dispatcher = dispatcher
        self.journal = journal
        self.fence = fence
        self.syncGate = syncGate
        self.slot = slot
        self.log = log
        self.makeFollower = makeFollower
    }

    /// What the coordinator does now, for `system.stats` and STATUS=.
    var summary: String { lock.withLock { status } }

    /// `leader`, `follower` or `candidate` (no leader known yet).
    var roleName: String { lock.withLock { publicRole } }

    private func setRole(_ new: Role) {
        role = new
        lock.withLock { publicRole = new.name }
    }

    /// Mutations are refused until etcd names a leader; then the coordinator runs, a few times a lease.
    func start(advertise: String) {
        settings.advertise = advertise
        dispatcher.setReadOnly(waitingMessage)
        log.info("coordinator: cluster \(settings.cluster) on etcd \(etcd.endpoints.map(\.text).joined(separator: ",")), this member is \(settings.advertise), leader_ttl \(ConfigValue.render(seconds: settings.leaderTTL)) s")
        queue.async { self.loop() }
    }

    /// Stops running; a leader lets its lease go so the others need not wait for it to expire.
    func stop() {
        lock.withLock { stopped = true }
        queue.sync {
            fence.release()
            guard lease != 0 else { return }
            try? etcd.revoke(lease)
            lease = 0
        }
    }

    private var waitingMessage: String {
        "this member of cluster \(settings.cluster) waits for etcd to name its leader and takes no writes; send mutations to the leader (system.stats shows it), or retry shortly"
    }

    /// How often the lease is renewed and the leader key read: six times a lease, so two renewals
    /// can fail before the fence (at two thirds) closes.
    private var interval: Double { max(0.2, settings.leaderTTL / 6) }

    private func loop() {
        guard !lock.withLock({ stopped }) else { return }
        tick()
        queue.asyncAfter(deadline: .now() + interval) { self.loop() }
    }

    private func setStatus(_ text: String) { lock.withLock { status = text } }

    /// Logs `text` once, until something else is noted.
    private func note(_ text: String) {
        guard text != lastNote else { return }
        lastNote = text
        log.info("coordinator: \(text)")
    }

    // MARK: - One round

    private func tick() {
        let sentAt = DispatchTime.now().uptimeNanoseconds
        do {
            if lease == 0 {
                lease = try etcd.grant(ttl: Int(settings.leaderTTL.rounded(.up)))
            } else if try etcd.keepAlive(lease) == 0 {
                lease = 0
                log.warning("coordinator: this member's etcd lease expired (not renewed within leader_ttl); it takes a new one and runs again")
                if case .leader = role { stepDown(because: "its etcd lease expired") }
                return
            }
            if let since = lostSince {
                log.info("coordinator: etcd answers again after \(String(format: "%.1f", Double(sentAt &- since) / 1e9)) s")
                lostSince = nil
            }
            try publish()
            let holder = try etcd.range(leaderKey).first
            if let holder, let leader = LeaderRecord(holder.value) {
                try act(on: leader, lease: holder.lease, sentAt: sentAt)
            } else {
                if case .leader = role { stepDown(because: "the leader key is gone from etcd") }
                try elect(sentAt: sentAt)
            }
        } catch {
            if lostSince == nil {
                lostSince = sentAt
                let fenced = if case .leader = role { "; as leader it takes no writes once 2/3 of leader_ttl pass without a renewal" } else { "" }
                log.warning("coordinator: etcd cannot be reached (\(error)); this member serves reads\(fenced), and retries")
            }
            setStatus("etcd unreachable (\(error)); serving reads only")
        }
    }

    /// The leader key names `leader`, bound to lease `holderLease`.
    private func act(on leader: LeaderRecord, lease holderLease: Int64, sentAt: UInt64) throws(EtcdError) {
        waitingSince = nil
        if holderLease == lease {
            if case .leader(let term) = role {
                fence.renewed(sentAt: sentAt)
                try publishSyncSet(term: term)
                setStatus("leader of cluster \(settings.cluster), term \(term)")
            } else {
                // Written by this run, whose promotion then failed: let another member run.
                try etcd.delete(leaderKey)
            }
            return
        }
        if case .leader = role { stepDown(because: "etcd names \(leader.address) the leader (term \(leader.term))") }
        if leader.address == settings.advertise {
            // An earlier run of this member: never taken at its word.
            note("the leader key names this member from an earlier run; waiting for that lease to expire")
            setStatus("waiting for the leader key of an earlier run of this member to expire")
            return
        }
        if role != .following(leader.address) { follow(leader.address) }
        setStatus("following \(leader.address), leader of cluster \(settings.cluster) in term \(leader.term)")
    }

    /// This member's place in etcd: address, term and durable sequence, bound to its lease.
    private func publish() throws(EtcdError) {
        let term = dispatcher.withState { $0.terms.current?.term ?? 0 }
        let member = MemberRecord(address: settings.advertise, term: term, sequence: journal.sequences.durable, role: role.name)
        try etcd.put(membersPrefix + settings.advertise, member.bytes, lease: lease)
    }

    /// With `min_sync_replicas`: writes the followers in sync to the sync key when they changed,
    /// then lets them confirm (so every member that confirms is one etcd may elect next).
    private func publishSyncSet(term: UInt64) throws(EtcdError) {
        guard let syncGate else { return }
        let names = syncGate.candidates()
        guard names != publishedSync else { return }
        try etcd.put(syncKey, SyncRecord(leader: settings.advertise, term: term, members: names.sorted()).bytes, lease: 0)
        publishedSync = names
        syncGate.publish(names)
        log.info("coordinator: sync set published: \(names.isEmpty ? "none" : names.sorted().joined(separator: ", "))")
    }

    /// No leader: the most advanced eligible live member takes the key.
    private func elect(sentAt: UInt64) throws(EtcdError) {
        var members = try etcd.range(membersPrefix, prefix: true).compactMap { MemberRecord($0.value) }
        if settings.minSyncReplicas > 0, let record = try etcd.range(syncKey).first.flatMap({ SyncRecord($0.value) }) {
            // Only the last leader and its published sync set hold every acknowledged write.
            let allowed = Set(record.members + [record.leader])
            members = members.filter { allowed.contains($0.address) }
            guard allowed.contains(settings.advertise) else {
                note("no leader; this member is not in the last published sync set (\(record.members.joined(separator: ", "))), so it does not run")
                setStatus("no leader; not in the sync set, so not running")
                return
            }
        }
        guard let newest = members.map(\.sequence).max() else { return }
        let eligible = members.filter { member in
            settings.minSyncReplicas > 0 || member.sequence >= newest - min(newest, UInt64(settings.maxFailoverLag))
        }
        let ranked = eligible.sorted { a, b in
            (a.term, a.sequence) != (b.term, b.sequence) ? (a.term, a.sequence) > (b.term, b.sequence) : Array(a.address.utf8).lexicographicallyPrecedes(b.address.utf8)
        }
        guard let me = ranked.firstIndex(where: { $0.address == settings.advertise }) else {
            note("no leader, and this member is more than max_failover_lag (\(settings.maxFailoverLag)) records behind the most advanced; it does not run")
            setStatus("no leader; too far behind to run")
            return
        }
        let since = waitingSince ?? sentAt
        waitingSince = since
        // A better member that does not take the key within two leases is passed over.
        let patience = UInt64(settings.leaderTTL * 2e9)
        if me > 0 && sentAt &- since < patience {
            note("no leader; \(ranked[0].address) is more advanced (term \(ranked[0].term), sequence \(ranked[0].sequence)) and runs first")
            setStatus("no leader; \(ranked[0].address) runs first")
            return
        }
        let term = (members.map(\.term).max() ?? 0) + 1
        let record = LeaderRecord(address: settings.advertise, term: term)
        guard try etcd.create(leaderKey, record.bytes, lease: lease) else { return }
        promote(term: term, sentAt: sentAt)
    }

    // MARK: - Role changes

    /// Won the leader key: stop following, start term `term`, take writes.
    private func promote(term: UInt64, sentAt: UInt64) {
        stopFollowing()
        let current = dispatcher.withState { $0.terms.current?.term ?? 0 }
        let term = max(term, current + 1)
        let id = TermHistory.newID()
        switch dispatcher.startTerm(term, id: id, leader: settings.advertise) {
        case .failure(let error):
            log.error("coordinator: cannot start term \(term): \(error.errorMessage); another member may run")
            try? etcd.delete(leaderKey)
            setRole(.waiting)
            return
        case .success(let seq):
            if let failure = journal.waitDurable(seq) {
                log.error("coordinator: cannot journal term \(term): \(failure); another member may run")
                try? etcd.delete(leaderKey)
                setRole(.waiting)
                return
            }
            syncGate?.activate(confirmed: seq)
            publishedSync = nil
            fence.renewed(sentAt: sentAt)
            setRole(.leader(term: term))
            dispatcher.setReadOnly(nil)
            lastNote = ""
            log.info("coordinator: elected leader of cluster \(settings.cluster): term \(term) (id \(id)) starts at sequence \(seq)")
            setStatus("leader of cluster \(settings.cluster), term \(term)")
        }
    }

    /// No longer the leader: refuse writes now.
    private func stepDown(because why: String) {
        fence.release()
        syncGate?.deactivate(because: "this member stopped being the leader (\(why))")
        dispatcher.setReadOnly(waitingMessage)
        setRole(.waiting)
        log.warning("coordinator: no longer the leader: \(why)")
    }

    private func follow(_ leader: String) {
        fence.release(leader: leader)
        stopFollowing()
        let follower = makeFollower(leader, settings.advertise)
        slot.replace(with: follower)
        follower.start()
        setRole(.following(leader))
        lastNote = ""
        log.info("coordinator: following \(leader)")
    }

    /// Stops the follower that runs, once every record it applied is durable.
    private func stopFollowing() {
        guard let old = slot.replace(with: nil) else { return }
        old.shutdown()
        old.waitIdle()
        _ = journal.waitDurable(nil)
    }
}

/// A value the coordinator keeps in etcd: JSON, through the project's own codec.
protocol EtcdRecord: Codable {}

extension EtcdRecord {
    /// nil when `bytes` is not such a record (another version's, or damaged).
    init?(_ bytes: [UInt8]) {
        guard let value = try? JSONParser.parse(bytes), let record = try? JSONValueDecoder().decode(Self.self, from: value) else { return nil }
        self = record
    }

    var bytes: [UInt8] {
        var out: [UInt8] = []
        if let value = try? JSONValueEncoder().encode(self) { JSONWriter.write(value, into: &out) }
        return out
    }
}

/// The leader key's value: `{"address": "HOST:PORT", "term": N}`.
struct LeaderRecord: EtcdRecord, Equatable {
    var address: String
    var term: UInt64
}

/// The sync key's value: `{"leader", "term", "members": ["HOST:PORT", …]}`.
struct SyncRecord: EtcdRecord, Equatable {
    var leader: String
    var term: UInt64
    var members: [String]
}

/// A member's key: `{"address", "term", "sequence", "role"}`.
struct MemberRecord: EtcdRecord, Equatable {
    var address: String
    var term: UInt64
    var sequence: UInt64
    var role: String
}
