import CRPCLinux
import RPCSchema

/// Turns request lines into counter-request lines: decode the envelope, find the method, run it
/// against the entities, encode the reply in the connection's wire form.
///
/// Thread-safe: any number of connection queues call `handle` at once; the entity state is guarded
/// by one lock held only while a handler runs (decoding and encoding happen outside it).
public final class Dispatcher: @unchecked Sendable {
    // @unchecked: `state` is only touched with `lock` held, one `inout` access a batch.
    let lock = SpinningLock()
    var state: Entities
    public let table: MethodTable<Entities>
    let log: MutationLog?
    let onCounterRequest: @Sendable (Request) -> Void
    /// What the service methods (`system.*`) read; nil: they answer `internal`.
    let context: (any ServiceContext)?
    /// Set on a follower: why mutations from clients are refused (guarded by `lock`).
    var readOnlyMessage: String?

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

    /// What serving one request came to, for statistics.
    public struct Served: Sendable {
        public var disposition: Disposition
        /// The reply is an `error.error`.
        public var failed: Bool
        /// The method is in the table, or the line was no request (counted as an invalid line);
        /// false: unknown methods, counted together.
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

    /// Runs `body` with the state lock held (snapshots, stats).
    public func withState<T>(_ body: (inout Entities) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
