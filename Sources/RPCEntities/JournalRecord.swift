import RPCSchema

/// One journal line: the canonical request line of an applied mutation with its sequence number
/// and a checksum as two more top-level keys, e.g.
///
///     {"id":"7","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"seq":42,"crc":"8c3e2b1f"}
///
/// The checksum seals the line: `"crc"` is always the last key, and its value is the CRC-32C of
/// every byte of the line before `,"crc":"` (from the opening `{` through the last digit of
/// `seq`), as 8 lowercase hex digits. So every sealed line ends with exactly the 18 bytes
/// `,"crc":"hhhhhhhh"}` before its `\n`, and checking it needs no JSON parse. Snapshot lines are
/// sealed the same way (they have no `seq`).
///
/// The request decoder ignores the journal's extra keys (`RequestCodec.envelopeExtensionKeys`), so
/// a journal can be read with `less` and replayed into an empty daemon with `nc`. Lines written
/// before checksums (no `"crc"`) are still read; see `JournalReplay` for where they may appear.
public enum JournalRecord {
    /// Appends the sealed line (with its `\n`) for `request`, applied as mutation number `seq`,
    /// keeping the request's own id (tools and tests; the daemon's journal writes `Body`s).
    public static func encode(_ request: Request, seq: UInt64, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: idPrefix.bytes)
        JSONWriter.writeString(request.id, into: &out)
        finish(Body(request), seq: seq, lineStart: start, into: &out)
    }

    /// The bytes of a record that do not depend on its sequence number: everything from
    /// `,"method":` through `,"seq":`. Encoded before the state lock is taken, so the lock covers
    /// only writing the number twice, a copy and the checksum (about 60 ns a line).
    public struct Body: Sendable {
        let bytes: [UInt8]
        /// `IdempotencyKeys.digest` of a keyed request, hashed from the bytes just encoded.
        let digest: UInt64?
        /// Where `,"method":…,"param":…` ends in `bytes`.
        let methodAndParamEnd: Int
        /// Where the key's bytes lie in `bytes`, when they were copied from a plain key (no escape
        /// in them: the key's own bytes); the key table reads them there.
        let plainKeyRange: Range<Int>?

        public init(_ request: Request) {
            self.init(request, param: request.param, methodAndParam: nil)
        }

        /// `methodAndParam`: the request line's `,"method":"…","param":…`, when those bytes are
        /// exactly what `appendMethodAndParam` writes for the request (`RequestCodec.decode(_:methodAndParam:)`
        /// says so): copied, not written again (~1,500 instructions a create).
        /// `param`: the request's param (a request decoded with its param left plain has none); with
        /// `methodAndParam`, only debug builds read it, to check the copied bytes.
        /// `plainKey`: the key's bytes in the request line, plain ASCII (`RequestCodec.decode(_:methodAndParam:plainParam:plainKey:)`),
        /// for a request whose `key` was left there.
        package init(_ request: Request, param: JSONValue?, methodAndParam: UnsafeRawBufferPointer?, plainKey: UnsafeRawBufferPointer? = nil) {
            var out: [UInt8] = []
            out.reserveCapacity(160)
            if let methodAndParam {
                out.append(contentsOf: methodAndParam)
                assert(out == Self.methodAndParam(request.method, param), "a request's method and param differ from what JournalRecord writes for them")
            } else {
                appendMethodAndParam(method: request.method, param: param, into: &out)
            }
            methodAndParamEnd = out.count
            var keyRange: Range<Int>?
            if plainKey == nil && request.key == nil {
                digest = nil
            } else {
                digest = out.withUnsafeBytes { IdempotencyKeys.digest(canonical: $0) }
                out.append(contentsOf: keyPrefix.bytes)
                if let plainKey {  // plain ASCII: its bytes are its JSON string's contents
                    out.append(UInt8(ascii: "\""))
                    keyRange = out.count..<(out.count + plainKey.count)
                    out.append(contentsOf: plainKey)
                    out.append(UInt8(ascii: "\""))
                } else if let key = request.key {
                    JSONWriter.writeString(key, into: &out)
                }
            }
            plainKeyRange = keyRange
            out.append(contentsOf: seqPrefix.bytes)
            bytes = out
        }

        /// The request's param, parsed from the bytes (a keyed call meeting an outcome with a
        /// legacy digest, whose param was left plain).
        func parsedParam() -> JSONValue? {
            var object: [UInt8] = [UInt8(ascii: "{")]
            object.append(contentsOf: bytes[1..<methodAndParamEnd])  // past the leading comma
            object.append(UInt8(ascii: "}"))
            guard case .object(let fields)? = try? JSONParser.parse(object) else { return nil }
            return fields["param"]
        }

        private static func methodAndParam(_ method: RPCMethod, _ param: JSONValue?) -> [UInt8] {
            var out: [UInt8] = []
            appendMethodAndParam(method: method, param: param, into: &out)
            return out
        }

        /// The body of a sealed journal line (without its `\n`) of record `seq`, as a leader's
        /// change feed sends it: `{"id":"r<seq>"` + body + `<seq>,"crc":"…"}` with a checksum that
        /// matches. A follower journals it as it is instead of encoding the request again; nil
        /// when the line is not exactly that shape (the caller encodes the request instead).
        public init?(line: UnsafeRawBufferPointer, seq: UInt64) {
            guard JournalRecord.checksum(of: line) == .valid else { return nil }
            var digits: [UInt8] = []
            appendDecimal(seq, into: &digits)
            let head = feedIDPrefix.bytes.count + digits.count + 1
            let tail = digits.count + sealLength
            guard line.count > head + tail + seqPrefix.bytes.count,
                line.starts(with: feedIDPrefix.bytes),
                line[feedIDPrefix.bytes.count..<(head - 1)].elementsEqual(digits),
                line[head - 1] == UInt8(ascii: "\""),
                line[(line.count - tail)..<(line.count - sealLength)].elementsEqual(digits),
                line[(line.count - tail - seqPrefix.bytes.count)..<(line.count - tail)].elementsEqual(seqPrefix.bytes)
            else { return nil }
            bytes = Array(line[head..<(line.count - tail)])
            digest = nil
            plainKeyRange = nil
            // Any key is kept within: `parsedParam` reads the param alone.
            methodAndParamEnd = bytes.count - seqPrefix.bytes.count
        }
    }

    /// Appends `,"method":M,"param":P` as a canonical request line has them: what a journal line
    /// holds between its id and its key, and what `IdempotencyKeys.digest` hashes.
    /// (Byte for byte `RequestCodec.encode`'s canonical form, which `roundTrip` holds them to.)
    static func appendMethodAndParam(method: RPCMethod, param: JSONValue?, into out: inout [UInt8]) {
        appendMethod(method, into: &out)
        guard let param else { return }
        out.append(contentsOf: paramPrefix.bytes)
        JSONWriter.write(param, into: &out)
    }

    /// Appends `,"method":"M"`.
    private static func appendMethod(_ method: RPCMethod, into out: inout [UInt8]) {
        out.append(contentsOf: methodPrefix.bytes)
        JSONWriter.appendEscaped(method.entity, into: &out)
        out.append(UInt8(ascii: "."))
        JSONWriter.appendEscaped(method.name, into: &out)
        out.append(UInt8(ascii: "\""))
    }

    /// Appends the sealed line (with its `\n`) of `body` as mutation number `seq`, with the id
    /// `"r<seq>"` (a change feed sends the line as it is). The checksum is computed here, once,
    /// over the bytes just written.
    public static func encode(_ body: Body, seq: UInt64, into out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: feedIDPrefix.bytes)
        appendDecimal(seq, into: &out)
        out.append(UInt8(ascii: "\""))
        finish(body, seq: seq, lineStart: start, into: &out)
    }

    /// The rest of a line after its id: the body, the number, the seal.
    private static func finish(_ body: Body, seq: UInt64, lineStart: Int, into out: inout [UInt8]) {
        out.append(contentsOf: body.bytes)
        appendDecimal(seq, into: &out)
        appendSeal(lineStart: lineStart, into: &out)
    }

    private static let idPrefix: StaticString = #"{"id":"#
    private static let methodPrefix: StaticString = #","method":""#
    private static let paramPrefix: StaticString = #","param":"#
    static let feedIDPrefix: StaticString = #"{"id":"r"#
    // StaticStrings appended through `bytes`: a string's UTF-8 view cost ~170 instructions to
    // append, and a `static let` array a retain and a release both loops share (under the state lock).
    private static let keyPrefix: StaticString = #","key":"#
    private static let seqPrefix: StaticString = #","seq":"#

    /// Decodes one line (without its `\n`): the request, and its `seq` when present. A line whose
    /// checksum does not match fails.
    public static func decode(_ line: UnsafeRawBufferPointer) -> Result<(request: Request, seq: UInt64?), JournalLineError> {
        fields(line).flatMap { fields in
            guard let method = RPCMethod(parsing: fields.method), !method.isCounterRequest else {
                return .failure(JournalLineError("\"\(fields.method)\" is not a method of the form entity.method"))
            }
            return .success((Request(id: fields.id, method: method, param: fields.param, key: fields.key), fields.seq))
        }
    }

    /// The parts of a journal or snapshot record line (replay looks the method text up in a cache).
    struct Fields: Equatable {
        var id: String
        var method: String
        var param: JSONValue?
        var seq: UInt64?
        /// The idempotency key of a keyed mutation.
        var key: String?
        /// The line ends with a checksum (that matched); false for lines written before checksums.
        var sealed: Bool
        /// A keyed record's `IdempotencyKeys.digest`, hashed from the line's own method and param
        /// bytes when its param was left in the line (`writtenRecord`); nil otherwise.
        var digest: UInt64? = nil
    }

    static func fields(_ line: UnsafeRawBufferPointer) -> Result<Fields, JournalLineError> {
        fields(line, seal: checksum(of: line))
    }

    /// `fields` for a line whose checksum was checked already (`seal`).
    private static func fields(_ line: UnsafeRawBufferPointer, seal: Checksum) -> Result<Fields, JournalLineError> {
        if case .mismatch(let stored, let computed) = seal {
            return .failure(.checksumMismatch(stored: stored, computed: computed))
        }
        if seal == .valid, let fields = writtenFields(line) { return .success(fields) }
        return parsedFields(line, sealed: seal == .valid)
    }

    /// `fields` by a full JSON parse of the line (whose checksum, if any, matched).
    static func parsedFields(_ line: UnsafeRawBufferPointer, sealed: Bool) -> Result<Fields, JournalLineError> {
        let value: JSONValue
        do {
            value = try JSONParser.parse(line)
        } catch {
            return .failure(JournalLineError("not valid JSON: \(error)"))
        }
        guard case .object(let object) = value else { return .failure(JournalLineError("not a JSON object")) }
        // One pass over the pairs (replay reads a million lines), then the checks in a fixed order.
        var idValue: JSONValue?
        var methodValue: JSONValue?
        var seqValue: JSONValue?
        var keyValue: JSONValue?
        var paramValue: JSONValue?
        var hasChecksum = false
        var unknown: String?
        for (name, value) in object.pairs {
            if ExactUTF8.equal(name, "id") {
                idValue = value
            } else if ExactUTF8.equal(name, "method") {
                methodValue = value
            } else if ExactUTF8.equal(name, "param") {
                paramValue = value
            } else if ExactUTF8.equal(name, "seq") {
                seqValue = value
            } else if ExactUTF8.equal(name, "crc") {
                hasChecksum = true
            } else if ExactUTF8.equal(name, "key") {
                keyValue = value
            } else if unknown == nil, !RequestCodec.envelopeKeys.contains(name), !RequestCodec.envelopeExtensionKeys.contains(name) {
                unknown = name
            }
        }
        guard case .string(let id)? = idValue else { return .failure(JournalLineError("no string \"id\"")) }
        guard case .string(let method)? = methodValue else {
            return .failure(JournalLineError("no \"method\" string; the journal holds canonical requests"))
        }
        var seq: UInt64?
        if let seqValue {
            guard case .number(let text) = seqValue, let number = UInt64(text) else {
                return .failure(JournalLineError("\"seq\" is not a whole number"))
            }
            seq = number
        }
        if hasChecksum, !sealed { return .failure(JournalLineError(misplacedChecksum)) }
        var key: String?
        if let keyValue {
            guard case .string(let text) = keyValue, !text.isEmpty, text.utf8.count <= Request.maxKeyBytes else {
                return .failure(JournalLineError("\"key\" is not a string of 1 to \(Request.maxKeyBytes) bytes"))
            }
            key = text
        }
        if let unknown {
            return .failure(JournalLineError("unknown key \"\(unknown)\"; a record holds only \(recordKeys)"))
        }
        let param = paramValue.flatMap { $0.isNull ? JSONValue?.none : $0 }  // (a bare `nil` here would be `.null`: JSONValue is ExpressibleByNilLiteral)
        return .success(Fields(id: id, method: method, param: param, seq: seq, key: key, sealed: sealed))
    }

    /// The fields of a sealed line in exactly the shape the writer gives it (`{"id":"…","method":"…",
    /// "param":…[,"key":"…"][,"seq":N],"crc":…}`, id, method and key in plain ASCII), read without
    /// building the envelope as a JSON object: a restart reads a million of them. nil for any
    /// other line, which `fields` then parses in full; so this path accepts no line that the full
    /// parse would reject or read differently (the param is parsed one level shallower, as it
    /// would be inside the envelope).
    static func writtenFields(_ line: UnsafeRawBufferPointer) -> Fields? { writtenRecord(line, plainParams: false)?.fields }

    /// `writtenFields`, read in one pass. With `plainParams`, a plain param stays in the line
    /// (`plain`, valid while the line is) instead of becoming a `JSONValue`, which replay would
    /// only decode and then free (a dictionary and a string per field, ~2,000 instructions a
    /// record); a keyed record's digest is then hashed from the line's method and param bytes, as
    /// a keyed request's is from its journal body.
    @inline(__always)
    private static func writtenRecord(_ line: UnsafeRawBufferPointer, plainParams: Bool) -> (fields: Fields, plain: PlainObject?)? {
        var scan = EnvelopeScanner(line, end: line.count - sealLength)
        guard let (id, methodText, param, plain, escapedKey, keySpan, methodAndParam) = scan.requestHead(plainParams: plainParams),
            let seq = seqAndEnd(&scan)
        else { return nil }
        let method = scan.text(methodText)
        let key = escapedKey ?? keySpan.map { scan.text($0) }
        guard let plain else { return (Fields(id: id, method: method, param: param, seq: seq, key: key, sealed: true), nil) }
        guard let key else { return (Fields(id: id, method: method, param: nil, seq: seq, key: nil, sealed: true), plain) }
        // What the writer wrote for method and param, so their bytes are what the digest hashes.
        guard let methodAndParam else { return (Fields(id: id, method: method, param: plain.value, seq: seq, key: key, sealed: true), nil) }
        let digest = IdempotencyKeys.digest(canonical: UnsafeRawBufferPointer(rebasing: line[methodAndParam]))
        return (Fields(id: id, method: method, param: nil, seq: seq, key: key, sealed: true, digest: digest), plain)
    }

    /// The rest of a record in the writer's shape after its envelope: an optional `,"seq":N`,
    /// then the end. `.some(nil)` when there is no seq; nil when the rest is anything else.
    private static func seqAndEnd(_ scan: inout EnvelopeScanner) -> UInt64?? {
        var seq: UInt64?
        if scan.expect(seqPrefix.bytes) {
            guard let number = scan.wholeNumber() else { return nil }
            seq = number
        }
        guard scan.atEnd else { return nil }
        return .some(seq)
    }

    /// The top-level keys a record may hold, for messages.
    static let recordKeys = (RequestCodec.envelopeKeys + RequestCodec.envelopeExtensionKeys).joined(separator: ", ")

    static let misplacedChecksum = #""crc" is not the line's checksum: a sealed line ends with ,"crc":"<8 lowercase hex digits>"}"#

    /// A record line for replay: checked and scanned once, its param left in the line when it is
    /// plain (`writtenRecord`), else read in full (`fields`).
    static func replayFields(_ line: UnsafeRawBufferPointer) -> Result<(fields: Fields, plain: PlainObject?), JournalLineError> {
        let seal = checksum(of: line)
        if seal == .valid, let record = writtenRecord(line, plainParams: true) { return .success(record) }
        return fields(line, seal: seal).map { ($0, nil) }
    }

    /// A record line of a journal or snapshot, decoded, for tools (`rpcd journal dump`).
    public struct Line: Sendable {
        /// 1-based line number in its file.
        public var number: Int
        public var request: Request
        /// nil for snapshot records.
        public var seq: UInt64?
    }

    /// Calls `body` with each record of a file that replayed (verify it with `JournalReplay`
    /// first): lines that are not records, such as a snapshot's header, and a torn last line are
    /// skipped. `body` returns false to stop.
    public static func forEachRecord(in bytes: UnsafeRawBufferPointer, _ body: (Line) -> Bool) {
        _ = JournalReplay.forEachLine(bytes) { line, number, offset in
            guard case .success(let record) = decode(line) else { return nil }
            guard body(Line(number: number, request: record.request, seq: record.seq)) else {
                return JournalReplay.Failure(line: number, offset: offset, reason: "stopped", kind: .damaged)
            }
            return nil
        }
    }

    static func appendDecimal(_ value: UInt64, into out: inout [UInt8]) {
        guard value > 0 else { return out.append(UInt8(ascii: "0")) }
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8,
                     UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
            (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        var rest = value
        withUnsafeMutableBytes(of: &digits) { buffer in
            while rest > 0 {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            }
            // Rebased to a buffer of its own: a slice appended took the generic path, ~200
            // instructions for a seven-digit number (twice per journal line).
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[(20 - count)...]))
        }
    }
}

/// Why a journal or snapshot line cannot be used.
public struct JournalLineError: Error, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }

    /// Starts with "checksum mismatch", the words operators and tests look for.
    static func checksumMismatch(stored: UInt32, computed: UInt32) -> JournalLineError {
        JournalLineError("checksum mismatch (the line says \(JournalRecord.hex(stored)), its bytes give \(JournalRecord.hex(computed)))")
    }
}
