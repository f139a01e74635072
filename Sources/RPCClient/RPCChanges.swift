import RPCSchema

/// A leader's change feed as typed changes: `client.changes(from: seq)`.
///
/// ```swift
/// let client = try await RPCClient.connect(to: "127.0.0.1:7878")   // a client of its own
/// for try await event in client.changes(from: mirror.sequence, snapshot: true) {
///     let change = event.change
///     if change.snapshotBegin != nil { mirror.removeAll() }
///     if let user = change.as(CreateUser.self) { mirror.users[user.id] = User(id: user.id, name: user.name, email: user.email) }
///     if let delete = change.as(DeleteUser.self) { mirror.users[delete.userId] = nil }
///     if change.snapshotEnd != nil { mirror.sequence = event.sequence }
///     if !event.isSnapshotRecord { mirror.sequence = event.sequence }
/// }   // acknowledged: each change once the loop asks for the next one
/// ```
///
/// - **Subscribing.** The first `next()` sends `replication.subscribe {fromSequence, snapshot}`.
///   The daemon's refusal is thrown as `RPCClientError.server`: `snapshotRequired` when
///   `fromSequence` is older than its journal and `snapshot` is false, `invalidParams` when
///   `fromSequence` is ahead of it or the client is already subscribed, `forbidden` without the
///   `replicate` role. The client stays usable after a refusal.
/// - **Order.** Changes come in journal order, each with its `sequence`; nothing after
///   `fromSequence` is skipped (without `fromSequence`, the feed starts with the changes after
///   the subscription). With `snapshot: true` and a `fromSequence` below the leader's snapshot,
///   the feed starts with `snapshotBegin`, the snapshot's records (`isSnapshotRecord`, each
///   with the snapshot's sequence), `snapshotEnd`, then the changes after the snapshot.
/// - **Acknowledgement.** When the loop asks for the next change (its body returned), the client
///   acknowledges the previous one with the counter-request the protocol expects, e.g.
///   `{"id":"r42","method":"user.createUserResult","param":{}}`. Its param is always `{}`: the
///   leader reads only the id, and the daemon's own reply would need the mirror's state. The
///   change during which the loop ended (`break`, a throw) is not acknowledged; snapshot lines
///   never are. The leader's `system.stats` shows what was acknowledged.
/// - **Backpressure.** At most about `bufferLimit` changes wait for the loop; when they do, the
///   client stops reading (the leader's sends wait in TCP, and a leader feeds a slow subscriber
///   from its journal files) until the loop has taken half of them. While a call on the same
///   client waits for its reply, the client reads on regardless, so the loop body may call the
///   daemon: `try await client.call(GetBuilding(…))` does not deadlock on a full buffer.
/// - **Ending.** The wire has no unsubscribe: a subscription lasts as long as its connection. So
///   when the loop ends (`break`, a throw from its body, the task cancelled), the client is
///   **closed**; give the feed a client of its own. Cancelling the task while the loop waits
///   throws `.cancelled`. When the connection is lost, the changes already read are still
///   yielded, then the loop throws `.connectionClosed`; the client is left as it is (with a
///   reconnect policy, it connects again for the next call), so `changes(from:)` again from
///   the last sequence processed resumes the feed.
/// - One subscription per client at a time: it takes every request the daemon sends (instead of
///   `handlers`). Each `makeAsyncIterator()` subscribes anew.
public struct RPCChanges: AsyncSequence, Sendable {
    public typealias Element = RPCChangeEvent

    let client: RPCClient
    let fromSequence: Int?
    let snapshot: Bool
    let bufferLimit: Int

    public func makeAsyncIterator() -> Iterator {
        Iterator(subscription: FeedSubscription(client: client, fromSequence: fromSequence, snapshot: snapshot, bufferLimit: bufferLimit))
    }

    public struct Iterator: AsyncIteratorProtocol, Sendable {
        let subscription: FeedSubscription

        /// The next change; nil only after the sequence threw.
        public func next() async throws -> RPCChangeEvent? {
            try await subscription.next()
        }
    }
}

/// One iteration of `RPCChanges`: subscribes on the first `next()`, acknowledges each change on
/// the following one, and closes the client when the iteration is dropped while subscribed.
final class FeedSubscription: @unchecked Sendable {
    // @unchecked: `phase`, `unacknowledged`, `snapshotSequence` and `lastSequence` are touched
    // only by `next()`, which an iterator's single consumer never calls concurrently; `buffer`
    // is locked.
    enum Phase {
        case notSubscribed
        /// `id` is the subscribe call's.
        case subscribed(id: String)
        /// Thrown once; `next()` returns nil from then on.
        case over
    }

    let client: RPCClient
    let fromSequence: Int?
    let snapshot: Bool
    let buffer: FeedBuffer
    private var phase = Phase.notSubscribed
    /// The last change yielded, until the next `next()` acknowledges it.
    private var unacknowledged: Request?
    /// Between `snapshotBegin` and `snapshotEnd`: the snapshot's sequence.
    private var snapshotSequence: Int?
    private var lastSequence = 0

    init(client: RPCClient, fromSequence: Int?, snapshot: Bool, bufferLimit: Int) {
        self.client = client
        self.fromSequence = fromSequence
        self.snapshot = snapshot
        lastSequence = fromSequence ?? 0
        buffer = FeedBuffer(limit: bufferLimit, resumeFeed: { [client] in client.resumeFeed() })
    }

    deinit {
        // Dropped while subscribed (break, a throw in the loop body): no unsubscribe on the wire.
        if case .subscribed = phase { client.core.closeAfterFlush() }
    }

    func next() async throws -> RPCChangeEvent? {
        let id: String
        switch phase {
        case .over:
            return nil
        case .notSubscribed:
            id = try await subscribe()
        case .subscribed(let current):
            id = current
            acknowledge()
        }
        let request: Request
        do {
            if Task.isCancelled { throw RPCClientError.cancelled(method: ReplicationSubscribe.method, id: id) }
            request = try await buffer.take(cancelled: .cancelled(method: ReplicationSubscribe.method, id: id))
        } catch {
            phase = .over
            client.core.setFeed(nil, onLost: nil)
            if case RPCClientError.cancelled = error { client.core.closeAfterFlush() }
            throw error
        }
        return event(request)
    }

    /// Installs the feed handler, then subscribes; returns the subscribe call's id.
    private func subscribe() async throws -> String {
        let buffer = self.buffer
        let address = client.address
        client.onFeed({ request, _ in buffer.offer(request) }) { why in
            buffer.fail(.connectionClosed(address: address, method: nil, id: nil, reason: "the change feed's connection was lost: \(why)"))
        }
        do {
            let param = try JSONValueEncoder().encode(ReplicationSubscribe(fromSequence: fromSequence, snapshot: snapshot ? true : nil))
            let reply = try await client.send(ReplicationSubscribe.method, param: param)
            _ = try RPCClient.reply(ReplicationSubscribe.self)(reply).get()
            phase = .subscribed(id: reply.id)
            return reply.id
        } catch {
            phase = .over
            client.core.setFeed(nil, onLost: nil)
            // Refused: not subscribed, the client stays usable. Anything else (cancelled, timed
            // out, lost): the daemon may have subscribed it, and only closing ends that.
            if case RPCClientError.server = error {} else { client.close() }
            throw error
        }
    }

    /// Sends the acknowledgement of the change yielded last, if it needs one.
    private func acknowledge() {
        guard let request = unacknowledged else { return }
        unacknowledged = nil
        var line: [UInt8] = []
        RequestCodec.encode(id: request.id, method: request.method.result, param: .object(JSONObject()), form: request.form, into: &line)
        client.sendCounterRequest(line)
    }

    private func event(_ request: Request) -> RPCChangeEvent {
        let change = RPCChange(request)
        var event = RPCChangeEvent(sequence: lastSequence, change: change, key: request.key)
        if let begin = change.snapshotBegin {
            snapshotSequence = begin.sequence
            event.sequence = begin.sequence
        } else if let end = change.snapshotEnd {
            snapshotSequence = nil
            event.sequence = end.sequence
        } else if let sequence = Self.sequence(ofFeedID: request.id) {
            event.sequence = sequence
            unacknowledged = request
        } else if request.id == "s" {
            event.sequence = snapshotSequence ?? lastSequence
            event.isSnapshotRecord = true
        }
        lastSequence = event.sequence
        return event
    }

    /// 42 for the feed's id `"r42"`.
    static func sequence(ofFeedID id: String) -> Int? {
        guard id.first == "r", let sequence = Int(id.dropFirst()), sequence > 0, !id.dropFirst().hasPrefix("+") else { return nil }
        return sequence
    }
}
