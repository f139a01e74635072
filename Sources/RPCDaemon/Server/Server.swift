import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Wires the transport to the dispatcher: accepts connections, feeds their lines to the
/// dispatcher, sends the counter-requests back in order, and shuts down in stages.
final class Server: ConnectionDelegate, @unchecked Sendable {
    // @unchecked: `connections`, `nextID`, `stopping`, the connection counts, `unauthenticated`,
    // `httpLogged` and the access rules are guarded by `lock`; `lingering` is `acceptQueue`'s; the
    // rest is immutable.
    let dispatcher: Dispatcher
    let log: Logger
    let limits: Connection.Limits
    let loops: EventLoopGroup
    let acceptQueue = DispatchQueue(label: "rpcd.accept")
    private let durability: (any MutationLog)?

    let lock = NSLock()
    var connections: [UInt64: Connection] = [:]
    var nextID: UInt64 = 0
    var stopping = false
    private var listeners: [Listener] = []
    private var onIdleAfterStop: (@Sendable () -> Void)?
    var totalConnections = 0
    var refusedConnections = 0
    /// Refused sockets waiting to be closed (on `acceptQueue` only).
    var lingering = 0

    /// 0 = no limit.
    let maxConnections: Int
    /// Who may do what before authenticating (protected mode, tokens, Unix roles); guarded by `lock`
    /// because SIGHUP may replace it.
    private var accessRules: ConnectionAccess
    var access: ConnectionAccess {
        get { lock.withLock { accessRules } }
        set { lock.withLock { accessRules = newValue } }
    }
    /// Seconds; 0 = never.
    let idleTimeout: Double
    /// Seconds a line may take from its first byte to its end; 0 = never.
    let lineTimeout: Double
    /// Seconds a connection that must authenticate has to; 0 = never.
    let authTimeout: Double
    let tlsHandshakeTimeout: Double
    /// The principal a verified TLS client certificate names (its CN and DNS names), if any.
    let certificatePrincipal: (@Sendable ([String]) -> (name: String, role: RPCRole)?)?
    /// Connections that must authenticate and have not, oldest (lowest id) first; at most
    /// `maxUnauthenticated`, the oldest closed to make room. Guarded by `lock`.
    var unauthenticated: [UInt64] = []
    let maxUnauthenticated: Int
    /// Peer hosts whose HTTP request was logged lately (one line per host, not per request); guarded by `lock`.
    var httpLogged: Set<String> = []
    let startedAt = DispatchTime.now().uptimeNanoseconds
    /// The journal's figures for `system.stats` (nil until there is a journal).
    let journalStats: (@Sendable () -> JournalStats)?
    /// Per-loop connections and counters, by loop identity (immutable after init).
    let loopStates: [LoopState]
    /// Per-loop requests of the read under way, answered when it is done (by loop index).
    let turns: [TurnBatch]

    /// Unfinished lines all peers together may hold before the largest holders are shed.
    static let defaultMaxInputBytes = 256 << 20

    /// The change feed subscribers get (nil: none, e.g. in tests).
    let feed: ReplicationFeed?
    /// `system.stats` `replication` (leader or follower figures).
    var replicationStats: (@Sendable () -> ReplicationStats?)?

    /// Each loop's share of `maxInputBytes`, at least one line of `maxFrameBytes` and the byte a
    /// framer may hold past it; `raised` when that floor, not the even split, set it. The settings'
    /// ranges keep both terms far from overflow (a frame is at most 64 MiB).
    static func inputShare(maxInputBytes: Int, loops: Int, maxFrameBytes: Int) -> (share: Int, raised: Bool) {
        let even = max(1, maxInputBytes / max(1, loops))
        let floor = maxFrameBytes.addingReportingOverflow(2)
        let oneLine = floor.overflow ? Int.max : floor.partialValue
        return even >= oneLine ? (even, false) : (oneLine, true)
    }

    /// Per-connection state kept in `Connection.context`.
    /// Confined to the connection's loop, as `TurnBatch`'s fields are.
    final class SessionBox {
        /// The connection's loop's batch and counters (a connection stays on its loop).
        let turn: TurnBatch
        let stats: LoopState
        /// The fields below, touched only on the owner's queue: see `Confined`.
        private struct Fields {
            var session: Dispatcher.Session = Dispatcher.Session()
            var scratch: [UInt8] = []
            var subscriber: Subscriber?
            var firstLine: Bool = true
            var awaitingAuth: Bool = false
        }
        private let confined: Confined<Fields>

        var session: Dispatcher.Session { _read { yield confined.value.session } _modify { yield &confined.value.session } }
        var scratch: [UInt8] { _read { yield confined.value.scratch } _modify { yield &confined.value.scratch } }
        /// Set once the connection subscribed to the change feed.
        var subscriber: Subscriber? { _read { yield confined.value.subscriber } _modify { yield &confined.value.subscriber } }
        /// No line has come yet (an HTTP request line then gets an HTTP answer).
        var firstLine: Bool { _read { yield confined.value.firstLine } _modify { yield &confined.value.firstLine } }
        /// Must authenticate and has not yet (counted in `Server.unauthenticated`).
        var awaitingAuth: Bool { _read { yield confined.value.awaitingAuth } _modify { yield &confined.value.awaitingAuth } }
        /// The listener's address, for messages that say how to reach it.
        let listener: String

        init(turn: TurnBatch, stats: LoopState, listener: String) {
            self.turn = turn
            self.stats = stats
            self.listener = listener
            confined = Confined(Fields())
        }
    }

    init(
        dispatcher: Dispatcher, durability: (any MutationLog)?, limits: Connection.Limits, loopCount: Int, log: Logger,
        maxConnections: Int = 0, idleTimeout: Double = 0, lineTimeout: Double = 0, authTimeout: Double = 0, tlsHandshakeTimeout: Double = 0,
        maxUnauthenticated: Int = 1024, maxInputBytes: Int = Server.defaultMaxInputBytes,
        access: ConnectionAccess = ConnectionAccess(), journalStats: (@Sendable () -> JournalStats)? = nil,
        feed: ReplicationFeed? = nil, busyPoll: Double = 0,
        certificatePrincipal: (@Sendable ([String]) -> (name: String, role: RPCRole)?)? = nil
    ) throws(Errno) {
        self.accessRules = access
        self.certificatePrincipal = certificatePrincipal
        self.feed = feed
        self.dispatcher = dispatcher
        self.durability = durability
        self.limits = limits
        // A lone loop waits on a thread of its own: one wake-up per idle spell instead of
        // libdispatch's two. Several loops keep libdispatch's hand-off: threads of their own, each
        // woken by every request, preempted the peers and served fewer requests a turn.
        self.loops = try EventLoopGroup(count: loopCount, ownThreads: loopCount <= 1)
        // The daemon-wide budget for unfinished lines, split evenly over the loops (connections
        // are dealt round-robin), so each loop checks its share without a lock. A share always
        // fits one line of `max_frame_bytes` (and the `\r` a framer may hold past it): a peer
        // sending one legitimate line alone is never shed, whatever the loop count.
        let (share, raised) = Self.inputShare(maxInputBytes: maxInputBytes, loops: loops.loops.count, maxFrameBytes: limits.maxFrameBytes)
        for loop in loops.loops {
            loop.inputBudget = share
        }
        if raised {
            log.warning(
                "max_input_bytes (\(maxInputBytes)) split over \(loops.loops.count) event loops leaves less than one line of max_frame_bytes "
                    + "(\(limits.maxFrameBytes)) to each; each loop keeps room for one such line, so unfinished lines may hold up to "
                    + "\(share.multipliedReportingOverflow(by: loops.loops.count).partialValue) bytes in all: raise max_input_bytes or lower max_frame_bytes or event_loops")
        }
        self.log = log
        self.maxConnections = maxConnections
        self.idleTimeout = idleTimeout
        self.lineTimeout = lineTimeout
        self.authTimeout = authTimeout
        self.tlsHandshakeTimeout = tlsHandshakeTimeout
        self.maxUnauthenticated = max(1, maxUnauthenticated)
        self.journalStats = journalStats
        self.loopStates = loops.loops.map { LoopState(loop: $0) }
        self.turns = loops.loops.map { _ in TurnBatch() }
        let timeouts = ConnectionTimeouts(idle: idleTimeout, line: lineTimeout, auth: authTimeout, handshake: tlsHandshakeTimeout)
        for state in loopStates {
            state.startSweep(period: timeouts.sweepPeriod) { [unowned self] connection, now in
                expire(connection, now: now, timeouts: timeouts, state: state)
            }
        }
        for (loop, (turn, state)) in zip(loops.loops, zip(turns, loopStates)) {
            loop.onTurnEnd = { [unowned self] in
                finish(turn, state)
                releaseHeld(turn, state)
            }
            loop.lingers = true
            // Range-checked by the settings; clamped again so no value can trap here.
            loop.busyPollNanoseconds = busyPoll.isFinite ? Int(min(max(busyPoll, 0), 1) * 1e9) : 0
            try loop.onWake { [released = state.released] in released.deliver() }
        }
    }

    /// The addresses listened on, as bound (port 0 resolved), in order.
    var boundAddresses: [SocketAddress] { lock.withLock { listeners.map(\.address) } }

    /// Serves on sockets that are already listening (socket activation). Logs `listening on HOST:PORT` for each.
    /// A socket bound where a `tls:` listen address points (`tlsFor` says) speaks TLS.
    func listen(inherited fds: [Int32], tlsFor: (SocketAddress) -> TLSContextHolder? = { _ in nil }) throws(Errno) {
        for fd in fds {
            let tls = tlsFor(try Syscall.localAddress(fd))
            start(
                try Listener(listening: fd, queue: acceptQueue, onAccept: onAccept(tls: tls), onError: onListenerError),
                note: tls == nil ? " (socket from systemd)" : " (TLS, socket from systemd)")
        }
    }

    /// Binds every address (in order) and starts accepting. Logs `listening on HOST:PORT` for each.
    func listen(on addresses: [(SocketAddress, TLSContextHolder?)]) throws(Errno) {
        for (address, tls) in addresses {
            start(
                try Listener(binding: address, queue: acceptQueue, onAccept: onAccept(tls: tls), onError: onListenerError),
                note: tls == nil ? "" : " (TLS)")
        }
    }

    private func start(_ listener: Listener, note: String) {
        lock.withLock { listeners.append(listener) }
        log.info("listening on \(listener.address)\(note)")
        if case .unix = listener.address { return listener.start() }
        let rules = access
        if rules.tokensConfigured {
            log.info("\(listener.address): peers authenticate with system.auth before anything but system.ping")
        } else if !listener.address.isLoopback {
            let which = listener.address.isWildcard ? "every interface" : "a non-loopback address"
            if rules.protectedMode {
                log.warning("\(listener.address) is \(which) and there is no auth_file: protected mode serves loopback peers only and refuses the rest; set auth_file to admit them with tokens")
            } else {
                log.warning("\(listener.address) is \(which), with protected_mode = no and no auth_file: anyone who can reach it can call every method, including mutations")
            }
        }
        listener.start()
    }

    private func onAccept(tls: TLSContextHolder?) -> @Sendable (Int32, SocketAddress?, SocketAddress) -> Void {
        { [unowned self] fd, peer, listener in self.accepted(fd, peer: peer, on: listener, tls: tls?.current) }
    }

    private var onListenerError: @Sendable (String) -> Void {
        { [log] message in log.warning(key: "listener", message) }
    }

    func loopState(_ connection: Connection) -> LoopState {
        // Every connection's loop comes from `loops`, which `loopStates` was built from, in order.
        loopStates[connection.loop.index]
    }

    // MARK: - ConnectionDelegate (on the connection's loop queue)

    func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
        guard let box = connection.context as? SessionBox else { return }
        receive(line, on: connection, box: box, turn: box.turn, stats: box.stats)
    }

    private func receive(_ line: UnsafeRawBufferPointer, on connection: Connection, box: SessionBox, turn: TurnBatch, stats: LoopState) {
        let first = box.firstLine
        if first { box.firstLine = false }
        // A request starts with `{`; only a line that starts with a letter can be another protocol's.
        if let byte = line.first, byte >= 0x41, CrossProtocol.isHTTP(line) {
            return refuseHTTP(line, first: first, on: connection, box: box, turn: turn, stats: stats)
        }
        box.scratch.removeAllIfAny(keepingCapacity: true)
        let mark = turn.staged.count
        let disposition: Dispatcher.Disposition
        let requestID: String
        switch dispatcher.admit(line, subscriber: box.subscriber != nil, session: &box.session, into: &turn.staged, calls: &turn.calls) {
        case .call(let id, let method, let form):
            turn.add(.init(connection: connection, method: method, id: id, form: form, kind: .call))
            if turn.isFull || !connection.loop.inTurn { finish(turn, stats) }
            return
        case .answered(let served, let id, let method, let form):
            let kind = TurnBatch.Kind.answered(served, mark..<turn.staged.count)
            turn.add(.init(connection: connection, method: method ?? LoopState.invalidLine, id: id, form: form, kind: kind))
            if turn.isFull || !connection.loop.inTurn { finish(turn, stats) }
            return
        case .acknowledged(let seq):
            box.subscriber?.acknowledged(seq)
            return
        case .none:
            return
        case .service(let request):
            // Answered now, so the turn's earlier requests first (their replies come first).
            finish(turn, stats)
            let served = dispatcher.serveService(request, session: &box.session, into: &box.scratch)
            if box.awaitingAuth && box.session.role != nil { stopAwaitingAuth(connection, box: box) }
            disposition = served.disposition
            requestID = request.id
            stats.count(request.method, failed: served.failed)
        }
        switch disposition {
        case .none:
            break
        case .reply:
            box.scratch.withUnsafeBytes { send($0, id: requestID, form: box.session.form ?? .canonical, on: connection) }
        case .replyAfter(let ticket, let id):
            box.scratch.withUnsafeBytes { turn.held.hold($0, for: connection, id: id, form: box.session.form ?? .canonical, after: ticket) }
            settleHeld(turn, stats)
        case .replyLater(let start):
            let slot = connection.reserve()
            start { line in connection.queue.async { connection.fill(slot, with: line) } }
        }
        if let start = box.session.feed, box.subscriber == nil, feed != nil { startFeed(start, on: connection, box: box) }
        if box.session.closeAfterReply {
            connection.closeAfterFlush(.closedByServer("closed after \(box.session.authFailures) failed system.auth calls"))
        }
    }

    /// Starts the change feed on a connection that subscribed (after its `subscribeResult`).
    private func startFeed(_ start: Session.FeedStart, on connection: Connection, box: SessionBox) {
        guard let feed else { return }
        let subscriber = Subscriber(
            connection: connection, peer: box.session.peer, form: box.session.form ?? .canonical, after: start.after,
            snapshotFirst: start.snapshotFirst, replica: start.replica, member: start.member, feed: feed)
        box.subscriber = subscriber
        connection.notifiesDrain = true
        connection.exemptFromIdleTimeout = true
        feed.add(subscriber)
        log.info("replication: \(box.session.peer) subscribed from sequence \(start.after)\(start.snapshotFirst ? " (snapshot first)" : "")")
        subscriber.pump()
    }

    func connectionDidDrain(_ connection: Connection) {
        (connection.context as? SessionBox)?.subscriber?.pump()
    }

    /// Answers a batch (a read's requests): runs its calls under one hold of the state lock (a
    /// bounded amount of reply bytes at a time), sends every reply in the order its request came,
    /// and has the mutations wait for the journal with one waiter. On the loop's queue.
    func finish(_ turn: TurnBatch, _ stats: LoopState) {
        guard !turn.isEmpty else { return }
        var nextCall = 0
        var index = 0
        // Entries and reply bytes are read in place: copying an entry out retained its
        // connection and its three strings, and a slice of a buffer retained the buffer, each
        // released again, for every request (~10% of a get's instructions were such counting).
        turn.entries.withUnsafeBufferPointer { entries in
            while index < entries.count {
                turn.out.removeAllIfAny(keepingCapacity: true)
                turn.outcomes.removeAllIfAny(keepingCapacity: true)
                if nextCall < turn.calls.count {
                    // The journal's writer starts when the held replies are released (`releaseHeld`):
                    // every logged mutation holds its reply.
                    dispatcher.run(
                        turn.calls[nextCall...], into: &turn.out, outcomes: &turn.outcomes, maxBytes: TurnBatch.maxReplyBytes, startingLog: false)
                }
                turn.out.withUnsafeBytes { out in
                    turn.staged.withUnsafeBytes { staged in
                        deliver(entries, from: &index, calls: &nextCall, turn: turn, out: out, staged: staged, stats: stats, held: &turn.held)
                    }
                }
            }
        }
        settleHeld(turn, stats)
        turn.reset { $0.endDeferredReplies() }
    }

    /// After replies were held for the journal: the turn gathers more requests rather than
    /// lingering, and the held replies are released at the end of its pass over the ready
    /// connections (`onTurnEnd`), for all the reads of the pass at once; now if no turn is under
    /// way, or once they pass a bound.
    private func settleHeld(_ turn: TurnBatch, _ stats: LoopState) {
        guard !turn.held.items.isEmpty else { return }
        // Requests that arrive meanwhile are better read in one turn (more mutations per fsync)
        // than one by one as they come.
        stats.loop.lingerDeclined = true
        if !stats.loop.inTurn || turn.held.replies.count >= TurnBatch.maxReplyBytes { releaseHeld(turn, stats) }
    }

    /// Has the journal release the replies held so far (`TurnBatch.held`) once they are durable.
    ///
    /// One waiter for every read of a turn's pass, not one a read: at durable creates 50 × 1 a
    /// read holds one reply, and each waiter cost its closure, its two arrays, the released
    /// list's lock and an entry in the wake's batch.
    private func releaseHeld(_ turn: TurnBatch, _ stats: LoopState) {
        guard !turn.held.items.isEmpty else { return }
        let held = turn.held
        turn.held = HeldTurn()
        // Tickets grow with the journal: the last is durable only after every earlier one.
        release(held.items, in: held.replies, after: held.ticket, to: stats.released)
        // The journal's writer, if idle, starts now, with every mutation of the pass: started at
        // the pass's first mutation (as `Dispatcher.run` does by default), it wrote and synced
        // that one alone while the rest of the pass queued behind it for the next fsync.
        durability?.recorded()
    }

    /// Sends (or holds, for the journal) the replies of `entries` from `index` on, in order, until
    /// a staged call's reply is not among the `outcomes` of the last run; advances `index`, and
    /// `calls` by the calls delivered. `out` and `staged`: the turn's reply bytes, read in place.
    private func deliver(
        _ entries: UnsafeBufferPointer<TurnBatch.Entry>, from index: inout Int, calls: inout Int, turn: TurnBatch,
        out: UnsafeRawBufferPointer, staged: UnsafeRawBufferPointer, stats: LoopState, held: inout HeldTurn
    ) {
        var ran = 0
        var start = 0
        while index < entries.count {
            let entry = entries.baseAddress.unsafelyUnwrapped + index
            let served: Dispatcher.Served
            let reply: UnsafeRawBufferPointer
            switch entry.pointee.kind {
            case .answered(let answered, let range):
                served = answered
                reply = UnsafeRawBufferPointer(rebasing: staged[range])
            case .call:
                guard ran < turn.outcomes.count else { return }
                let end = turn.outcomes[ran].end
                served = turn.outcomes[ran].served
                reply = UnsafeRawBufferPointer(rebasing: out[start..<end])
                start = end
                ran += 1
                calls += 1
            }
            index += 1
            stats.count(served.known ? entry.pointee.method : LoopState.unknownMethod, failed: served.failed)
            switch served.disposition {
            case .reply:
                send(reply, id: entry.pointee.id, form: entry.pointee.form, on: entry.pointee.connection)
                entry.pointee.connection.flushIfLarge()
            case .replyAfter(let ticket, let id):
                held.hold(reply, for: entry.pointee.connection, id: id, form: entry.pointee.form, after: ticket)
            case .none, .replyLater:
                break  // not from a staged request
            }
        }
    }

    /// Fills each reply's slot once `ticket` is durable, or, if it never can be, with an error
    /// saying the change may be lost.
    private func release(_ waiting: [HeldReply], in replies: [UInt8], after ticket: UInt64, to released: ReleasedReplies) {
        durability?.whenConfirmed(ticket) { failure in
            // The whole turn's replies under one hold of the loop's lock, not one each.
            guard let failure else { return released.add(replies, waiting) }
            var errors: [UInt8] = []
            let failed = waiting.map { item in
                let start = errors.count
                RequestCodec.encodeError(id: item.id, failure, form: item.form, into: &errors)
                return HeldReply(connection: item.connection, slot: item.slot, reply: start..<errors.count, id: item.id, form: item.form)
            }
            released.add(errors, failed)
        }
    }

    /// Sends a reply, or, when it alone is past the output cap, an error that says to page: a
    /// reader always gets its one reply, and the connection stays open.
    private func send(_ reply: UnsafeRawBufferPointer, id: String, form: WireForm, on connection: Connection) {
        let cap = connection.limits.maxOutputBytes
        guard reply.count > cap else { return connection.send { $0.append(contentsOf: reply) } }
        connection.send { out in
            RequestCodec.encodeError(
                id: id, .replyTooLarge("the reply is \(reply.count) bytes, over this daemon's \(cap)-byte output cap (max_output_bytes); ask for less, e.g. list with a smaller \"limit\" and page with \"after\""),
                form: form, into: &out)
        }
        log.warning("connection \(connection.id): a reply of \(reply.count) bytes passed the output cap (\(cap)); sent replyTooLarge instead")
    }

    func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {
        guard let box = connection.context as? SessionBox else { return }
        finish(turns[connection.loop.index], loopState(connection))  // the replies to earlier lines first
        let limit = connection.limits.maxFrameBytes
        connection.send { out in
            RequestCodec.encodeError(
                id: "", .frameTooLarge("line of \(length)+ bytes exceeds the \(limit)-byte limit; it was discarded, send smaller requests"),
                form: box.session.form ?? .canonical, into: &out)
        }
        log.warning(key: "oversize", "connection \(connection.id): discarded a line over \(limit) bytes")
    }

    func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {
        loopState(connection).remove(connection)
        if let box = connection.context as? SessionBox, box.awaitingAuth {
            box.awaitingAuth = false
            lock.withLock { removeUnauthenticated(connection.id) }
        }
        if let subscriber = (connection.context as? SessionBox)?.subscriber {
            feed?.remove(subscriber)
            log.info("replication: subscriber \(subscriber.peer) left (\(reason))")
        }
        let peer = (connection.context as? SessionBox)?.session.peer ?? connection.peer.map { "\($0)" } ?? "?"
        switch reason {
        case .finished, .peerReset:
            // The peer's doing: it finished, or reset (a peer may leave with its replies unread).
            log.debug("connection \(connection.id) from \(peer) closed: \(reason)")
        case .error, .outputOverflow, .closedByServer, .shed:
            // Ours: always said (a close with the peer's requests unread reaches it as a reset),
            // rate-limited per kind of close.
            log.warning(key: Self.closeKey(reason), "connection \(connection.id) from \(peer) closed by rpcd: \(reason)")
        }
        let idle: (@Sendable () -> Void)? = lock.withLock {
            connections[connection.id] = nil
            return stopping && connections.isEmpty ? onIdleAfterStop : nil
        }
        idle?()
    }

    /// The rate-limit key of a close: one per kind of close, never per connection.
    private static func closeKey(_ reason: Connection.CloseReason) -> String {
        switch reason {
        case .finished, .peerReset: return "closed-by-peer"
        case .error: return "closed-error"
        case .outputOverflow: return "closed-output-cap"
        case .closedByServer: return "closed-by-server"
        case .shed: return "closed-input-budget"
        }
    }

    /// Closes the connections authenticated as any of `principals` (removed from the auth file).
    func close(principals: Set<String>) {
        guard !principals.isEmpty else { return }
        let open = lock.withLock { Array(connections.values) }
        for connection in open {
            connection.queue.async { [log] in
                guard let box = connection.context as? SessionBox, let name = box.session.principal,
                    principals.contains(where: { $0.utf8.elementsEqual(name.utf8) })
                else { return }
                log.info("connection \(connection.id): closing, principal \"\(name)\" was removed from the auth file")
                connection.closeAfterFlush(.closedByServer("principal \"\(name)\" was removed"))
            }
        }
    }

    // MARK: - Shutdown

    /// Stops accepting, lets every connection send what it owes and close; calls `done` when all
    /// are closed or after `grace`, whichever comes first.
    func stop(grace: DispatchTimeInterval, done: @escaping @Sendable () -> Void) {
        let once = Once(done)
        let listeners = lock.withLock {
            stopping = true
            return self.listeners
        }
        for listener in listeners { listener.close() }
        acceptQueue.sync {}  // the closes ran: no socket file outlives a quick exit
        for state in loopStates { state.stopSweep() }
        // Armed only now: a connection closing meanwhile must not let `done` exit before the
        // listeners closed (and left the socket file behind).
        let open: [Connection] = lock.withLock {
            onIdleAfterStop = { once.run() }
            return Array(connections.values)
        }
        if open.isEmpty { once.run() }
        for connection in open { connection.finish() }
        DispatchQueue.global().asyncAfter(deadline: .now() + grace) { [self] in
            let stuck = lock.withLock { Array(connections.values) }
            if !stuck.isEmpty { log.warning("closing \(stuck.count) connections that did not finish in time") }
            for connection in stuck {
                connection.queue.async { connection.close(.closedByServer("shutdown")) }
            }
            once.run()
        }
    }

    // MARK: - The system entity

    var uptime: Double { Double(DispatchTime.now().uptimeNanoseconds &- startedAt) / 1e9 }

    /// Adds up every loop's figures (visiting each loop queue) and the connection counts.
    func collectStats(_ done: @escaping @Sendable (StatsResult) -> Void) {
        collect(loopStates) { [self] snapshot in
            let connections = lock.withLock {
                ConnectionStats(current: self.connections.count, total: totalConnections, refused: refusedConnections, idleClosed: 0)
            }
            var result = StatsReport.stats(snapshot, connections: connections, uptime: uptime, journal: journalStats?() ?? JournalStats())
            (result.idempotency, result.state) = dispatcher.withState {
                (
                    KeyStats(keys: $0.keys.count, hits: $0.keys.hits, evictions: $0.keys.evictions),
                    StateStats(
                        users: $0.users.count, buildings: $0.buildings.count, overlaid: $0.users.overlaid + $0.buildings.overlaid,
                        entities: $0.registeredCounts)
                )
            }
            result.replication = replicationStats?()
            done(result)
        }
    }
}

/// Runs a closure at most once, from any thread.
final class Once: @unchecked Sendable {
    // @unchecked: `body` is taken under `lock`.
    private let lock = NSLock()
    private var body: (@Sendable () -> Void)?
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    func run() {
        let body: (@Sendable () -> Void)? = lock.withLock {
            defer { self.body = nil }
            return self.body
        }
        body?()
    }
}
