import CRPCLinux
import RPCSchema

/// Where applied mutations go, in apply order (the journal). Called with the state lock held, so
/// the order it sees is the order the state saw.
public protocol MutationLog: AnyObject, Sendable {
    /// Refuses mutations (with the returned reason) while the log cannot take them, e.g. after a failed write.
    func refusal() -> String?
    /// Nil when the log takes `count` more mutations, whatever their size: a turn asks once for
    /// all its mutations (the log's lock is one the journal writer also takes), and when it is
    /// refused, asks `refusal()` before each one, as a lone mutation does.
    func refusal(records count: Int) -> String?
    /// Records one applied mutation (its record's bytes, encoded before the lock was taken);
    /// returns the ticket its reply must wait for (nil: durable now).
    func record(_ body: JournalRecord.Body) -> UInt64?
    /// Records a leader's mutation under the leader's sequence number `seq` (on a follower, whose
    /// journal stays byte-compatible with its leader's); returns the ticket, as `record` does.
    func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64?
    /// Called once the state lock is released by a caller whose `record` returned a ticket: starts
    /// what `record` left for later (the journal's writer), so the lock is never held across a
    /// thread wake-up.
    func recorded()
    /// Calls `done` once `ticket` is durable (`nil`) or can never be (the reason). Any thread.
    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (_ failure: String?) -> Void)
    /// Why a mutation is refused now, as the error its caller gets (nil: taken).
    func refusalError() -> RPCError?
    /// Calls `done` once `ticket` may be acknowledged to its client (durable here, and wherever
    /// else the daemon's policy asks), or with the error the client gets instead. Any thread.
    func whenConfirmed(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void)
    /// The last ticket recorded, while it is not yet confirmed and reads must not be answered
    /// before it is (nil: a read may be answered now).
    func readFence() -> UInt64?
    /// Whether reads may have to wait at all (`readFence` is asked only then).
    var fencesReads: Bool { get }
    /// Why a read may be stale here now, as the error a connection that did not allow stale reads
    /// gets (nil: reads are answered).
    func readRefusal() -> RPCError?
}

extension MutationLog {
    /// A log whose refusal does not depend on how many mutations come.
    public func refusal(records count: Int) -> String? { refusal() }
    public func refusalError() -> RPCError? { refusal().map { .internal("mutations are refused: \($0)") } }
    /// A log whose reads need not wait.
    public func readFence() -> UInt64? { nil }
    public var fencesReads: Bool { false }
    public func readRefusal() -> RPCError? { nil }
    /// A log whose records are confirmed once durable.
    public func whenConfirmed(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void) {
        whenDurable(ticket) { failure in done(failure.map(Self.notSaved)) }
    }
    /// What a mutation's client gets when its record could not be made durable.
    public static func notSaved(_ failure: String) -> RPCError {
        .internal("the change was applied but not saved: \(failure); it may be lost on restart")
    }
    /// A log that numbers records itself ignores the leader's number.
    public func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64? { record(body) }
    /// A log with nothing to start after recording.
    public func recorded() {}
}

/// Turns request lines into counter-request lines: decode the envelope, find the method, run it
/// against the entities, encode the reply in the connection's wire form.
///
/// Thread-safe: any number of connection queues call `handle` at once; the entity state is guarded
/// by one lock held only while a handler runs (decoding and encoding happen outside it).
public final class Dispatcher: @unchecked Sendable {
    // @unchecked: `state` is only touched with `lock` held, one `inout` access a batch.
    private let lock = SpinningLock()
    private var state: Entities
    public let table: MethodTable<Entities>
    private let log: MutationLog?
    private let onCounterRequest: @Sendable (Request) -> Void
    /// What the service methods (`system.*`) read; nil: they answer `internal`.
    private let context: (any ServiceContext)?
    /// Set on a follower: why mutations from clients are refused (guarded by `lock`).
    private var readOnlyMessage: String?

    public typealias Session = RPCEntities.Session

    /// What `handle` did.
    public enum Disposition: Equatable, Sendable {
        /// Nothing to send (a counter-request).
        case none
        /// A reply was appended; send it now.
        case reply
        /// A reply to request `id` was appended; send it once the log has made `ticket` durable.
        case replyAfter(ticket: UInt64, id: String)
        /// The reply comes later: reserve its place, then call the function; its completion gets
        /// the whole reply line (any thread).
        case replyLater(@Sendable (@escaping @Sendable ([UInt8]) -> Void) -> Void)

        public static func == (a: Disposition, b: Disposition) -> Bool {
            switch (a, b) {
            case (.none, .none), (.reply, .reply), (.replyLater, .replyLater): return true
            case (.replyAfter(let t1, let i1), .replyAfter(let t2, let i2)): return t1 == t2 && i1 == i2
            default: return false
            }
        }
    }

    public init(
        state: Entities = Entities(), table: MethodTable<Entities> = Entities.table, log: MutationLog? = nil,
        context: (any ServiceContext)? = nil, onCounterRequest: @escaping @Sendable (Request) -> Void = { _ in }
    ) {
        self.context = context
        self.state = state
        self.table = table
        self.log = log
        self.onCounterRequest = onCounterRequest
    }

    /// Handles one line (without its terminator) and appends the reply, if any, to `out`: `admit`,
    /// then the call run or the service method served at once.
    public func handle(line: UnsafeRawBufferPointer, session: inout Session, into out: inout [UInt8]) -> Disposition {
        var calls: [Call] = []
        switch admit(line, subscriber: false, session: &session, into: &out, calls: &calls) {
        case .call:
            var outcomes: [(served: Served, end: Int)] = []
            run(calls[...], into: &out, outcomes: &outcomes)
            return outcomes[0].served.disposition
        case .answered(let served, _, _, _):
            return served.disposition
        case .service(let request):
            return serveService(request, session: &session, into: &out).disposition
        case .acknowledged, .none:
            return .none
        }
    }

    /// What `admit` made of one line.
    package enum Admission {
        /// A call to run with the others of its batch (under one hold of the state lock): appended to `calls`.
        case call(id: String, method: RPCMethod, form: WireForm)
        /// Answered at once (a refusal, a bad param, a line that is no request): the reply is in
        /// `out`. `method` is nil for a line that is no request.
        case answered(Served, id: String, method: RPCMethod?, form: WireForm)
        /// A service method (`system.*`), to `serve` now, after the calls admitted before it ran.
        case service(Request)
        /// A change-feed subscriber acknowledged record `seq` (never answered).
        case acknowledged(UInt64)
        /// A counter-request, handed to the counter-request hook; nothing to answer.
        case none
    }

    /// The one door every line goes through: decoded once (`RequestCodec.scan`), then
    /// authorized, prepared and staged (`stage`), answered at once when it fails, or handed back
    /// as a service call, an acknowledgement or a counter-request. `subscriber`: the connection
    /// follows the change feed, so its `r<seq>` counter-requests acknowledge records.
    package func admit(
        _ line: UnsafeRawBufferPointer, subscriber: Bool, session: inout Session, into out: inout [UInt8], calls: inout [Call]
    ) -> Admission {
        if subscriber, let seq = RequestCodec.feedAcknowledgement(line) { return .acknowledged(seq) }
        let scanned = RequestCodec.scan(line)
        let left = scanned.left
        switch scanned.decoded {
        case .request(let request):
            if session.form == nil { session.form = request.form }
            let form = session.form ?? .canonical
            switch stage(request, left: left, session: &session, into: &out, calls: &calls) {
            case .call: return .call(id: request.id, method: request.method, form: form)
            case .served(let served): return .answered(served, id: request.id, method: request.method, form: form)
            case .service: return .service(request.withParam(from: left.plainParam))
            }
        case .counterRequest(let request):
            if session.form == nil { session.form = request.form }
            guard subscriber else {
                onCounterRequest(request)
                return .none
            }
            // A subscriber's acknowledgement of record "r<seq>" in a form the prefix did not catch.
            if request.id.utf8.first == UInt8(ascii: "r"), let seq = UInt64(request.id.dropFirst()) { return .acknowledged(seq) }
            return .none
        case .invalid(let id, let error, let form):
            if session.form == nil, let form { session.form = form }
            let replyForm = session.form ?? .canonical
            RequestCodec.encodeError(id: id, error, form: replyForm, into: &out)
            return .answered(Served(disposition: .reply, failed: true, known: false), id: id, method: nil, form: replyForm)
        }
    }

    /// Handles a decoded request for a connection that may call everything; the reply goes in `form`.
    public func handle(_ request: Request, form: WireForm, into out: inout [UInt8]) -> Disposition {
        var session = Session()
        session.form = form
        return serve(request, session: &session, into: &out).disposition
    }

    /// What serving one request came to, for statistics.
    public struct Served: Sendable {
        public var disposition: Disposition
        /// The reply is an `error.error`.
        public var failed: Bool
        /// The method is in the table (unknown methods are counted together).
        public var known: Bool
    }

    /// A request ready to run against the state: its method found and allowed, its param
    /// prepared, its journal record and idempotency digest computed (all outside the state lock).
    public struct Call: @unchecked Sendable {
        // @unchecked: `prepared` is a closure over the decoded param, run once under the state lock.
        let id: String
        /// The method the reply calls: its place in the table (`MethodTable.resultHeads`).
        let result: Int
        let form: WireForm
        let prepared: MethodTable<Entities>.Prepared
        let isMutation: Bool
        /// The journal record of a mutation (nil: no journal).
        let body: JournalRecord.Body?
        /// The idempotency key, the request's digest and the time, for a keyed mutation.
        let keyed: Keyed?
    }

    /// What a keyed mutation brings to the key table (the time comes from `run`, once a batch).
    /// A class: a call holds a reference, so an unkeyed call (most of them) carries 8 bytes for it,
    /// not the ~120 a `Keyed` takes (a turn's calls are built in place, then read and dropped).
    final class Keyed: Sendable {
        /// Where the key's bytes are.
        enum Bytes: Sendable {
            /// In the call's journal body (`JournalRecord.Body.plainKeyRange`): a plain key, copied there as it is.
            case inBody(Range<Int>)
            /// A key decoded in full (an escape in it), or a call with no journal body.
            case string(String)
        }

        /// The key's hash (`IdempotencyKeys.Key.hash`).
        let hash: Int
        let bytes: Bytes
        let digest: UInt64
        /// The request's method and param, for an outcome remembered with a `legacyDigest`.
        let method: RPCMethod
        let param: JSONValue?
        /// The param was left plain (not parsed): the journal body's bytes hold it.
        let paramInBody: Bool
        /// The digest of the param as the peer wrote it, when that was not its canonical form.
        let digestAsSent: UInt64?

        /// A request's key, its hash and where its bytes are (nil: no key). The body's, when it holds
        /// them: no string of them (its allocation, and a retain and a release each time the key was
        /// hashed, copied, looked up or stored).
        static func bytes(key: String?, plainKey: UnsafeRawBufferPointer?, body: JournalRecord.Body?) -> (hash: Int, bytes: Bytes)? {
            if let plainKey, let range = body?.plainKeyRange { return (IdempotencyKeys.Key.hash(of: plainKey), .inBody(range)) }
            guard let string = key ?? plainKey.map({ String(decoding: $0, as: UTF8.self) }) else { return nil }
            let id = ExactID(string)
            return (id.fingerprint, .string(id.string))
        }

        /// `key` in the namespace of principal `scope`: `scope`, a NUL, `key`.
        static func scoped(_ key: String, by scope: String) -> String { scope + "\u{0}" + key }

        /// The part of a stored key its client sent (after the scope's NUL, if any), for messages.
        static func unscoped(_ bytes: UnsafeBufferPointer<UInt8>) -> UnsafeBufferPointer<UInt8> {
            guard let nul = bytes.firstIndex(of: 0) else { return bytes }
            return UnsafeBufferPointer(rebasing: bytes[(nul + 1)...])
        }

        init(hash: Int, bytes: Bytes, digest: UInt64, method: RPCMethod, param: JSONValue?, paramInBody: Bool, digestAsSent: UInt64? = nil) {
            self.digestAsSent = digestAsSent
            self.hash = hash
            self.bytes = bytes
            self.digest = digest
            self.method = method
            self.param = param
            self.paramInBody = paramInBody
        }

        /// Whether `outcome` was remembered for this same request (`body`: the call's journal body).
        func matches(_ outcome: IdempotencyKeys.Outcome, body: JournalRecord.Body?) -> Bool {
            guard outcome.legacyDigest else { return outcome.digest == digest || outcome.digest == digestAsSent }
            // Only outcomes read from a snapshot or feed older than `digest` have one: parsed now.
            let param = paramInBody ? body?.parsedParam() : self.param
            return outcome.digest == IdempotencyKeys.legacyDigest(method: method, param: param)
        }
    }

    /// What `stage` made of a request.
    public enum Stage {
        /// Ready to run (with others, under one hold of the state lock): appended to `calls`, for `run`.
        case call
        /// Answered already (an unknown method, a refusal, a bad param): the reply is in `out`.
        case served(Served)
        /// A service method (`system.*`): `serve` it, after every call staged before it has run.
        case service
    }

    /// Everything about `request` that needs no state: the method, the caller's right to call it,
    /// the param, the journal record. Errors are answered into `out` at once; a call is appended
    /// to `calls` (built in place there: handing it back in the `Stage` cost a copy and a destroy
    /// of its every string, closure and array, ~30 reference-count operations a request).
    ///
    /// `left`: what the decoder left in the line (`LeftInLine`): the method and param bytes a
    /// journal record copies, a plain param (a `.service` request is then served `withParam(from:)`
    /// it), a plain key.
    package func stage(
        _ request: Request, left: LeftInLine = LeftInLine(), session: inout Session, into out: inout [UInt8], calls: inout [Call]
    ) -> Stage {
        let (methodAndParam, plainParam, plainKey) = (left.methodAndParam, left.plainParam, left.plainKey)
        if let scope = session.principal, request.key != nil || plainKey != nil, table.entry(for: request.method)?.isMutation == true {
            // A principal's keys are its own: the key table, the journal and the feed hold them as
            // `NAME\u0000KEY`, so another principal can neither read the outcome nor block the key.
            let key = request.key ?? plainKey.map { String(decoding: $0, as: UTF8.self) } ?? ""
            let scoped = Keyed.scoped(key, by: scope)
            guard scoped.utf8.count <= Request.maxKeyBytes else {
                let room = Request.maxKeyBytes - scope.utf8.count - 1
                RequestCodec.encodeError(
                    id: request.id,
                    .invalidRequest("\"key\" is \(key.utf8.count) bytes; keys of principal \"\(scope)\" are at most \(room) bytes (\(Request.maxKeyBytes) with its name); use a shorter key"),
                    form: session.form ?? .canonical, into: &out)
                return .served(Served(disposition: .reply, failed: true, known: true))
            }
            var request = request
            request.key = scoped
            return stageRequest(request, methodAndParam: methodAndParam, plainParam: plainParam, plainKey: nil, session: &session, into: &out, calls: &calls)
        }
        return stageRequest(request, methodAndParam: methodAndParam, plainParam: plainParam, plainKey: plainKey, session: &session, into: &out, calls: &calls)
    }

    private func stageRequest(
        _ request: Request, methodAndParam lineBytes: UnsafeRawBufferPointer?, plainParam: PlainObject?,
        plainKey: UnsafeRawBufferPointer?, session: inout Session, into out: inout [UInt8], calls: inout [Call]
    ) -> Stage {
        let form = session.form ?? .canonical
        guard let entryIndex = table.index(of: request.method) else {
            RequestCodec.encodeError(id: request.id, methodNotFound(request.method), form: form, into: &out)
            return .served(Served(disposition: .reply, failed: true, known: false))
        }
        let entry = table.entries[entryIndex]
        if let refusal = session.refusal(of: entry.method, needing: entry.access) {
            context?.refused(entry.method, refusal, session: session)
            RequestCodec.encodeError(id: request.id, refusal, form: form, into: &out)
            return .served(Served(disposition: .reply, failed: true, known: true))
        }
        if entry.service != nil { return .service }
        if !entry.isMutation && !session.staleReads, let refusal = log?.readRefusal() {
            RequestCodec.encodeError(id: request.id, refusal, form: form, into: &out)
            return .served(Served(disposition: .reply, failed: true, known: true))
        }
        var param = request.param
        var prepared: MethodTable<Entities>.Prepared?
        if let plainParam, case .success(let call)? = entry.preparer(.plain(plainParam), .written) { prepared = call }
        let journaled = entry.isMutation && log != nil
        // A keyed mutation's param is journaled and digested in one form (`canonical`), so a retry
        // that writes the same param otherwise is the same mutation: the line's own bytes serve
        // when they are that form already (a plain param with its fields in declared order).
        let canonicalize = entry.isMutation && (request.key != nil || plainKey != nil)
            && !(plainParam?.keys(inOrder: entry.fieldNames) ?? false)
        let methodAndParam = canonicalize ? nil : lineBytes
        // The parsed param, where a plain one was not enough: to decode and word an error, for a
        // journal body or a key's digest not made from the line's own bytes, and in debug builds
        // for the journal body's check of its copied bytes. (A keyed create parsed it always: ~10%
        // of its cost, for a legacy digest it almost never meets; see `Keyed.matches`.)
        let keyedWithoutBytes = entry.isMutation && (request.key != nil || plainKey != nil) && !(journaled && methodAndParam != nil)
        let needsParsed = prepared == nil || (journaled && methodAndParam == nil) || keyedWithoutBytes
        if let plainParam, needsParsed || Self.checksCopiedBytes { param = plainParam.value }
        if prepared == nil {
            switch entry.prepare(param) {
            case .success(let call): prepared = call
            case .failure(let error):
                RequestCodec.encodeError(id: request.id, error, form: form, into: &out)
                return .served(Served(disposition: .reply, failed: true, known: true))
            }
        }
        // After `prepare`, which validates what the peer sent as it sent it. The digest of the
        // param as sent is kept too: outcomes remembered before params were canonical have it.
        var asSent: UInt64?
        if canonicalize {
            asSent = IdempotencyKeys.digest(method: request.method, param: param)
            param = param?.canonical(fieldOrder: entry.fieldNames)
        }
        let body = journaled ? JournalRecord.Body(request, param: param, methodAndParam: methodAndParam, plainKey: plainKey) : nil
        var keyed: Keyed?
        if entry.isMutation, let keyBytes = Keyed.bytes(key: request.key, plainKey: plainKey, body: body) {
            keyed = Keyed(
                hash: keyBytes.hash, bytes: keyBytes.bytes, digest: body?.digest ?? IdempotencyKeys.digest(method: request.method, param: param),
                method: request.method, param: param, paramInBody: plainParam != nil && !needsParsed, digestAsSent: asSent)
        }
        guard let prepared else { preconditionFailure("a call is prepared or answered") }
        calls.append(Call(
            id: request.id, result: entryIndex, form: form, prepared: prepared, isMutation: entry.isMutation, body: body,
            keyed: keyed))
        return .call
    }

    /// Whether assertions run (debug builds): then a plain param is parsed too, for `JournalRecord.Body`'s check.
    private static let checksCopiedBytes: Bool = {
        var checks = false
        assert({ checks = true; return true }())
        return checks
    }()

    /// Runs staged calls in order under one hold of the state lock, appending each reply line to
    /// `out`; `outcomes` gets, per call, what to do with its reply and where in `out` it ends.
    /// One lock for a loop's whole turn of requests, not one per request: the other loops then
    /// rarely find it taken.
    /// Stops early, after at least one call, once the replies passed `maxBytes`.
    /// With `startingLog` false the log's `recorded()` is the caller's to call (an event loop
    /// calls it once its pass over the ready peers is done, so that the pass's mutations share
    /// the journal writer's next fsync).
    public func run(
        _ calls: ArraySlice<Call>, into out: inout [UInt8], outcomes: inout [(served: Served, end: Int)], maxBytes: Int = .max,
        startingLog: Bool = true
    ) {
        var logged = false
        lock.lock()
        defer {
            lock.unlock()
            if logged && startingLog { log?.recorded() }
        }
        logged = run(calls, state: &state, readOnly: readOnlyMessage, into: &out, outcomes: &outcomes, maxBytes: maxBytes)
    }

    /// `run` with the lock held: the state is one `inout` access for the whole batch (each access
    /// to a class's stored property is a run-time exclusivity check, and a keyed call made four). Whether a mutation was logged.
    private func run(
        _ calls: ArraySlice<Call>, state: inout Entities, readOnly: String?, into out: inout [UInt8],
        outcomes: inout [(served: Served, end: Int)], maxBytes: Int
    ) -> Bool {
        let start = out.count
        var logged = false
        // Whether the log took every mutation of the turn at the first one's turn to ask.
        var logTakes: Bool?
        // What a read waits for: the log's unconfirmed head (asked at the batch's first read),
        // then every mutation of the batch before it. A read never shows what could still be lost.
        var fence: UInt64?
        var fenceAsked = false
        let fencing = log?.fencesReads ?? false
        // Calls are read in place, as the buffer and an index: `for call in calls`, or passing
        // `calls[index]` on (even `borrowing`, once a closure captures it), copied each one (a
        // retain and a release for each of its strings, closure and arrays).
        let heads = table.resultHeads
        calls.withUnsafeBufferPointer { calls in
            // Every call's record slot and key slot asked for before any runs (one call alone would
            // ask just before it looks: nothing to overlap). Only hashes are read: no string is retained.
            var anyKeyed = false
            let overlaps = calls.count > 1
            for index in calls.indices {
                if overlaps, let lookup = calls[index].prepared.lookup { state.prefetch(table: lookup.table, hash: lookup.hash) }
                if let hash = calls[index].keyed?.hash {
                    anyKeyed = true
                    if overlaps { state.keys.prefetch(hash: hash) }
                }
            }
            // One clock read for the batch's keyed calls (the time a key is remembered at).
            let now = anyKeyed ? crpc_monotonic_ns() : 0
            for index in calls.indices where out.count - start < maxBytes {
                var ticket: UInt64?
                if logTakes == nil, calls[index].isMutation, let log {
                    logTakes = log.refusal(records: calls.count - index) == nil
                }
                let error = RequestCodec.encode(id: calls[index].id, head: heads[calls[index].result], form: calls[index].form, into: &out) { out in
                    let (error, applied) = apply(calls, index, state: &state, readOnly: readOnly, logTakes: logTakes == true, now: now, into: &out)
                    ticket = applied
                    return error
                }
                if let applied = ticket {
                    logged = true
                    if fenceAsked { fence = max(fence ?? 0, applied) }
                } else if fencing && !calls[index].isMutation {
                    if !fenceAsked {
                        fenceAsked = true
                        fence = log?.readFence()
                    }
                    ticket = fence
                }
                let disposition: Disposition = ticket.map { .replyAfter(ticket: $0, id: calls[index].id) } ?? .reply
                outcomes.append((Served(disposition: disposition, failed: error != nil, known: true), out.count))
            }
        }
        return logged
    }

    /// Handles a decoded request for `session` (its form, its role); the reply goes in its form.
    public func serve(_ request: Request, session: inout Session, into out: inout [UInt8]) -> Served {
        var calls: [Call] = []
        switch stage(request, session: &session, into: &out, calls: &calls) {
        case .served(let served):
            return served
        case .call:
            var outcomes: [(served: Served, end: Int)] = []
            run(calls[...], into: &out, outcomes: &outcomes)
            return outcomes[0].served
        case .service:
            return serveService(request, session: &session, into: &out)
        }
    }

    /// Serves a request `admit` handed back as `.service` (its role already checked).
    package func serveService(_ request: Request, session: inout Session, into out: inout [UInt8]) -> Served {
        guard let entry = table.entry(for: request.method), let service = entry.service else {
            preconditionFailure("staged as a service method: \(request.method)")
        }
        return serve(request, service: service, result: entry.result, session: &session, into: &out)
    }

    /// Runs one staged call with the state lock held, writing its reply param: a successful
    /// mutation is logged (under the same lock, so the log's order is the apply order). A keyed
    /// mutation's outcome is remembered (journaled with it when applied); a retry gets that
    /// outcome, once it is as durable as the first reply; the same key with another method or
    /// param is `keyReused`.
    /// `logTakes`: the log said it takes this mutation (with the rest of its turn) already.
    /// The call's key is read in place (its bytes where the journal body holds them): binding the
    /// whole `Keyed` copied its method, param and key, a retain and a release each, twice a keyed call.
    private func apply(
        _ calls: UnsafeBufferPointer<Call>, _ index: Int, state: inout Entities, readOnly: String?, logTakes: Bool, now: UInt64, into out: inout [UInt8]
    ) -> (RPCError?, UInt64?) {
        if calls[index].isMutation, let readOnly { return (.readOnly(readOnly), nil) }
        guard let hash = calls[index].keyed?.hash, let digest = calls[index].keyed?.digest else {
            if let refused = refusal(isMutation: calls[index].isMutation, logTakes: logTakes) { return (refused, nil) }
            return runPrepared(calls, index, state: &state, into: &out)
        }
        return Self.withKeyBytes(of: calls, index) { key in
            if let prior = state.keys.lookup(keyBytes: key, hash: hash, now: now) {
                guard calls[index].keyed?.matches(prior, body: calls[index].body) == true else {
                    let shown = Echo.bytes(Keyed.unscoped(key), maxBytes: 128)
                    return (.keyReused("key \"\(shown)\" was first used with another method or param; use a new key for a new mutation"), nil)
                }
                if let error = prior.error { return (error, nil) }
                out.append(contentsOf: prior.reply)
                return (nil, prior.seq > 0 ? prior.seq : nil)
            }
            // Refused by the log: not run, so nothing to remember.
            if let refused = refusal(isMutation: calls[index].isMutation, logTakes: logTakes) { return (refused, nil) }
            let start = out.count
            let (error, seq) = runPrepared(calls, index, state: &state, into: &out)
            if let error {
                state.keys.remember(keyBytes: key, hash: hash, .failure(error, digest: digest), now: now)
            } else {
                state.keys.rememberMissed(keyBytes: key, hash: hash, digest: digest, reply: out[start...], seq: seq ?? 0, now: now)
            }
            return (error, seq)
        }
    }

    /// Why the log takes no mutation now, for a mutation it did not take with its turn already.
    @inline(__always)
    private func refusal(isMutation: Bool, logTakes: Bool) -> RPCError? {
        guard isMutation, !logTakes, let log else { return nil }
        return log.refusalError()
    }

    /// Runs a call's prepared handler: a successful mutation is logged (its ticket returned).
    @inline(__always)
    private func runPrepared(_ calls: UnsafeBufferPointer<Call>, _ index: Int, state: inout Entities, into out: inout [UInt8]) -> (RPCError?, UInt64?) {
        if let error = calls[index].prepared(&state, &out) { return (error, nil) }
        guard calls[index].isMutation else { return (nil, nil) }
        return (nil, calls[index].body.flatMap { log?.record($0) })
    }

    /// Calls `body` with the UTF-8 bytes of a keyed call's key: where its journal body holds them,
    /// or its key's string.
    @inline(__always)
    private static func withKeyBytes<R>(of calls: UnsafeBufferPointer<Call>, _ index: Int, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        switch calls[index].keyed?.bytes {
        case .inBody(let range)?:
            // A key is `inBody` only where the call has the body that holds it.
            return calls[index].body!.bytes.withUnsafeBufferPointer { body(UnsafeBufferPointer(rebasing: $0[range])) }
        case .string(let string)?:
            return ExactUTF8.withBytes(string, body)
        case nil:
            preconditionFailure("the key of a call without one")
        }
    }

    /// A service method (`system.*`): on this thread, outside the state lock.
    private func serve(
        _ request: Request, service: MethodTable<Entities>.ServiceHandler, result: RPCMethod, session: inout Session,
        into out: inout [UInt8]
    ) -> Served {
        let form = session.form ?? .canonical
        guard let context else {
            RequestCodec.encodeError(id: request.id, .internal("\(request.method) is not served here"), form: form, into: &out)
            return Served(disposition: .reply, failed: true, known: true)
        }
        var later: (@Sendable (@escaping @Sendable (Result<[UInt8], RPCError>) -> Void) -> Void)?
        let error = RequestCodec.encode(id: request.id, method: result, form: form, into: &out) { out in
            switch service(request.param, &session, context, &out) {
            case .replied: return nil
            case .failed(let error): return error
            case .later(let start):
                later = start
                return nil
            }
        }
        guard let later else { return Served(disposition: .reply, failed: error != nil, known: true) }
        out.removeAll(keepingCapacity: true)
        let id = request.id
        return Served(disposition: .replyLater({ deliver in
            later { outcome in
                var line: [UInt8] = []
                switch outcome {
                case .success(let param):
                    _ = RequestCodec.encode(id: id, method: result, form: form, into: &line) { out in
                        out.append(contentsOf: param)
                        return nil
                    }
                case .failure(let error):
                    RequestCodec.encodeError(id: id, error, form: form, into: &line)
                }
                deliver(line)
            }
        }), failed: false, known: true)
    }

    /// The error for a method nobody serves: which part is unknown, the nearest name, and every method.
    public func methodNotFound(_ method: RPCMethod) -> RPCError {
        let known = table.entries.map(\.method)
        let hint = known.contains { $0.entity == method.entity }
            ? "entity \"\(Echo.text(method.entity))\" has no method \"\(Echo.text(method.name))\""
            : "there is no entity \"\(Echo.text(method.entity))\""
        let names = known.map(\.description)
        let suggestion = Suggestion.hint(for: method.description, among: names)
        return .methodNotFound("\(hint)\(suggestion); methods: \(names.joined(separator: ", "))")
    }

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

    /// Runs `body` with the state lock held (snapshots, stats).
    public func withState<T>(_ body: (inout Entities) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
