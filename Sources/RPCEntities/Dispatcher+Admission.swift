import RPCSchema

/// The request pipeline's front: every line goes through `admit`, which decodes it once and
/// authorizes, prepares and stages it (outside the state lock), or answers it at once.
extension Dispatcher {
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
            return .answered(Served(disposition: .reply, failed: true, known: true), id: id, method: nil, form: replyForm)
        }
    }

    /// Handles a decoded request for a connection that may call everything; the reply goes in `form`.
    public func handle(_ request: Request, form: WireForm, into out: inout [UInt8]) -> Disposition {
        var session = Session()
        session.form = form
        return serve(request, session: &session, into: &out).disposition
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
        if let scope = session.principal, request.key != nil || left.plainKey != nil, table.entry(for: request.method)?.isMutation == true {
            // A principal's keys are its own: the key table, the journal and the feed hold them as
            // `NAME\u0000KEY`, so another principal can neither read the outcome nor block the key.
            let key = request.key ?? left.plainKey.map { String(decoding: $0, as: UTF8.self) } ?? ""
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
            var left = left
            left.plainKey = nil
            return stageRequest(request, left: left, session: &session, into: &out, calls: &calls)
        }
        return stageRequest(request, left: left, session: &session, into: &out, calls: &calls)
    }

    private func stageRequest(
        _ request: Request, left: LeftInLine, session: inout Session, into out: inout [UInt8], calls: inout [Call]
    ) -> Stage {
        let (lineBytes, plainParam, plainKey) = (left.methodAndParam, left.plainParam, left.plainKey)
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
}
