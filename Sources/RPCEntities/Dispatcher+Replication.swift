import CRPCLinux
import RPCSchema

/// What a follower's dispatcher does beside serving: refuse client mutations, apply the
/// leader's records and terms under their sequence numbers.
extension Dispatcher {
    /// Makes mutations from clients fail with `readOnly` and `message` (a follower), or serves
    /// them again (nil).
    public func setReadOnly(_ message: String?) {
        lock.withLock { readOnlyMessage = message }
    }

    /// What applying a leader's mutation came to.
    public enum Replicated: Sendable {
        /// Applied and logged; the reply param is in `out`; acknowledge once `ticket` is durable
        /// (nil: now).
        case applied(ticket: UInt64?)
        /// The log takes no mutations now (its writer is behind, or it failed): try again later.
        case refused(String)
        /// It does not apply to this state (the follower has diverged): why.
        case failed(RPCError)
    }

    /// Applies a mutation a leader sent with its sequence number `seq` (a follower), through the
    /// same method table as replay, and logs it under `seq`; the reply param goes in `out`. A keyed
    /// mutation's outcome is remembered, as when serving it, so a retry after a failover finds it.
    /// The caller checks that `seq` follows the last one applied. `body` is the record's bytes as
    /// the leader journaled them (nil: encoded from `request`).
    public func applyReplicated(
        _ request: Request, body: JournalRecord.Body? = nil, seq: UInt64, into out: inout [UInt8]
    ) -> Replicated {
        guard let entry = table.entry(for: request.method), entry.isMutation, entry.service == nil else {
            return .failed(.methodNotFound("\(request.method) is not a mutation this daemon knows; upgrade this follower to the leader's version"))
        }
        let prepared: MethodTable<Entities>.Prepared
        switch entry.prepare(request.param) {
        case .success(let call): prepared = call
        case .failure(let error): return .failed(error)
        }
        let body = log.map { _ in body ?? JournalRecord.Body(request) }
        let keyed = request.key.map {
            (IdempotencyKeys.Key($0), body?.digest ?? IdempotencyKeys.digest(method: request.method, param: request.param))
        }
        let now = crpc_monotonic_ns()
        lock.lock()
        defer {
            lock.unlock()
            log?.recorded()
        }
        if let log, let reason = log.refusal() { return .refused(reason) }
        let start = out.count
        if let error = prepared(&state, &out) { return .failed(error) }
        if let (key, digest) = keyed {
            state.keys.remember(key, digest: digest, reply: out[start...], seq: seq, now: now)
        }
        return .applied(ticket: body.flatMap { log?.record($0, at: seq) })
    }

    /// What applying a run of a leader's journal lines came to (`applyReplicated(lines:after:applier:)`).
    public struct ReplicatedLines: Sendable {
        /// The last sequence number applied (the one given, when none was).
        public var lastSeq: UInt64
        /// Lines applied.
        public var applied = 0
        /// The method of the last line applied (its acknowledgement names its result).
        public var lastMethod: String?
        /// Acknowledge once this ticket is durable (nil: now).
        public var ticket: UInt64?
        /// The log takes no mutations now: nothing was applied; try again later.
        public var refused: String?
        /// The line that does not apply, or does not follow the last: why. The lines before it
        /// were applied and journaled.
        public var failure: String?
    }

    /// Applies a run of a leader's journal lines (each with its `\n`, as its change feed sent
    /// them) that follow sequence number `last`, under one hold of the state lock, as a restart
    /// replays them: a plain param decoded from the line, no reply written for a record without a
    /// key, each seal checked. Their bytes go to the journal as they came (`recordSealed`), so a
    /// follower's journal is its leader's, byte for byte. Lines at or below `last` came before (a
    /// reconnect sends them again) and are skipped. `applier` keeps its method lookups from one
    /// run to the next; it holds no state between runs.
    public func applyReplicated(lines: UnsafeRawBufferPointer, after last: UInt64, applier: inout JournalReplay) -> ReplicatedLines {
        var run = ReplicatedLines(lastSeq: last)
        lock.lock()
        defer {
            lock.unlock()
            log?.recorded()
        }
        if let log, let reason = log.refusal() {
            run.refused = reason
            return run
        }
        swap(&applier.state, &state)
        defer { swap(&applier.state, &state) }
        applier.lastSeq = last
        var taken: (start: Int, end: Int, first: UInt64)?
        _ = JournalReplay.forEachLine(lines) { line, number, offset in
            func failed(_ reason: String) -> JournalReplay.Failure {
                run.failure = reason
                return JournalReplay.Failure(line: number, offset: offset, reason: reason, kind: .damaged)
            }
            let (fields, plain): (JournalRecord.Fields, PlainObject?)
            switch JournalRecord.replayFields(line) {
            case .failure(let error): return failed("a record from the leader is damaged: \(JournalReplay.damage(error, line: line, file: lines))")
            case .success(let decoded): (fields, plain) = decoded
            }
            guard fields.sealed, let seq = fields.seq else { return failed("a record from the leader has no checksum or no sequence number") }
            let previous = applier.lastSeq
            if seq <= previous && taken == nil { return nil }
            guard previous < .max, seq == previous + 1 else {
                return failed("a record from the leader does not follow the last one here: \(JournalReplay.sequenceProblem(seq, after: previous))")
            }
            if let refusal = applier.apply(fields, plain: plain, seq: seq) {
                return failed("record \(seq) (\(fields.method)) does not apply here: \(refusal.reason)")
            }
            applier.lastSeq = seq
            taken = (taken?.start ?? offset, offset + line.count + 1, taken?.first ?? seq)
            run.applied += 1
            run.lastMethod = fields.method
            return nil
        }
        run.lastSeq = applier.lastSeq
        if let taken, let log {
            run.ticket = log.recordSealed(UnsafeRawBufferPointer(rebasing: lines[taken.start..<taken.end]), first: taken.first, last: run.lastSeq)
        }
        return run
    }

    /// Starts term `term` (id `id`, led from `leader`): journals its `replication.term` record
    /// and adds it to the history; the record's sequence number (its durability ticket), or nil
    /// when the log refuses it now (with why).
    public func startTerm(_ term: UInt64, id: String, leader: String) -> Result<UInt64, RPCError> {
        guard let log else { return .failure(.internal("this daemon keeps no journal to start a term in")) }
        let param = ReplicationTerm(term: Int(clamping: term), termId: id, leader: leader)
        let request = Request(id: "", method: ReplicationTerm.method, param: try? JSONValueEncoder().encode(param))
        let body = JournalRecord.Body(request)
        lock.lock()
        defer {
            lock.unlock()
            log.recorded()
        }
        if let reason = log.refusal() { return .failure(.internal(reason)) }
        if let last = state.terms.current, last.term >= term { return .failure(.internal("term \(term) does not follow term \(last.term)")) }
        let seq = log.record(body) ?? 0
        _ = state.terms.add(.init(term: term, id: id, start: seq, leader: leader))
        return .success(seq)
    }

    /// A leader's `replication.term` record, sequence number `seq`, on a follower: journaled under
    /// `seq` (its bytes as sent) and added to the history. Fails when the term does not grow.
    public func applyTerm(_ request: Request, body: JournalRecord.Body?, seq: UInt64) -> Replicated {
        guard let record = try? JSONValueDecoder().decode(ReplicationTerm.self, from: request.param ?? .null),
            let entry = TermHistory.Term(record, start: seq)
        else { return .failed(.invalidParams(TermHistory.recordNeeds)) }
        let body = log.map { _ in body ?? JournalRecord.Body(request) }
        lock.lock()
        defer {
            lock.unlock()
            log?.recorded()
        }
        if let log, let reason = log.refusal() { return .refused(reason) }
        if let reason = state.terms.add(entry) { return .failed(.conflict(reason)) }
        return .applied(ticket: body.flatMap { log?.record($0, at: seq) })
    }
}
