import RPCSchema

/// The methods a dispatcher accepts: wire name -> param decoding, handler, reply encoding.
///
/// Built from `RPCCall` types (sourcekit-lsp `MessageRegistry`), so `system.describe` and the
/// dispatcher read one table and cannot disagree.
public struct MethodTable<State>: Sendable {
    /// A decoded call, ready to run against the state: it appends the reply's param as JSON text
    /// to the buffer, or returns the error to send instead.
    ///
    /// A struct around the closure, not the closure itself: a closure handed through a generic
    /// (`Result`, `Optional.map`) is wrapped in a reabstraction thunk, a context allocated for each
    /// request and released in a chain after it (~900 instructions a get).
    public struct Prepared: Sendable {
        let call: @Sendable (inout State, inout [UInt8]) -> RPCError?
        /// Where the record the call reads or writes is looked up, when its method names one
        /// (`on(_:touches:)`): its table and its id's hash (`ExactID.fingerprint`), plain data.
        public let lookup: (table: Int, hash: Int)?

        public func callAsFunction(_ state: inout State, _ out: inout [UInt8]) -> RPCError? { call(&state, &out) }
    }

    /// The record a call reads or writes, named by its decoded param: its id is hashed once,
    /// before the state lock is taken, and the lock's holder asks the CPU for every call's record
    /// slot before it runs any, so their cache misses overlap instead of each holding the lock
    /// (`Entities.prefetch`).
    public struct Touch: Sendable {
        /// Which of the state's record tables, in the state's own numbering.
        public let table: Int
        public let id: String

        public init(table: Int, id: String) {
            self.table = table
            self.id = id
        }
    }

    /// Where a call's param comes from: left plain in the line (`PlainObject`), or parsed.
    package enum ParamSource {
        case plain(PlainObject)
        case parsed(JSONValue?)
    }

    /// Whether a prepared call writes its reply (a request), or only runs (journal replay of a
    /// record with no key, whose reply nobody reads: writing it was ~5% of a restart).
    package enum ReplyMode: Sendable {
        case written
        case discarded
    }

    /// An entry's one way to prepare a call: from a plain param (nil when it is not exactly the
    /// call's fields; prepare from the parsed param then, which decodes and words the error) or
    /// from the parsed one.
    package typealias Preparer = @Sendable (ParamSource, ReplyMode) -> Result<Prepared, RPCError>?

    /// A service method's handler: decodes the param, may update the session, and writes the reply
    /// param now, fails, or answers later (it runs on the connection's loop, outside the state lock).
    public typealias ServiceHandler = @Sendable (JSONValue?, inout Session, any ServiceContext, inout [UInt8]) -> ServiceOutcome

    public enum ServiceOutcome: Sendable {
        /// The reply param was written.
        case replied
        case failed(RPCError)
        /// The reply comes later: call the function with a completion that takes the reply param
        /// as JSON text, or the error.
        case later(@Sendable (@escaping @Sendable (Result<[UInt8], RPCError>) -> Void) -> Void)
    }

    /// Applies a replayed record of a create from its plain param's bytes, storing them as the
    /// record's fields with no value built (`storesPlain`): true when it did; false (the state
    /// unchanged) when the param is not exactly the call's fields or breaks a rule, and the record
    /// goes the usual way, which words the error.
    package typealias PlainStorer = @Sendable (inout State, PlainObject) -> Bool

    /// A class: a request looks its entry up and holds it while it is staged, and a struct copied
    /// out of the table retained each closure and array in it (a shared refcount both loops hit,
    /// per request); an instance costs one.
    public final class Entry: Sendable {
        public let method: RPCMethod
        /// The paired method a success is sent to (`user.getUserResult`), built once.
        public let result: RPCMethod
        /// `result`'s canonical head, written once for every reply.
        package let resultHead: MethodHead
        public let fields: [RPCField]
        /// `fields`' names in declared order: a keyed mutation's param is digested in this order.
        package let fieldNames: [String]
        public let isMutation: Bool
        /// What a caller needs: the role check reads it here, and so does `system.describe`.
        public let access: RPCAccess
        /// Set for methods answered around the state (`system.*`): then `prepare` is not used.
        public let service: ServiceHandler?
        /// Decodes the param (outside any lock) into a call to run against the state (`Preparer`).
        package let preparer: Preparer
        /// Set for a create whose replayed records may be stored from their bytes (`PlainStorer`).
        package let storer: PlainStorer?

        init(
            method: RPCMethod, result: RPCMethod, fields: [RPCField], isMutation: Bool, access: RPCAccess, service: ServiceHandler?,
            preparer: @escaping Preparer, storer: PlainStorer? = nil
        ) {
            self.preparer = preparer
            self.storer = storer
            self.method = method
            self.result = result
            self.resultHead = MethodHead(result)
            self.fields = fields
            self.fieldNames = fields.map(\.name)
            self.isMutation = isMutation
            self.access = access
            self.service = service
        }

        /// A call from the parsed param, with its reply written, or the error to answer.
        public func prepare(_ param: JSONValue?) -> Result<Prepared, RPCError> { prepare(param, .written) }

        /// A call from the parsed param (which always gives a call or an error), or the error.
        package func prepare(_ param: JSONValue?, _ mode: ReplyMode) -> Result<Prepared, RPCError> {
            preparer(.parsed(param), mode) ?? .failure(.internal("\(method) prepared no call; please report this bug"))
        }
    }

    /// Entries in registration order.
    public private(set) var entries: [Entry] = []
    /// `entries`' methods, in the same order.
    private var methods: [RPCMethod] = []
    /// `entries`' reply heads, in the same order: a staged call names its method by index, and
    /// the batch borrows the head from here (a call holding it retained and released a
    /// reference every loop shares, twice a request).
    package private(set) var resultHeads: [MethodHead] = []

    public init() {}

    /// Every request looks its method up here. A scan of the twenty-odd methods compares two
    /// strings each (short ones: a word or two apiece, nothing retained), where a dictionary
    /// hashed both strings first (~500 instructions a request); both use `String`'s `==`.
    public func entry(for method: RPCMethod) -> Entry? {
        index(of: method).map { entries[$0] }
    }

    /// Where `method`'s entry is in `entries`.
    package func index(of method: RPCMethod) -> Int? {
        // Lengths first: most names differ in length, and unequal strings of equal length take
        // `String ==`'s slow path.
        let length = method.name.utf8.count
        return methods.firstIndex(where: { $0.name.utf8.count == length && $0.name == method.name && $0.entity == method.entity })
    }

    /// Whether any method of `entity` exists (to tell "unknown entity" from "unknown method").
    public func hasEntity(_ entity: String) -> Bool { entries.contains { $0.method.entity == entity } }

    /// What a method needs unless its registration says otherwise: `write` for mutations, else `read`.
    public static func defaultAccess<C: RPCCall>(_ call: C.Type) -> RPCAccess { C.isMutation ? .write : .read }

    /// Registers `C` with its handler; the reply is written through its `Encodable` conformance.
    public mutating func on<C: RPCCall>(
        _ call: C.Type, access: RPCAccess? = nil, _ handler: @escaping @Sendable (inout State, C) throws(RPCError) -> C.Reply
    ) {
        register(call, access: access ?? Self.defaultAccess(call), touches: nil, { state, params, _ throws(RPCError) in try handler(&state, params) }) {
            reply, out in
            JSONWriter.write(encodable: reply, into: &out).map {
                RPCError.internal("could not encode the reply of \(C.method): \($0); please report this bug")
            }
        }
    }

    /// Registers `C` with its handler; the reply writes itself (`JSONWritable`, no intermediate tree).
    public mutating func on<C: RPCCall>(
        _ call: C.Type, access: RPCAccess? = nil, _ handler: @escaping @Sendable (inout State, C) throws(RPCError) -> C.Reply
    ) where C.Reply: JSONWritable {
        register(call, access: access ?? Self.defaultAccess(call), touches: nil, { state, params, _ throws(RPCError) in try handler(&state, params) }) {
            reply, out in
            reply.writeJSON(into: &out)
            return nil
        }
    }

    /// Lets a replayed record of `C`, a create registered already, be applied by `store` from its
    /// plain param's bytes (a follower applying its leader's records): what `C`'s handler would
    /// do, with its rules checked on the bytes, and no value decoded.
    package mutating func storesPlain<C: RPCCall>(_ call: C.Type, _ store: @escaping PlainStorer) {
        guard let index = index(of: C.method) else { preconditionFailure("\(C.method) stores plain params before it is registered") }
        let old = entries[index]
        entries[index] = Entry(
            method: old.method, result: old.result, fields: old.fields, isMutation: old.isMutation, access: old.access, service: old.service,
            preparer: old.preparer, storer: store)
    }

    /// Registers `C`, a call on one record: `touches` names the record from the decoded param, and
    /// the handler gets its id as an `ExactID` hashed once, before the state lock was taken.
    public mutating func on<C: RPCCall>(
        _ call: C.Type, access: RPCAccess? = nil, touches: @escaping @Sendable (C) -> Touch,
        _ handler: @escaping @Sendable (inout State, C, ExactID) throws(RPCError) -> C.Reply
    ) where C.Reply: JSONWritable {
        register(call, access: access ?? Self.defaultAccess(call), touches: touches, { state, params, hash throws(RPCError) in
            let id = touches(params).id
            return try handler(&state, params, hash.map { ExactID(id, fingerprint: $0) } ?? ExactID(id))
        }) { reply, out in
            reply.writeJSON(into: &out)
            return nil
        }
    }

    private mutating func register<C: RPCCall>(
        _ call: C.Type, access: RPCAccess, touches: (@Sendable (C) -> Touch)?,
        _ handler: @escaping @Sendable (inout State, C, Int?) throws(RPCError) -> C.Reply, write: @escaping @Sendable (C.Reply, inout [UInt8]) -> RPCError?
    ) {
        let fields = C.fields
        let method = C.method
        // A request's closure holds its param and this one runner: one reference to count, not
        // the handler's and the writer's.
        let runner = Runner(handler: handler, write: write)
        @Sendable func prepared(_ params: C, _ mode: ReplyMode) -> Prepared {
            guard mode == .written else { return Prepared(call: { state, _ in runner.runSilently(&state, params) }, lookup: nil) }
            guard let touches else { return Prepared(call: { state, out in runner.run(&state, params, nil, &out) }, lookup: nil) }
            let touch = touches(params)
            let hash = ExactID.fingerprint(of: touch.id)
            return Prepared(call: { state, out in runner.run(&state, params, hash, &out) }, lookup: (touch.table, hash))
        }
        let decodePlain = Self.plainDecoder(C.self)
        let preparer: Preparer = { source, mode in
            // No `Optional.map` or `Result.map`: each copied the decoded call once more.
            switch source {
            case .plain(let plain):
                guard let decodePlain, let params = decodePlain(plain) else { return nil }
                return .success(prepared(params, mode))
            case .parsed(let param):
                switch ParamDecoding.decode(C.self, from: param, fields: fields) {
                case .success(let params): return .success(prepared(params, mode))
                case .failure(let error): return .failure(error)
                }
            }
        }
        let entry = Entry(
            method: method, result: method.result, fields: fields, isMutation: C.isMutation, access: access, service: nil, preparer: preparer)
        add(entry)
    }

    /// `C`'s decoder from a plain param, when `C` has one (`FastDecodable`). Looked up once, at
    /// registration: a cast per request costs more than the decoding.
    static func plainDecoder<C: RPCCall>(_ call: C.Type) -> (@Sendable (PlainObject) -> C?)? {
        func opened<F: FastDecodable>(_ fast: F.Type) -> @Sendable (PlainObject) -> C? {
            precondition(F.self == C.self)
            // F is C: the cast is an identity.
            return { F.decode(plain: $0).map { unsafeBitCast($0, to: C.self) } }
        }
        return (call as? any FastDecodable.Type).map { opened($0) }
    }

    private mutating func add(_ entry: Entry) {
        precondition(self.entry(for: entry.method) == nil, "\(entry.method) registered twice")
        methods.append(entry.method)
        entries.append(entry)
        resultHeads.append(entry.resultHead)
    }

    /// A method's handler and reply writer, shared by its requests' prepared calls.
    private final class Runner<C: RPCCall>: Sendable {
        let handler: @Sendable (inout State, C, Int?) throws(RPCError) -> C.Reply
        let write: @Sendable (C.Reply, inout [UInt8]) -> RPCError?

        init(
            handler: @escaping @Sendable (inout State, C, Int?) throws(RPCError) -> C.Reply,
            write: @escaping @Sendable (C.Reply, inout [UInt8]) -> RPCError?
        ) {
            self.handler = handler
            self.write = write
        }

        /// `hash`: the record's id's, when the call names one and it was hashed already.
        func run(_ state: inout State, _ params: C, _ hash: Int?, _ out: inout [UInt8]) -> RPCError? {
            do throws(RPCError) {
                return write(try handler(&state, params, hash), &out)
            } catch {
                return error
            }
        }

        /// `run`, the reply not written (`ReplyMode.discarded`).
        func runSilently(_ state: inout State, _ params: C) -> RPCError? {
            do throws(RPCError) {
                _ = try handler(&state, params, nil)
                return nil
            } catch {
                return error
            }
        }
    }

    /// What a service handler returns: the reply now, an error, or the reply later.
    public enum ServiceResult<Reply: Sendable>: Sendable {
        case now(Reply)
        case failure(RPCError)
        case later(@Sendable (@escaping @Sendable (Result<Reply, RPCError>) -> Void) -> Void)
    }

    /// Registers a service method (answered around the state, never journaled): `handler` gets the
    /// decoded param, the connection's session and the daemon's context, on the connection's loop.
    public mutating func service<C: RPCCall>(
        _ call: C.Type, access: RPCAccess,
        _ handler: @escaping @Sendable (C, inout Session, any ServiceContext) -> ServiceResult<C.Reply>
    ) {
        let fields = C.fields
        let method = C.method
        @Sendable func write(_ reply: C.Reply, into out: inout [UInt8]) -> RPCError? {
            JSONWriter.write(encodable: reply, into: &out).map {
                RPCError.internal("could not encode the reply of \(C.method): \($0); please report this bug")
            }
        }
        let run: ServiceHandler = { param, session, context, out in
            let params: C
            switch ParamDecoding.decode(C.self, from: param, fields: fields) {
            case .success(let decoded): params = decoded
            case .failure(let error): return .failed(error)
            }
            switch handler(params, &session, context) {
            case .now(let reply): return write(reply, into: &out).map { .failed($0) } ?? .replied
            case .failure(let error): return .failed(error)
            case .later(let start):
                return .later { done in
                    start { result in
                        done(result.flatMap { reply in
                            var bytes: [UInt8] = []
                            return write(reply, into: &bytes).map { .failure($0) } ?? .success(bytes)
                        })
                    }
                }
            }
        }
        let notHere: Preparer = { _, _ in
            .failure(.internal("\(method) is a service method; it does not run against the state and is never journaled"))
        }
        add(Entry(method: method, result: method.result, fields: fields, isMutation: false, access: access, service: run, preparer: notHere))
    }
}

/// Param decoding with errors a person can act on.
enum ParamDecoding {
    private static let decoder = JSONValueDecoder()

    static func decode<C: RPCCall>(_ type: C.Type, from param: JSONValue?, fields: [RPCField]) -> Result<C, RPCError> {
        let value = param ?? .object(JSONObject())
        guard case .object(let object) = value else {
            return .failure(.invalidParams("param of \(C.method) must be an object with \(expected(fields))"))
        }
        if let call = C.decode(fastParams: object) { return .success(call) }
        if let unknown = object.pairs.first(where: { pair in !fields.contains { ExactUTF8.equal($0.name, pair.key) } })?.key {
            return .failure(.invalidParams("unknown field \"\(unknown)\" in param of \(C.method); expected \(expected(fields))"))
        }
        do {
            return .success(try decoder.decode(C.self, from: value))
        } catch let error as DecodingError {
            return .failure(.invalidParams("\(describe(error)) in param of \(C.method); expected \(expected(fields))"))
        } catch {
            return .failure(.invalidParams("bad param for \(C.method): \(error)"))
        }
    }

    /// `{id: string, name: string, email?: string}`
    static func expected(_ fields: [RPCField]) -> String {
        "{" + fields.map { "\($0.name)\($0.optional ? "?" : ""): \($0.type)" }.joined(separator: ", ") + "}"
    }

    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined().drop(while: { $0 == "." }).description
        }
        switch error {
        case .keyNotFound(let key, let context):
            let full = path(context.codingPath + [key])
            return "missing field \"\(full)\""
        case .valueNotFound(_, let context):
            return "field \"\(path(context.codingPath))\" is null"
        case .typeMismatch(_, let context), .dataCorrupted(let context):
            let at = path(context.codingPath)
            return at.isEmpty ? context.debugDescription : "field \"\(at)\": \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}
