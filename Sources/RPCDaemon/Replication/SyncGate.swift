import Dispatch
import Foundation
import RPCSchema

/// `min_sync_replicas = N` on a leader: a mutation is acknowledged to its client only once N
/// followers in sync have journaled it (their acknowledgements of the feed, sent after their own
/// fsync policy), and refused before it runs while fewer than N are in sync.
///
/// A follower (a subscriber that sent its term history) is in sync once it has acknowledged
/// everything durable when it subscribed; it leaves the sync set when a mutation waited
/// `sync_timeout` for it, and joins again once it has caught up. One wait covers a batch:
/// tickets grow, so the N-th highest acknowledged sequence among the set confirms every ticket
/// up to it.
final class SyncGate: @unchecked Sendable {
    // @unchecked: every var is guarded by `lock`.
    let required: Int
    let timeout: Double
    private let log: Logger
    private let lock = NSLock()
    private var members: [ObjectIdentifier: Member] = [:]
    private var waiters: [Waiter] = []
    private var confirmed: UInt64 = 0
    /// A member that is not the leader (a coordinator's follower or candidate) confirms everything.
    private var active = true
    /// With a coordinator: the sync set the leader published in etcd, by member name. Only its
    /// members confirm, and every one of them must, so any of them may be elected next (nil: no
    /// coordinator; the `required` most advanced followers in sync confirm).
    private var published: Set<String>?

    private struct Member {
        var peer: String
        var acked: UInt64
        /// In the sync set once `acked` reaches `catchUp`.
        var inSync: Bool
        var catchUp: UInt64
    }

    private struct Waiter {
        var ticket: UInt64
        var deadline: DispatchTime
        var done: @Sendable (RPCError?) -> Void
    }

    /// `confirmed`: the last durable record at the start; what was journaled before a restart
    /// counts as confirmed (it was acknowledged, or timed out, under the last run).
    init(required: Int, timeout: Double, confirmed: UInt64, active: Bool = true, coordinated: Bool = false, log: Logger) {
        self.required = required
        self.timeout = timeout
        self.confirmed = confirmed
        self.active = active
        self.published = coordinated ? [] : nil
        self.log = log
    }

    /// The followers in sync now, by name: what the coordinator publishes next.
    func candidates() -> Set<String> {
        lock.withLock { Set(members.values.filter(\.inSync).map(\.peer)) }
    }

    /// The coordinator published `names` as the sync set: from now on they, and only they, confirm.
    func publish(_ names: Set<String>) {
        lock.withLock { published = names }
        settle()
    }

    /// This member became the leader; what is journaled through `confirmed` counts as confirmed.
    func activate(confirmed: UInt64) {
        lock.withLock {
            self.confirmed = max(self.confirmed, confirmed)
            active = true
            // The last leader's set does not confirm this term's records: a new one is published.
            if published != nil { published = [] }
        }
        settle()
    }

    /// This member is no longer the leader: what still waits is failed (a new leader may not have it).
    func deactivate(because why: String) {
        let waiting: [Waiter] = lock.withLock {
            active = false
            defer { waiters = [] }
            return waiters
        }
        let error = RPCError.replicationTimeout(
            "\(why) before its followers confirmed this change, which is journaled here; retry with the same idempotency key on the current leader: it returns the change's outcome and never applies it twice")
        for waiter in waiting { waiter.done(error) }
    }

    /// A follower subscribed; it is in sync once it acknowledged `durable`.
    func join(_ id: ObjectIdentifier, peer: String, after: UInt64, durable: UInt64) {
        lock.withLock { members[id] = Member(peer: peer, acked: after, inSync: after >= durable, catchUp: durable) }
        settle()
    }

    func leave(_ id: ObjectIdentifier) {
        let left: String? = lock.withLock {
            guard let member = members.removeValue(forKey: id) else { return nil }
            return member.inSync ? member.peer : nil
        }
        if let left { log.warning("synchronous replication: \(left) left the sync set (its connection closed); \(inSyncCount) in sync of \(required) needed") }
    }

    /// A follower acknowledged records through `seq`.
    func acknowledged(_ id: ObjectIdentifier, _ seq: UInt64) {
        let joined: String? = lock.withLock {
            guard var member = members[id], seq > member.acked else { return nil }
            member.acked = seq
            var joined: String?
            if !member.inSync && seq >= member.catchUp {
                member.inSync = true
                joined = member.peer
            }
            members[id] = member
            return joined
        }
        if let joined { log.info("synchronous replication: \(joined) is in sync") }
        settle()
    }

    /// Followers that confirm now: the published set with a coordinator, else those in sync.
    var inSyncCount: Int { lock.withLock { published?.count ?? members.values.reduce(0) { $0 + ($1.inSync ? 1 : 0) } } }

    /// Whether the sync set has confirmed every record through `ticket`.
    func isConfirmed(_ ticket: UInt64) -> Bool { lock.withLock { !active || ticket <= confirmed } }

    /// Whether `id` is in the sync set (for `system.stats`).
    func isInSync(_ id: ObjectIdentifier) -> Bool {
        lock.withLock {
            guard let member = members[id] else { return false }
            return published.map { $0.contains(member.peer) } ?? member.inSync
        }
    }

    /// The refusal a mutation gets while fewer than `required` followers are in sync.
    func refusal() -> RPCError? {
        guard lock.withLock({ active }) else { return nil }
        let count = inSyncCount
        guard count < required else { return nil }
        return .notEnoughReplicas(
            "\(count) follower\(count == 1 ? " is" : "s are") in sync and min_sync_replicas is \(required): the mutation was not applied; retry once followers have caught up (system.stats shows them)")
    }

    /// Calls `done` once `ticket` is confirmed by `required` followers in sync, or with
    /// `replicationTimeout` after `timeout` seconds.
    func wait(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void) {
        let now = lock.withLock { () -> Bool in
            if !active || ticket <= confirmed { return true }
            waiters.append(Waiter(ticket: ticket, deadline: .now() + timeout, done: done))
            return false
        }
        if now { return done(nil) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in expire() }
    }

    /// Recomputes what is confirmed and releases the waiters it covers.
    private func settle() {
        let ready: [Waiter] = lock.withLock {
            if let confirmable = confirmable() { confirmed = max(confirmed, confirmable) }
            guard waiters.contains(where: { $0.ticket <= confirmed }) else { return [] }
            let ready = waiters.filter { $0.ticket <= confirmed }
            waiters.removeAll { $0.ticket <= confirmed }
            return ready
        }
        for waiter in ready { waiter.done(nil) }
    }

    /// What the followers that confirm have all acknowledged (with `lock` held); nil: too few confirm.
    private func confirmable() -> UInt64? {
        guard required > 0 else { return nil }
        guard let published else {
            let acked = members.values.filter(\.inSync).map(\.acked).sorted(by: >)
            return acked.count >= required ? acked[required - 1] : nil
        }
        // Every published member, connected or not: one that is gone stays waited for until the
        // coordinator has published the set without it.
        guard published.count >= required else { return nil }
        var lowest = UInt64.max
        for name in published {
            lowest = min(lowest, members.values.filter { $0.peer == name }.map(\.acked).max() ?? 0)
        }
        return lowest
    }

    /// Fails the waiters past their deadline; the followers that had not confirmed them leave
    /// the sync set until they catch up again.
    private func expire() {
        let now = DispatchTime.now()
        let (expired, dropped, left): ([Waiter], [String], Int) = lock.withLock {
            let expired = waiters.filter { $0.deadline <= now }
            guard let oldest = expired.map(\.ticket).min() else { return ([], [], 0) }
            waiters.removeAll { $0.deadline <= now }
            let head = expired.map(\.ticket).max() ?? oldest
            var dropped: [String] = []
            for (id, member) in members where member.inSync && member.acked < oldest {
                members[id]?.inSync = false
                members[id]?.catchUp = head
                dropped.append(member.peer)
            }
            return (expired, dropped, members.values.filter(\.inSync).count)
        }
        guard !expired.isEmpty else { return }
        for peer in dropped {
            log.warning("synchronous replication: \(peer) did not confirm within sync_timeout (\(ConfigValue.render(seconds: timeout)) s) and leaves the sync set until it catches up; \(left) in sync of \(required) needed")
        }
        let error = RPCError.replicationTimeout(
            "fewer than \(required) follower\(required == 1 ? "" : "s") confirmed within sync_timeout (\(ConfigValue.render(seconds: timeout)) s) the change this reply depends on, which is applied and journaled here; retry a mutation with the same idempotency key (the retry waits for the confirmation and never applies it twice), a read as it is")
        for waiter in expired { waiter.done(error) }
    }
}
