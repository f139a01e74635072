import Dispatch
import Foundation
import RPCClient
import RPCEntities
import RPCSchema
import RPCTransport

/// `rpcd serve --follow HOST:PORT`: mirrors a leader. It connects with the package's `RPCClient`,
/// subscribes to the leader's change feed from its own last sequence number (a snapshot allowed),
/// applies each mutation through the dispatcher's method table, journals it under the leader's
/// sequence number, and acknowledges it (the ordinary `…Result` counter-request) once its own
/// journal has it, per its `--fsync` policy.
///
/// Records are applied in order on the follower's queue, as their bytes: the lines of a read are
/// kept together, applied under one hold of the state lock as a restart replays them, journaled
/// as they came, and acknowledged once for the lot. At the leader's pace (a read of one batch or
/// so) the reading thread writes, syncs and acknowledges them itself; a backlog goes to the
/// journal's writer, whose fsync overlaps the next read's apply. A record that does not follow
/// the last one (a gap) or does not apply (divergence) stops following with a logged reason,
/// never a silent skip. The queue holds at most `maxInbox` entries and `maxInboxBytes` of lines:
/// past that the client stops reading and the leader's sends wait in TCP (the leader then feeds
/// from its files).
final class Follower: @unchecked Sendable {
    // @unchecked: the vars marked "guarded" are guarded by `lock`; the ones marked "queue only" are
    // touched on `queue`.
    /// The leader followed now: the configured one, or, once that one could not be reached,
    /// the leader it was itself following (the chain's next link up).
    var leader: String { targetLock.withLock { target } }
    private let targetLock = NSLock()
    private var target: String
    private let credentials: RPCCredentials?
    private let dispatcher: Dispatcher
    private let journal: Journal
    private let log: Logger
    /// Sets the idempotency bounds on a state received in a snapshot.
    private let configureKeys: @Sendable (inout Entities) -> Void
    private let queue = DispatchQueue(label: "rpcd.follower")
    static let maxInbox = 1024
    static let maxInboxBytes = 4 << 20
    /// Lines kept in one inbox entry, at most (about): a pass applies an entry whole.
    static let maxEntryBytes = 256 << 10

    /// What the leader sent, in order: a request (with its journal bytes when the line was a
    /// sealed record), or a run of record lines as their bytes, each with its `\n`: the feed's
    /// records, or its snapshot's.
    private struct Incoming {
        var request: Request?
        var body: JournalRecord.Body?
        var lines: [UInt8] = []
        var snapshot = false
    }

    private let lock = NSLock()
    // Guarded.
    /// What the leader sent, not yet handled.
    private var inbox: [Incoming] = []
    /// Entries before `inboxHead` are handled.
    private var inboxHead = 0
    /// Entries before `inboxTaken` were handed to a pass: lines are never added to them.
    private var inboxTaken = 0
    /// Bytes of record lines in the inbox.
    private var inboxBytes = 0
    /// A pass is under way, or handed to the queue.
    private var draining = false
    private var readingPaused = false
    private var client: RPCClient?
    /// Ends the wait for the current connection's loss.
    private var lostSignal: AsyncStream<String>.Continuation?
    private var connected = false
    private var stopped: String?
    private var applied: UInt64
    /// The newest sequence known anywhere up the chain: the leader's at subscribe, its records as
    /// they arrive, and what it says of the chain above it; nil until the leader was reached.
    private var leaderSequence: UInt64?
    /// The newest record received since the last subscribe (guarded by `lock`).
    private var newestReceived: UInt64?
    /// Where the chain above the leader is broken (a daemon there lost its own leader), while connected.
    private var chainBreak: String?
    /// The leader's own leader, when it is a follower (from `replication.position`).
    private var upstream: String?
    /// Why the last try to follow failed (shown while not connected).
    private var lastFailure: String?

    // Queue only.
    private var incoming: (replay: JournalReplay, seq: UInt64, records: Int)?
    /// The last record applied (published to `applied` once per pass).
    private var appliedHere: UInt64
    /// The last record of this pass (one acknowledgement says the leader's records up to it are
    /// here), the journal ticket it waits for, a reply's bytes.
    private var ackThrough: (seq: UInt64, method: RPCMethod)?
    private var acksTicket: UInt64?
    /// Applies record lines (`Dispatcher.applyReplicated(lines:…)`); holds no state between passes.
    private var applier = JournalReplay()
    private var scratch: [UInt8] = []
    /// A record is waiting (the journal is behind, or a snapshot is being installed).
    private var blocked = false
    /// The pass under way runs in the client's read turn (`readEnded`), on its queue.
    private var inReadTurn = false
    /// A pass in a read turn with at most this much of lines writes its records itself
    /// (`Journal.endInlinePass`): the leader's pace. A larger one, a backlog, leaves them to the
    /// writer, whose fsync then overlaps the next pass's apply (catch-up ran at two thirds of its
    /// speed with each pass's fsync on the reading thread).
    static let inlinePassBytes = 32 << 10

    /// TLS to a `tls:HOST:PORT` leader: its certificate verified before the token is sent (a
    /// leader at a plain `HOST:PORT` is followed over TCP).
    private let tls: RPCTLSOptions?
    /// This daemon's name in a coordinated cluster, sent when it subscribes.
    private let member: String?
    /// Where this daemon's history began; a copy of the leader's takes the leader's.
    private let origin: HistoryOrigin?

    init(
        leader: String, credentials: RPCCredentials?, tls: RPCTLSOptions? = nil, member: String? = nil, origin: HistoryOrigin? = nil,
        dispatcher: Dispatcher, journal: Journal, log: Logger, configureKeys: @escaping @Sendable (inout Entities) -> Void
    ) {
        self.target = leader
        self.member = member
        self.origin = origin
        self.credentials = credentials
        self.tls = tls
        self.dispatcher = dispatcher
        self.journal = journal
        self.log = log
        self.configureKeys = configureKeys
        let start = journal.sequences.durable
        self.applied = start
        self.appliedHere = start
    }

    /// Refuses client mutations from now on and starts following (reconnecting with backoff).
    func start() {
        dispatcher.setReadOnly(
            "this daemon follows the leader at \(leader) and serves reads only; send mutations to the leader at \(leader)")
        Task { await self.run() }
    }

    /// `sequence` is what the journal holds (durable, per `--fsync`), not merely applied: after a
    /// kill -9 the follower comes back at least there, so it is the figure to compare in a failover.
    var stats: ReplicationStats {
        let durable = journal.sequences.durable
        return lock.withLock {
            var stats = ReplicationStats(
                role: "follower", sequence: Int(clamping: durable), leader: leader, connected: connected,
                leaderSequence: leaderSequence.map { Int(clamping: $0) },
                lagRecords: leaderSequence.map { Int(clamping: $0 > durable ? $0 - durable : 0) })
            stats.state = state
            stats.reason = connected ? nil : stopped ?? lastFailure
            stats.chain = connected ? chainBreak : nil
            return stats
        }
    }

    /// `replication.position` for this daemon's own followers.
    var position: PositionResult {
        let stats = self.stats
        return PositionResult(
            role: "follower", sequence: stats.sequence, newestSequence: max(stats.sequence, stats.leaderSequence ?? 0),
            leader: leader, connected: stats.connected, reason: stats.reason, chain: stats.chain)
    }

    /// With `lock` held.
    private var state: String {
        stopped != nil ? "stopped" : connected ? "connected" : leaderSequence == nil ? "never reached the leader" : "reconnecting"
    }

    /// `follower of HOST:PORT, seq N, lag M` for systemd's STATUS= line.
    var summary: String {
        let figures = stats
        let lag = figures.lagRecords.map { ", lag \($0)" } ?? ""
        return "follower of \(leader) (\(figures.state ?? "?")), seq \(figures.sequence)\(lag)"
    }

    /// What `replication.position` of the leader says about the chain above it.
    static func chainBreak(above leader: String, _ position: PositionResult) -> String? {
        guard position.role == "follower", let upstream = position.leader else { return nil }
        guard position.connected == true else {
            return "\(leader) has lost its own leader \(upstream)" + (position.reason.map { " (\($0))" } ?? "")
        }
        return position.chain
    }

    /// Asks the leader where it stands about once a second while `client` is the connection.
    private func watchPosition(_ client: RPCClient) async {
        while true {
            try? await Task.sleep(for: .seconds(1))
            guard lock.withLock({ self.client === client && stopped == nil }) else { return }
            do {
                let position = try await client.call(ReplicationPosition(), timeout: .seconds(5))
                let above = leader
                lock.withLock {
                    guard self.client === client else { return }
                    leaderSequence = max(leaderSequence ?? 0, UInt64(clamping: position.newestSequence))
                    chainBreak = Self.chainBreak(above: above, position)
                    upstream = position.role == "follower" ? position.leader : nil
                }
            } catch let error as RPCClientError where error.code == .methodNotFound {
                return  // a leader older than `replication.position`: its subscribe figures only
            } catch {
                continue
            }
        }
    }

    // MARK: - The connection

    private func run() async {
        var attempt = 0
        var unreachable = 0
        while lock.withLock({ stopped == nil }) {
            let leader = self.leader
            var options = RPCClientOptions()
            options.credentials = credentials
            options.tls = leader.hasPrefix(TLSSettings.listenPrefix) ? tls : nil
            options.connectTimeout = .seconds(5)
            options.readsOnOwnThread = true
            // Whatever line the leader's frame limit lets through (the framer holds at most one).
            options.maxFrameBytes = SettingRanges.maxFrameBytes.upperBound
            do {
                let client = try await RPCClient.connect(to: leader, options: options)
                let (lost, signal) = AsyncStream<String>.makeStream()
                client.onFeed(
                    { [self] request, line in receive(request, line: line) }, lines: { [self] line in receiveRecord(line) },
                    afterRead: { [self] in readEnded() }, onLost: { why in signal.yield(why) })
                let from = lock.withLock {
                    self.client = client
                    lostSignal = signal
                    newestReceived = nil
                    return applied
                }
                let marks = dispatcher.withState { $0.terms.marks }
                let result: SubscribeResult
                do {
                    result = try await client.call(
                        ReplicationSubscribe(fromSequence: Int(clamping: from), snapshot: true, terms: marks, member: member, origin: origin?.value),
                        timeout: .seconds(30))
                } catch let error as RPCClientError where error.code == .invalidParams && error.errorMessage.contains(#"unknown field "terms""#) {
                    // A leader from before terms: it cannot compare histories, so subscribe as before.
                    result = try await client.call(ReplicationSubscribe(fromSequence: Int(clamping: from), snapshot: true), timeout: .seconds(30))
                }
                if let rewindTo = result.rewindTo {
                    // The histories part after `rewindTo`: no feed started. Cut ours, or stop.
                    lock.withLock {
                        self.client = nil
                        lostSignal = nil
                    }
                    client.close()
                    guard await rewind(to: UInt64(clamping: max(0, rewindTo)), from: from, leaderTerm: result) else { return }
                    attempt = 0
                    continue
                }
                // A history copied from the start (or one whose origin was not known) is the leader's.
                if let theirs = result.origin, from == 0 || origin?.value == nil {
                    do {
                        try origin?.adopt(theirs)
                    } catch {
                        log.warning("cannot write \(origin?.path ?? "ORIGIN"): \(error); fix the data directory's permissions")
                    }
                }
                lock.withLock {
                    connected = true
                    lastFailure = nil
                    // Records may have come before the answer was read: never below what they said.
                    leaderSequence = max(newestReceived ?? 0, UInt64(clamping: result.sequence))
                }
                unreachable = 0
                log.info("following \(leader) from sequence \(from) (the leader is at \(result.sequence))")
                Task { await self.watchPosition(client) }
                var why = "the connection closed"
                for await reason in lost {
                    why = reason
                    break
                }
                lock.withLock {
                    connected = false
                    self.client = nil
                    lostSignal = nil
                    chainBreak = nil
                }
                client.close()
                if lock.withLock({ stopped != nil }) { return }
                // The backoff starts over only after progress: a leader that drops the follower
                // right after each subscribe is retried less and less often, not ten times a second.
                let progressed = lock.withLock { applied > from }
                if progressed { attempt = 0 }
                lock.withLock { lastFailure = why }
                log.warning(key: "follow", "lost the leader \(leader): \(why); reconnecting")
            } catch {
                lock.withLock {
                    self.client = nil
                    lastFailure = "\(error)"
                }
                if lock.withLock({ stopped != nil }) { return }
                log.warning(key: "follow", "cannot follow \(leader): \(error); retrying")
                unreachable += 1
                if unreachable >= Self.triesBeforeClimbing, climb(from: leader, because: "\(error)") {
                    unreachable = 0
                    attempt = 0
                    continue
                }
            }
            attempt += 1
            // The first retry is quick (a restarted leader is back within moments, and every
            // moment it serves without its followers is a window for losing writes), then doubling.
            let delay = attempt == 1 ? 0.02 : min(5.0, 0.05 * Double(1 << min(attempt - 1, 7)))
            try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
        }
    }

    /// Failed connections to the leader after which a follower follows that leader's own leader.
    static let triesBeforeClimbing = 3

    /// The leader cannot be reached: follow its own leader, when it named one this daemon can
    /// reach the same way (not a Unix socket of its machine, TLS only with TLS). True if it did.
    private func climb(from unreachable: String, because why: String) -> Bool {
        guard let next = lock.withLock({ upstream }), next != unreachable, !next.hasPrefix("unix:"),
            next.hasPrefix(TLSSettings.listenPrefix) == unreachable.hasPrefix(TLSSettings.listenPrefix)
        else { return false }
        targetLock.withLock { target = next }
        lock.withLock {
            upstream = nil
            leaderSequence = nil
        }
        dispatcher.setReadOnly("this daemon follows the leader at \(next) and serves reads only; send mutations to the leader at \(next)")
        log.warning("the leader at \(unreachable) cannot be reached (\(why)); following its own leader \(next) directly")
        return true
    }

    /// On the client's queue: a request from the leader joins the inbox (a record with its
    /// journal bytes, taken from the line as sent); reading pauses while the inbox is full.
    private func receive(_ request: Request, line: UnsafeRawBufferPointer) -> FeedFlow {
        let seq = Self.sequence(of: request)
        let body = seq.flatMap { JournalRecord.Body(line: line, seq: $0) }
        return admit(seq: seq) { inbox.append(Incoming(request: request, body: body)) }
    }

    /// On the client's queue: a record line from the leader joins the inbox as its bytes, with the
    /// lines before it when they are not yet handed to a pass; nil for any other line (decoded,
    /// it comes to `receive`).
    private func receiveRecord(_ line: UnsafeRawBufferPointer) -> FeedFlow? {
        let seq = JournalRecord.feedRecordSequence(line)
        let snapshot = seq == nil && JournalRecord.isFeedSnapshotRecord(line)
        guard seq != nil || snapshot else { return nil }
        return admit(seq: seq) {
            let last = inbox.count - 1
            if !(last >= inboxTaken && inbox[last].request == nil && inbox[last].snapshot == snapshot && inbox[last].lines.count < Self.maxEntryBytes) {
                var entry = Incoming(snapshot: snapshot)
                entry.lines.reserveCapacity(Self.maxEntryBytes / 4)
                inbox.append(entry)
            }
            inbox[inbox.count - 1].lines.append(contentsOf: line)
            inbox[inbox.count - 1].lines.append(UInt8(ascii: "\n"))
            inboxBytes += line.count + 1
        }
    }

    /// What the leader sent joins the inbox (`add`, under `lock`), with its sequence number when
    /// it is a record: whether reading pauses (the inbox is full). A pass takes it: the one under
    /// way, or the one the read's end starts (`readEnded`).
    private func admit(seq: UInt64?, _ add: () -> Void) -> FeedFlow {
        lock.withLock {
            guard stopped == nil else { return .pause }
            if let seq {
                newestReceived = max(newestReceived ?? 0, seq)
                if seq > leaderSequence ?? 0 { leaderSequence = seq }
            }
            add()
            let full = inbox.count - inboxHead >= Self.maxInbox || inboxBytes >= Self.maxInboxBytes
            if full { readingPaused = true }
            return full ? .pause : .continue
        }
    }

    /// On the client's thread, after the lines of a read: runs the pass they are owed there, on
    /// the follower's queue (`queue.sync` runs the block on the calling thread). Handing the pass
    /// to a Dispatch worker cost a wake-up and a park per read, a large part of a follower's CPU
    /// at moderate rates; the leader's next lines wait in TCP meanwhile. A pass already under way
    /// (after a retry, or a snapshot's install) takes the lines itself; with none, lines in the
    /// inbox are this read's (a pass ends only once the inbox is empty).
    private func readEnded() {
        let run: Bool = lock.withLock {
            guard !draining, stopped == nil, inboxHead < inbox.count else { return false }
            draining = true
            return true
        }
        if run {
            queue.sync {
                inReadTurn = true
                drain()
                inReadTurn = false
            }
        }
    }

    /// Applies what the inbox holds, in order, until it is empty or a record must wait.
    private func drain() {
        dispatchPrecondition(condition: .onQueue(queue))
        while !blocked {
            // Everything waiting, in one go: one lock per pass, not per record.
            let (batch, resume): ([Incoming], RPCClient?) = lock.withLock {
                guard stopped == nil, inboxHead < inbox.count else {
                    inbox.removeAll(keepingCapacity: true)
                    (inboxHead, inboxTaken, inboxBytes) = (0, 0, 0)
                    draining = false
                    return ([], nil)
                }
                inboxTaken = inbox.count
                var resume: RPCClient?
                if readingPaused {
                    readingPaused = false
                    resume = client
                }
                return (Array(inbox[inboxHead...]), resume)
            }
            guard !batch.isEmpty else { return }
            let inline = inReadTurn && batch.reduce(0, { $0 + $1.lines.count }) <= Self.inlinePassBytes
            if inline { journal.beginInlinePass() }
            var done = 0
            for entry in batch {
                let handled = entry.request.map { handle($0, body: entry.body) } ?? (entry.snapshot ? applySnapshotLines(entry.lines) : applyLines(entry.lines))
                guard handled else { break }  // blocked: it stays first in the inbox
                done += 1
            }
            flushAcknowledgements(written: inline && journal.endInlinePass())
            lock.withLock {
                applied = appliedHere
                leaderSequence = max(leaderSequence ?? 0, appliedHere)
            }
            handled(done)
            // Reading resumes once this pass made room (the inbox was full when it paused).
            resume?.resumeFeed()
        }
    }

    /// The first `count` requests of the inbox are done.
    private func handled(_ count: Int) {
        lock.withLock {
            let end = min(inbox.count, inboxHead + count)
            for index in inboxHead..<end { inboxBytes -= inbox[index].lines.count }
            inboxHead = end
            if inboxHead >= 256 && inboxHead * 2 >= inbox.count {
                inbox.removeFirst(inboxHead)
                inboxTaken = max(0, inboxTaken - inboxHead)
                inboxHead = 0
            }
        }
    }

    /// Handles one request from the leader; false when it must wait (it is handled again later).
    private func handle(_ request: Request, body: JournalRecord.Body?) -> Bool {
        switch request.method {
        case SnapshotBegin.method:
            guard let begin = decode(SnapshotBegin.self, request) else { return true }
            incoming = (JournalReplay(), UInt64(clamping: begin.sequence), begin.records)
            incoming!.replay.receivingSnapshot(records: begin.records)
            log.info("receiving the leader's snapshot at sequence \(begin.sequence) (\(begin.records) records)")
            return true
        case SnapshotEnd.method:
            guard let end = decode(SnapshotEnd.self, request) else { return true }
            return install(end)
        case ReplicationTerm.method where request.id == "s":
            // A term of the snapshot's history (its start in the param).
            guard incoming != nil, let term = decode(ReplicationTerm.self, request) else { return true }
            if let reason = incoming!.replay.addTerm(term, start: UInt64(clamping: max(0, term.sequence ?? 0))) {
                stop("the leader's snapshot holds a term this daemon cannot take: \(reason)")
            }
            return true
        case SnapshotKey.method:
            guard incoming != nil, let remembered = decode(SnapshotKey.self, request) else { return true }
            guard let digest = IdempotencyKeys.digest(text: remembered.digest), !remembered.key.isEmpty else { return true }
            var reply: [UInt8] = []
            JSONWriter.write(remembered.reply, into: &reply)
            incoming!.replay.rememberKey(
                ExactID(remembered.key), .init(digest: digest.value, legacyDigest: digest.legacy, reply: reply, seq: UInt64(clamping: remembered.seq)))
            return true
        default:
            break
        }
        if request.id == "s" {
            guard incoming != nil else { return true }
            if let reason = incoming!.replay.applySnapshotRecord(request) {
                stop("a record of the leader's snapshot does not apply: \(reason)")
            }
            return true
        }
        guard let seq = Self.sequence(of: request) else { return true }
        return apply(request, body: body, seq: seq)
    }

    /// The sequence number of a record from the feed (its id is `"r<seq>"`).
    private static func sequence(of request: Request) -> UInt64? {
        guard request.id.utf8.first == UInt8(ascii: "r") else { return nil }
        return UInt64(request.id.dropFirst())
    }

    private func decode<T: Decodable>(_ type: T.Type, _ request: Request) -> T? {
        guard let value = try? JSONValueDecoder().decode(T.self, from: request.param ?? .null) else {
            stop("\(request.method) from the leader has a param this daemon cannot read; upgrade it to the leader's version")
            return nil
        }
        return value
    }

    /// The snapshot is complete: it replaces the files and the state, then records go on from it.
    private func install(_ end: SnapshotEnd) -> Bool {
        guard let snapshot = incoming, snapshot.seq == UInt64(clamping: end.sequence), snapshot.replay.applied == snapshot.records else {
            stop("the leader's snapshot ended at sequence \(end.sequence) after \(incoming?.replay.applied ?? 0) of \(incoming?.records ?? 0) records; it is incomplete")
            return true
        }
        incoming = nil
        blocked = true
        var replay = snapshot.replay
        let state = replay.receivedSnapshot()
        let (seq, records) = (snapshot.seq, snapshot.records)
        journal.restart(with: state, at: seq) { [self] failure in
            queue.async { [self] in
                if let failure { return stop(failure) }
                dispatcher.withState { current in
                    current = state
                    configureKeys(&current)
                }
                appliedHere = seq
                lock.withLock {
                    applied = seq
                    leaderSequence = max(leaderSequence ?? 0, seq)
                }
                log.info("caught up through a snapshot at sequence \(seq) (\(records) records)")
                // The previous state and the snapshot's buffers are freed: off this queue, which applies on.
                DispatchQueue.global(qos: .utility).async { Heap.releaseFreed() }
                // Acknowledged like a record: with nothing after it, the leader learns this way
                // that the follower holds everything through `seq` (and may count it as in sync).
                var ack: [UInt8] = []
                Self.acknowledge(id: "r\(seq)", method: SnapshotEnd.method, seq: seq, into: &ack)
                send(ack)
                blocked = false
                handled(1)  // the snapshotEnd
                drain()
            }
        }
        return false
    }

    /// Applies mutation `seq`; false when the journal is behind (tried again shortly).
    private func apply(_ request: Request, body: JournalRecord.Body?, seq: UInt64) -> Bool {
        let last = appliedHere
        guard seq > last else { return true }  // sent before (a reconnect): applied already
        guard seq == last + 1 else {
            stop("record \(seq) arrived after \(last): \(seq == last + 2 ? "record \(last + 1) is" : "records \(last + 1)...\(seq - 1) are") missing (a gap)")
            return true
        }
        let outcome = request.method == ReplicationTerm.method
            ? dispatcher.applyTerm(request, body: body, seq: seq)
            : dispatcher.applyReplicated(request, body: body, seq: seq, into: &scratch)
        switch outcome {
        case .refused:
            scratch.removeAll(keepingCapacity: true)
            return retryShortly()
        case .failed(let error):
            scratch.removeAll(keepingCapacity: true)
            flushAcknowledgements()
            acknowledge(request.id, error: error)
            stop("record \(seq) (\(request.method)) does not apply here: \(error.errorMessage); this daemon has diverged from its leader")
            return true
        case .applied(let ticket):
            appliedHere = seq
            ackThrough = (seq, request.method)
            scratch.removeAll(keepingCapacity: true)
            if let ticket { acksTicket = max(acksTicket ?? 0, ticket) }
            return true
        }
    }

    /// Applies a run of record lines; false when the journal is behind (tried again shortly).
    private func applyLines(_ lines: [UInt8]) -> Bool {
        let run = lines.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: appliedHere, applier: &applier) }
        if run.refused != nil { return retryShortly() }
        if run.applied > 0 {
            appliedHere = run.lastSeq
            ackThrough = (run.lastSeq, run.lastMethod.flatMap { RPCMethod(parsing: $0) } ?? ReplicationTerm.method)
            if let ticket = run.ticket { acksTicket = max(acksTicket ?? 0, ticket) }
        }
        if let failure = run.failure {
            flushAcknowledgements()
            stop("\(failure); this daemon has diverged from its leader")
        }
        return true
    }

    /// Applies record lines of the leader's snapshot (ignored when no snapshot is coming).
    private func applySnapshotLines(_ lines: [UInt8]) -> Bool {
        guard incoming != nil else { return true }
        if let reason = lines.withUnsafeBytes({ incoming!.replay.applySnapshotLines($0) }) {
            stop("a record of the leader's snapshot does not apply: \(reason)")
        }
        return true
    }

    /// The journal takes no records now: the pass ends, and the record waiting is tried again in a moment.
    private func retryShortly() -> Bool {
        blocked = true
        flushAcknowledgements()
        queue.asyncAfter(deadline: .now() + .milliseconds(10)) { [self] in
            blocked = false
            drain()
        }
        return false
    }

    /// `{"id":"r<seq>","method":"….…Result","param":{"sequence":N}}`: the leader reads the id; the
    /// param says the sequence, never the record (a record grown past the frame limit would make
    /// its echo too long to send back).
    private static func acknowledge(id: String, method: RPCMethod, seq: UInt64, into out: inout [UInt8]) {
        RequestCodec.encode(id: id, method: method.result, form: .canonical, into: &out) { out in
            out.append(contentsOf: #"{"sequence":"#.utf8)
            out.append(contentsOf: String(seq).utf8)
            out.append(UInt8(ascii: "}"))
            return nil
        }
    }

    /// Sends the acknowledgement of this pass (for its last record: the leader reads it as all of
    /// them) once that record is durable: one wait for the journal, and one line, per pass.
    /// `written`: this pass wrote its records on the client's queue (`Journal.endInlinePass`), so
    /// the acknowledgement goes out from here too.
    private func flushAcknowledgements(written: Bool = false) {
        guard let through = ackThrough else { return }
        ackThrough = nil
        var lines: [UInt8] = []
        Self.acknowledge(id: "r\(through.seq)", method: through.method, seq: through.seq, into: &lines)
        if written, acksTicket.map({ journal.sequences.durable >= $0 }) ?? true {
            acksTicket = nil
            lock.withLock { client }?.sendCounterRequestNow(lines)
            return
        }
        guard let ticket = acksTicket else { return send(lines) }
        acksTicket = nil
        journal.whenDurable(ticket) { [self, lines] failure in
            if failure == nil { send(lines) }
        }
    }

    private func acknowledge(_ id: String, error: RPCError) {
        var line: [UInt8] = []
        RequestCodec.encodeError(id: id, error, form: .canonical, into: &line)
        send(line)
    }

    /// Hands an acknowledgement to the client (its queue writes it): a pass sends one, so there
    /// is nothing to gather, and no other thread to wake on the way.
    private func send(_ line: [UInt8]) {
        lock.withLock { client }?.sendCounterRequest(line)
    }

    // MARK: - Terms

    /// The leader's history parts from ours after `shared`: with a higher term it wins, and this
    /// daemon cuts its records after `shared` (saved to a file beside the journal first), empties
    /// its state and takes the leader's history from sequence 0; otherwise it stops following.
    /// False when it stopped.
    private func rewind(to shared: UInt64, from last: UInt64, leaderTerm result: SubscribeResult) async -> Bool {
        let mine = dispatcher.withState { $0.terms.current }
        let leaderTerm = UInt64(clamping: max(0, result.term ?? 0))
        let ours = mine.map { "term \($0.term) (id \($0.id), led from \($0.leader))" } ?? "term 0 (never promoted)"
        if shared == 0, leaderTerm == 0, mine == nil, let theirs = result.origin, let ours = origin?.value, theirs != ours {
            stop("this daemon's history began apart from the leader's at \(leader) (origin \(ours), the leader's \(theirs)), so its records 1...\(last) are not copies of the leader's; keep the one you trust: stop this daemon, move its data directory aside and start it again to copy the leader's, or point it at a leader of its own history")
            return false
        }
        guard leaderTerm > mine?.term ?? 0 else {
            stop("this daemon holds records \(shared + 1)...\(last) that the leader at \(leader) does not have, and the leader's term \(leaderTerm) is not above this daemon's \(ours), so neither history is newer; keep the one you trust: follow a leader of a higher term, or stop this daemon, move its data directory aside and start it again to copy the leader's")
            return false
        }
        let saved: String
        switch saveRecords(after: shared, through: last) {
        case .success(let path): saved = path
        case .failure(let problem):
            stop("cannot save the records after sequence \(shared) before cutting them: \(problem.reason); nothing was cut")
            return false
        }
        let failure: String? = await withCheckedContinuation { done in
            journal.restart(with: Entities(), at: 0) { failure in done.resume(returning: failure) }
        }
        if let failure {
            stop("cannot start over after cutting records after sequence \(shared): \(failure)")
            return false
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            queue.async { [self] in
                dispatcher.withState { current in
                    current = Entities()
                    configureKeys(&current)
                }
                appliedHere = 0
                lock.withLock { applied = 0 }
                done.resume()
            }
        }
        log.warning(
            "rewound: the leader at \(leader) (term \(leaderTerm)) never had records \(shared + 1)...\(last) of this daemon's \(ours); "
                + "cut \(last - min(last, shared)) records, saved in \(saved); copying the leader's history from the start")
        return true
    }

    /// Writes the records after `shared` to a dated file beside the journal (and a copy of the
    /// snapshot when it holds some of them); the path of the file.
    private func saveRecords(after shared: UInt64, through last: UInt64) -> Result<String, FeedProblem> {
        let files = journal.directory.files
        let path = "\(files.path)/rewound-\(Recovery.fileTime())-after-\(shared).jsonl"
        let snapshotSeq = journal.sequences.snapshot
        do {
            let fd = try FileIO.open(path, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
            defer { FileIO.close(fd) }
            let cursor = JournalCursor(files: files, maxLineBytes: SnapshotCursor.maxRecordLineBytes)
            var next = max(shared, snapshotSeq) + 1
            while next <= last {
                switch cursor.read(from: next, durable: last, maxBytes: 1 << 20) {
                case .lines(let bytes, let end):
                    guard end >= next else { next = last + 1; break }
                    try bytes.withUnsafeBytes { try FileIO.writeAll(fd, $0, path: path) }
                    next = end + 1
                case .gone(let why), .failed(let why), .damaged(let why, _):
                    return .failure(FeedProblem(why))
                }
            }
            try FileIO.sync(fd, path: path, faults: false)
            if snapshotSeq > shared {
                // Records up to the snapshot's sequence are only in it: keep the whole file.
                let copy = path.replacingOccurrences(of: ".jsonl", with: "-snapshot.jsonl")
                let bytes = try FileIO.readAll(files.snapshot) ?? []
                let out = try FileIO.open(copy, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
                defer { FileIO.close(out) }
                try bytes.withUnsafeBytes { try FileIO.writeAll(out, $0, path: copy) }
                try FileIO.sync(out, path: copy, faults: false)
            }
            try FileIO.syncDirectory(files.path)
        } catch {
            return .failure(FeedProblem("\(error)"))
        }
        return .success(path)
    }

    /// Stops following at shutdown: applies nothing more.
    func shutdown() {
        let client: RPCClient? = lock.withLock {
            if stopped == nil { stopped = "shutting down" }
            inbox = []
            inboxHead = 0
            connected = false
            lostSignal?.yield("shutting down")
            return self.client
        }
        client?.close()
    }

    /// Waits until a pass of applying records that had begun is over (after `shutdown`).
    func waitIdle() { queue.sync {} }

    /// Stops following for good (this daemon keeps serving reads), with a logged reason.
    private func stop(_ reason: String) {
        // Once: records still on their way after the cause would each blame a gap in its wake.
        let (first, client): (Bool, RPCClient?) = lock.withLock {
            guard stopped == nil else { return (false, nil) }
            stopped = reason
            inbox = []
            inboxHead = 0
            connected = false
            lostSignal?.yield(reason)
            return (true, self.client)
        }
        guard first else { return }
        log.error("stopped following \(leader): \(reason); this daemon keeps serving reads. Empty its data directory to rebuild it from the leader's snapshot, then restart it")
        client?.close()
    }
}
