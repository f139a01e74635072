/// The two spellings of a request on the wire. Both are accepted on every connection; replies go in
/// the form of the connection's first request.
public enum WireForm: Sendable, Hashable {
    /// `{"id":"1","method":"user.getUser","param":{"userId":"u1"}}`
    case canonical
    /// What Swift's `JSONEncoder` writes for an enum-typed method and entity-wrapped param:
    /// `{"id":"1","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"u1"}}}}`
    case seed
}

/// A decoded request envelope; `param` is the method's own param object (the seed wrapper removed).
public struct Request: Sendable, Equatable {
    public var id: String
    public var method: RPCMethod
    public var param: JSONValue?
    public var form: WireForm
    /// The idempotency key of a mutation (`"key"` beside id, method and param): the same key with
    /// the same method and param has its effect once and gets the first outcome again.
    public var key: String?

    /// The longest key, in UTF-8 bytes.
    public static let maxKeyBytes = 128

    public init(id: String, method: RPCMethod, param: JSONValue?, form: WireForm = .canonical, key: String? = nil) {
        self.id = id
        self.method = method
        self.param = param
        self.form = form
        self.key = key
    }

    /// The request with its param parsed from `plain` (a request decoded with its param left
    /// plain has none); itself when `plain` is nil.
    package func withParam(from plain: PlainObject?) -> Request {
        guard let plain else { return self }
        var request = self
        request.param = plain.value
        return request
    }
}

/// What one line turned out to be.
public enum DecodedLine: Sendable {
    /// A request to serve.
    case request(Request)
    /// A counter-request (`…Result` or `error.error`): handed to a local handler, never answered.
    case counterRequest(Request)
    /// Not a request: answer with `error.error`, echoing `id` ("" when no string id was found).
    case invalid(id: String, error: RPCError, form: WireForm?)
}

/// One line as `RequestCodec.scan` read it: what it is, and what the decoder left in its bytes.
package struct ScannedLine {
    package var decoded: DecodedLine
    package var left: LeftInLine
}

/// What the decoder left in a line's bytes instead of copying (valid while the line is; plain
/// values, nothing to retain).
package struct LeftInLine {
    /// The line's `,"method":"…","param":…` when they are exactly what a writer writes for the
    /// request's method and param (a journal record copies them); nil for any other shape.
    package var methodAndParam: UnsafeRawBufferPointer?
    /// A request's param when it is an object of plain strings, left unparsed: the request's
    /// `param` is then nil (`Request.withParam(from:)` fills it in).
    package var plainParam: PlainObject?
    /// A request's key when it is plain ASCII, left in the line: the request's `key` is then nil.
    package var plainKey: UnsafeRawBufferPointer?

    package init(methodAndParam: UnsafeRawBufferPointer? = nil, plainParam: PlainObject? = nil, plainKey: UnsafeRawBufferPointer? = nil) {
        self.methodAndParam = methodAndParam
        self.plainParam = plainParam
        self.plainKey = plainKey
    }
}

/// Decodes and encodes the envelope: the one place that knows both wire forms (sourcekit-lsp `MessageCoding`).
public enum RequestCodec {
    /// The top-level keys of a request, in the order lines are written.
    public static let envelopeKeys = ["id", "method", "param", "key"]

    /// Top-level keys beside the envelope that journal and snapshot lines carry (`seq`, the
    /// record's sequence number; `crc`, its checksum, always last) and that the decoder accepts
    /// and ignores, so those lines replay through `nc` as they are. The one list of them: add a
    /// new envelope key here.
    public static let envelopeExtensionKeys = ["seq", "crc"]

    /// Decodes one line. A request with a top-level key outside `envelopeKeys` and
    /// `envelopeExtensionKeys` is invalid (`"params"` is a JSON-RPC habit, not a field of ours);
    /// counter-requests are never answered, so theirs are not checked.
    public static func decode(_ line: UnsafeRawBufferPointer) -> DecodedLine {
        if let (decoded, _, _, _) = decodeWritten(line) { return decoded }
        return decodeInFull(line)
    }

    /// `decode`, and what the decoder left in the line's bytes (`ScannedLine`): the request
    /// pipeline stages from this one value. Without `plainParams` the param is always parsed and
    /// the key is always a string (a journal's replay reads lines this way).
    package static func scan(_ line: UnsafeRawBufferPointer, plainParams: Bool = true) -> ScannedLine {
        if let (decoded, range, plain, keySpan) = decodeWritten(line, plainParams: plainParams) {
            let left = LeftInLine(
                methodAndParam: range.map { UnsafeRawBufferPointer(rebasing: line[$0]) }, plainParam: plain,
                plainKey: keySpan.map { UnsafeRawBufferPointer(rebasing: line[$0]) })
            return ScannedLine(decoded: decoded, left: left)
        }
        return ScannedLine(decoded: decodeInFull(line), left: LeftInLine())
    }

    private static let ackPrefix: StaticString = #"{"id":"r"#
    private static let ackMethod: StaticString = #"","method":""#
    private static let resultSuffix: StaticString = "Result"
    private static let errorMethod: StaticString = "error.error"

    /// The sequence number a line acknowledges, when it starts like the counter-request a feed's
    /// subscriber sends for record "r<seq>": `{"id":"r42","method":"user.createUserResult",…` or
    /// `…"method":"error.error",…`, read without parsing its param (one per record). Anything
    /// else (nil) is decoded as usual.
    package static func feedAcknowledgement(_ line: UnsafeRawBufferPointer) -> UInt64? {
        let (ackPrefix, ackMethod, resultSuffix) = (Self.ackPrefix.bytes, Self.ackMethod.bytes, Self.resultSuffix.bytes)
        guard line.count > ackPrefix.count, line.starts(with: ackPrefix) else { return nil }
        var index = ackPrefix.count
        var seq: UInt64 = 0
        var digits = 0
        while index < line.count, line[index] >= 48, line[index] <= 57, digits < 20 {
            let (times, o1) = seq.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(line[index] - 48))
            guard !o1, !o2 else { return nil }
            seq = sum
            digits += 1
            index += 1
        }
        guard digits > 0, line.count - index > ackMethod.count,
            UnsafeRawBufferPointer(rebasing: line[index..<(index + ackMethod.count)]).elementsEqual(ackMethod)
        else { return nil }
        let start = index + ackMethod.count
        guard let end = line[start...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        let method = UnsafeRawBufferPointer(rebasing: line[start..<end])
        guard method.count > resultSuffix.count && method.suffix(resultSuffix.count).elementsEqual(resultSuffix)
            || method.elementsEqual(Self.errorMethod.bytes)
        else { return nil }
        return seq
    }

    private static func decodeInFull(_ line: UnsafeRawBufferPointer) -> DecodedLine {
        let value: JSONValue
        do {
            value = try JSONParser.parse(line)
        } catch {
            return .invalid(id: "", error: .parseError("the line is not valid JSON: \(error); send one JSON object per line"), form: nil)
        }
        return decode(value)
    }

    /// A canonical line in the shape every writer gives it, `{"id":"…","method":"…","param":…}`
    /// with an optional `,"key":"…"` and then, as journal lines and the change feed carry them, an
    /// optional `,"seq":N` and `,"crc":"…"` before the closing brace (id, method, key and crc in
    /// plain ASCII), read without building the envelope as a JSON object; nil for any other line,
    /// which the full decode then reads. It accepts nothing the full decode would refuse and reads
    /// it the same way (tests hold the two equal): seq and crc are ignored by both.
    /// With it, where method and param lie when they are what a writer writes for them.
    @inline(__always)
    static func decodeWritten(
        _ line: UnsafeRawBufferPointer, plainParams: Bool = false
    ) -> (DecodedLine, methodAndParam: Range<Int>?, plain: PlainObject?, keySpan: Range<Int>?)? {
        var scan = EnvelopeScanner(line)
        guard let (id, methodText, param, plain, key, keySpan, methodAndParam) = scan.requestHead(plainParams: plainParams),
            let method = RPCMethod.known(scan.slice(methodText)) ?? RPCMethod(parsing: scan.text(methodText)),
            !scan.expect(EnvelopeScanner.seqPrefix.bytes) || scan.wholeNumber() != nil,
            !scan.expect(EnvelopeScanner.crcPrefix.bytes) || scan.plainString() != nil,
            scan.expect(EnvelopeScanner.closingBrace.bytes), scan.atEnd
        else { return nil }
        if method.isCounterRequest {
            return (.counterRequest(Request(id: id, method: method, param: plain?.value ?? param, form: .canonical)), methodAndParam, nil, nil)
        }
        // With `plainParams` the key stays in the line (`keySpan`); without, it is `key`.
        return (.request(Request(id: id, method: method, param: param, form: .canonical, key: key)), methodAndParam, plain, plainParams ? keySpan : nil)
    }

    public static func decode(_ value: JSONValue) -> DecodedLine {
        guard case .object(let object) = value else {
            return .invalid(id: "", error: .invalidRequest("a request must be a JSON object with id, method and param"), form: nil)
        }
        let id = object["id"]?.stringValue
        // Every problem of the envelope is named in the one error (a JSON-RPC habit has three).
        var problems: [RPCError] = []
        let method: (RPCMethod, WireForm)?
        switch object["method"] {
        case nil, .null?:
            problems.append(.invalidRequest("the request has no method; add \"method\":\"entity.method\""))
            method = nil
        case .string(let text)?:
            method = RPCMethod(parsing: text).map { ($0, .canonical) }
            if method == nil {
                problems.append(.methodNotFound("method \"\(Echo.text(text))\" is not of the form entity.method, e.g. user.getUser"))
            }
        case .object(let seed)?:
            method = seedMethod(seed).map { ($0, .seed) }
            if method == nil { problems.append(Self.badMethod) }
        default:
            method = nil
            problems.append(Self.badMethod)
        }
        var param: JSONValue?
        if let (name, form) = method {
            switch (form, object["param"]) {
            case (_, nil), (_, .null?):
                param = nil
            case (.canonical, let value?):
                param = value
            case (.seed, let value?):
                if let inner = seedParam(value, method: name) {
                    param = inner
                } else if name.isCounterRequest {
                    param = value
                } else {
                    problems.append(.invalidParams("a seed-form param must be {\"\(name.entity)\":{\"\(name.name)\":{...}}}"))
                }
            }
            if problems.isEmpty && name.isCounterRequest { return .counterRequest(Request(id: id ?? "", method: name, param: param, form: form)) }
        }
        var key: String?
        switch object["key"] {
        case nil, .null?:
            break
        case .string(let text)? where !text.isEmpty && text.utf8.count <= Request.maxKeyBytes:
            key = text
        default:
            problems.append(.invalidRequest("\"key\" must be a string of 1 to \(Request.maxKeyBytes) bytes, unique per mutation you want applied once"))
        }
        let unknown = object.keys.filter { !isEnvelopeKey($0) }
        if !unknown.isEmpty {
            let each = unknown.prefix(4).map { "\"\(Echo.text($0))\" is not a field of a request\(Suggestion.hint(for: $0, among: envelopeKeys))" }
            let known = envelopeKeys.map { "\"\($0)\"" }.joined(separator: ", ")
            problems.append(.invalidRequest(each.joined(separator: "; ") + " (a request has \(known))"))
        }
        switch object["id"] {
        case .string?: break
        case nil: problems.append(.invalidRequest("the request has no id; add \"id\":\"<string>\""))
        default: problems.append(.invalidRequest("the request id must be a string, e.g. \"id\":\"1\""))
        }
        guard let first = problems.first else {
            guard let (name, form) = method else { preconditionFailure("a request without problems has a method") }
            return .request(Request(id: id ?? "", method: name, param: param, form: form, key: key))
        }
        // The id is echoed when it is one (a string); the form is known once the method is.
        let message = problems.map(\.errorMessage).joined(separator: "; ")
        return .invalid(id: id ?? "", error: RPCError(first.code, message), form: method?.1)
    }

    private static let badMethod = RPCError.invalidRequest("method must be a string \"entity.method\" or a seed-form object {\"entity\":{\"_0\":\"method\"}}")

    private static func isEnvelopeKey(_ key: String) -> Bool {
        envelopeKeys.contains(key) || envelopeExtensionKeys.contains(key)
    }

    /// `{"user":{"_0":"getUser"}}` -> user.getUser
    private static func seedMethod(_ seed: JSONObject) -> RPCMethod? {
        guard seed.count == 1, let (entity, inner) = seed.pairs.first.map({ ($0.key, $0.value) }),
            case .object(let payload) = inner, payload.count == 1, case .string(let name)? = payload["_0"],
            !entity.isEmpty, !name.isEmpty,
            // Exactly one canonical spelling, `entity.method`: neither part may hold a dot.
            !entity.utf8.contains(UInt8(ascii: ".")), !name.utf8.contains(UInt8(ascii: "."))
        else { return nil }
        return RPCMethod(entity, name)
    }

    /// `{"user":{"getUser":{...}}}` -> {...}
    private static func seedParam(_ value: JSONValue, method: RPCMethod) -> JSONValue? {
        guard case .object(let outer) = value, outer.count == 1, case .object(let inner)? = outer[method.entity],
            inner.count == 1, let param = inner[method.name]
        else { return nil }
        return param
    }

    // MARK: - Encoding

    /// Appends one line (with its `\n`) calling `method` with `param` in the given form.
    public static func encode(id: String, method: RPCMethod, param: JSONValue?, form: WireForm, into out: inout [UInt8]) {
        guard let param else {
            beginLine(id: id, method: method, form: form, into: &out)
            JSONWriter.appendASCII("}\n", into: &out)
            return
        }
        encode(id: id, method: method, form: form, into: &out) { out in
            JSONWriter.write(param, into: &out)
            return nil
        }
    }

    /// Appends one line calling `method`, whose param `writeParam` appends as JSON text in place
    /// (no intermediate value). `writeParam` returns nil, or an error to send instead (the partial
    /// line is taken back and an `error.error` written in its place).
    @discardableResult
    public static func encode(
        id: String, method: RPCMethod, form: WireForm, into out: inout [UInt8],
        param writeParam: (inout [UInt8]) -> RPCError?
    ) -> RPCError? {
        let mark = out.count
        beginLine(id: id, method: method, form: form, param: true, into: &out)
        if form == .seed {
            out.append(UInt8(ascii: "{"))
            JSONWriter.writeString(method.entity, into: &out)
            JSONWriter.appendASCII(":{", into: &out)
            JSONWriter.writeString(method.name, into: &out)
            out.append(UInt8(ascii: ":"))
        }
        return endLine(from: mark, id: id, form: form, into: &out, param: writeParam)
    }

    /// Writes the param (or, for its error, takes the line back from `mark` and writes an
    /// `error.error` there instead) and closes the line.
    private static func endLine(
        from mark: Int, id: String, form: WireForm, into out: inout [UInt8], param writeParam: (inout [UInt8]) -> RPCError?
    ) -> RPCError? {
        if let error = writeParam(&out) {
            out.removeSubrange(mark...)
            encodeError(id: id, error, form: form, into: &out)
            return error
        }
        if form == .seed { JSONWriter.appendASCII("}}", into: &out) }
        JSONWriter.appendASCII("}\n", into: &out)
        return nil
    }

    /// `encode(id:method:form:into:param:)` for a method whose canonical head is written once
    /// (`MethodHead`): the canonical line copies it after the id, where writing the method's
    /// two names checked each for escapes (~300 instructions a reply).
    @discardableResult
    package static func encode(
        id: String, head: MethodHead, form: WireForm, into out: inout [UInt8], param writeParam: (inout [UInt8]) -> RPCError?
    ) -> RPCError? {
        guard form == .canonical else { return encode(id: id, method: head.method, form: form, into: &out, param: writeParam) }
        let mark = out.count
        let gathered = JSONWriter.gathered(into: &out) { line in
            line.literal(#"{"id":""#)
            line.plain(id)
            line.raw(head.canonical)
        }
        if !gathered {
            JSONWriter.appendASCII(#"{"id":""#, into: &out)
            JSONWriter.appendEscaped(id, into: &out)
            out.append(contentsOf: head.canonical)
        }
        return endLine(from: mark, id: id, form: form, into: &out, param: writeParam)
    }

    /// `{"id":"…","method":…` and, with `param`, `,"param":` (no closing brace). The quotes and
    /// commas ride in the literals around each string: one append per piece (each costs about as
    /// much for one byte as for twenty, and every reply line begins here).
    private static func beginLine(id: String, method: RPCMethod, form: WireForm, param: Bool = false, into out: inout [UInt8]) {
        if form == .canonical {
            let gathered = JSONWriter.gathered(into: &out) { line in
                line.literal(#"{"id":""#)
                line.plain(id)
                line.literal(#"","method":""#)
                line.plain(method.entity)
                line.byte(UInt8(ascii: "."))
                line.plain(method.name)
                line.literal(param ? #"","param":"# : #"""#)
            }
            if gathered { return }
        }
        JSONWriter.appendASCII(#"{"id":""#, into: &out)
        JSONWriter.appendEscaped(id, into: &out)
        switch form {
        case .canonical:
            JSONWriter.appendASCII(#"","method":""#, into: &out)
            JSONWriter.appendEscaped(method.entity, into: &out)
            out.append(UInt8(ascii: "."))
            JSONWriter.appendEscaped(method.name, into: &out)
            JSONWriter.appendASCII(param ? #"","param":"# : #"""#, into: &out)
        case .seed:
            JSONWriter.appendASCII(#"","method":{""#, into: &out)
            JSONWriter.appendEscaped(method.entity, into: &out)
            JSONWriter.appendASCII(#"":{"_0":""#, into: &out)
            JSONWriter.appendEscaped(method.name, into: &out)
            JSONWriter.appendASCII(param ? #""}},"param":"# : #""}}"#, into: &out)
        }
    }

    public static func encode(_ request: Request, into out: inout [UInt8]) {
        encode(id: request.id, method: request.method, param: request.param, form: request.form, into: &out)
        guard let key = request.key else { return }
        out.removeLast(2)  // "}\n"
        JSONWriter.appendASCII(#","key":"#, into: &out)
        JSONWriter.writeString(key, into: &out)
        JSONWriter.appendASCII("}\n", into: &out)
    }

    /// Appends an `error.error` counter-request.
    public static func encodeError(id: String, _ error: RPCError, form: WireForm, into out: inout [UInt8]) {
        let param: JSONValue = .object(JSONObject([
            (key: "errorMessage", value: .string(error.errorMessage)),
            (key: "code", value: .string(error.code.rawValue)),
        ]))
        encode(id: id, method: .error, param: param, form: form, into: &out)
    }
}

/// What a canonical line calling `method` holds between its id and its param,
/// `","method":"entity.name","param":`, written once (a method table's result methods).
/// Its bytes live as long as it does.
package final class MethodHead: @unchecked Sendable {
    // @unchecked: `canonical` is written once, in `init`, and only read after.
    package let method: RPCMethod
    package let canonical: UnsafeRawBufferPointer

    package init(_ method: RPCMethod) {
        self.method = method
        var bytes = Array(#"","method":""#.utf8)
        JSONWriter.appendEscaped(method.entity, into: &bytes)
        bytes.append(UInt8(ascii: "."))
        JSONWriter.appendEscaped(method.name, into: &bytes)
        bytes += #"","param":"#.utf8
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
        bytes.withUnsafeBytes { storage.copyMemory(from: $0) }
        canonical = UnsafeRawBufferPointer(storage)
    }

    deinit { canonical.deallocate() }
}
