import RPCSchema

/// The methods a dispatcher accepts: wire name -> param decoding, handler, reply encoding.
///
/// Built from `RPCCall` types (sourcekit-lsp `MessageRegistry`), so `system.describe` and the
/// dispatcher read one table and cannot disagree.
public struct MethodTable<State>: Sendable {
    /// A decoded call, ready to run against the state: it appends the reply's param as JSON text
    /// to the buffer, or returns the error to send instead.
    public typealias Prepared = @Sendable (inout State, inout [UInt8]) -> RPCError?

    public struct Entry: Sendable {
        public let method: RPCMethod
        /// The paired method a success is sent to (`user.getUserResult`), built once.
        public let result: RPCMethod
        public let fields: [RPCField]
        public let isMutation: Bool
        /// Decodes the param (outside any lock) into a call to run against the state.
        public let prepare: @Sendable (JSONValue?) -> Result<Prepared, RPCError>
        /// Like `prepare`, but the call encodes no reply, only the error if any (journal replay).
        public let prepareSilent: @Sendable (JSONValue?) -> Result<@Sendable (inout State) -> RPCError?, RPCError>
    }

    private var byMethod: [RPCMethod: Entry] = [:]
    /// Entries in registration order.
    public private(set) var entries: [Entry] = []

    public init() {}

    public func entry(for method: RPCMethod) -> Entry? { byMethod[method] }

    /// Whether any method of `entity` exists (to tell "unknown entity" from "unknown method").
    public func hasEntity(_ entity: String) -> Bool { entries.contains { $0.method.entity == entity } }

    /// Registers `C` with its handler; the reply is written through its `Encodable` conformance.
    public mutating func on<C: RPCCall>(
        _ call: C.Type, _ handler: @escaping @Sendable (inout State, C) throws(RPCError) -> C.Reply
    ) {
        register(call, handler) { reply, out in
            JSONWriter.write(encodable: reply, into: &out).map {
                RPCError.internal("could not encode the reply of \(C.method): \($0); please report this bug")
            }
        }
    }

    /// Registers `C` with its handler; the reply writes itself (`JSONWritable`, no intermediate tree).
    public mutating func on<C: RPCCall>(
        _ call: C.Type, _ handler: @escaping @Sendable (inout State, C) throws(RPCError) -> C.Reply
    ) where C.Reply: JSONWritable {
        register(call, handler) { reply, out in
            reply.writeJSON(into: &out)
            return nil
        }
    }

    private mutating func register<C: RPCCall>(
        _ call: C.Type, _ handler: @escaping @Sendable (inout State, C) throws(RPCError) -> C.Reply,
        write: @escaping @Sendable (C.Reply, inout [UInt8]) -> RPCError?
    ) {
        let fields = C.fields
        let method = C.method
        let silent: @Sendable (JSONValue?) -> Result<@Sendable (inout State) -> RPCError?, RPCError> = { param in
            ParamDecoding.decode(C.self, from: param, fields: fields).map { params in
                { state in
                    do throws(RPCError) {
                        _ = try handler(&state, params)
                        return nil
                    } catch {
                        return error
                    }
                }
            }
        }
        let entry = Entry(method: method, result: method.result, fields: fields, isMutation: C.isMutation, prepare: { param in
            let params: C
            switch ParamDecoding.decode(C.self, from: param, fields: fields) {
            case .success(let decoded): params = decoded
            case .failure(let error): return .failure(error)
            }
            return .success { state, out in
                do throws(RPCError) {
                    return write(try handler(&state, params), &out)
                } catch {
                    return error
                }
            }
        }, prepareSilent: silent)
        precondition(byMethod[method] == nil, "\(method) registered twice")
        byMethod[method] = entry
        entries.append(entry)
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
        if let unknown = object.keys.first(where: { key in !fields.contains { ExactUTF8.equal($0.name, key) } }) {
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
