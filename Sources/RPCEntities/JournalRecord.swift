import RPCSchema

/// One journal line: the canonical request line of an applied mutation with its sequence number
/// as one more top-level key, e.g.
///
///     {"id":"7","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"seq":42}
///
/// The request decoder ignores top-level keys other than id, method and param, so a journal can be
/// read with `less` and replayed into an empty daemon with `nc`.
public enum JournalRecord {
    /// Appends the line (with its `\n`) for `request`, applied as mutation number `seq`.
    public static func encode(_ request: Request, seq: UInt64, into out: inout [UInt8]) {
        RequestCodec.encode(id: request.id, method: request.method, param: request.param, form: .canonical, into: &out)
        out.removeLast(2)  // "}\n"
        out.append(contentsOf: #","seq":"#.utf8)
        appendDecimal(seq, into: &out)
        out.append(contentsOf: "}\n".utf8)
    }

    /// Decodes one line (without its `\n`): the request, and its `seq` when present.
    public static func decode(_ line: UnsafeRawBufferPointer) -> Result<(request: Request, seq: UInt64?), JournalLineError> {
        fields(line).flatMap { fields in
            guard let method = RPCMethod(parsing: fields.method), !method.isCounterRequest else {
                return .failure(JournalLineError("\"\(fields.method)\" is not a method of the form entity.method"))
            }
            return .success((Request(id: fields.id, method: method, param: fields.param), fields.seq))
        }
    }

    /// The parts of a canonical request line (replay looks the method text up in a cache).
    struct Fields {
        var id: String
        var method: String
        var param: JSONValue?
        var seq: UInt64?
    }

    static func fields(_ line: UnsafeRawBufferPointer) -> Result<Fields, JournalLineError> {
        let value: JSONValue
        do {
            value = try JSONParser.parse(line)
        } catch {
            return .failure(JournalLineError("not valid JSON: \(error)"))
        }
        guard case .object(let object) = value else { return .failure(JournalLineError("not a JSON object")) }
        guard case .string(let id)? = object["id"] else { return .failure(JournalLineError("no string \"id\"")) }
        guard case .string(let method)? = object["method"] else {
            return .failure(JournalLineError("no \"method\" string; the journal holds canonical requests"))
        }
        var seq: UInt64?
        if let raw = object["seq"] {
            guard case .number(let text) = raw, let number = UInt64(text) else {
                return .failure(JournalLineError("\"seq\" is not a whole number"))
            }
            seq = number
        }
        let param = object["param"].flatMap { $0 == .null ? nil : $0 }
        return .success(Fields(id: id, method: method, param: param, seq: seq))
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
            out.append(contentsOf: buffer[(20 - count)...])
        }
    }
}

/// Why a journal or snapshot line cannot be used.
public struct JournalLineError: Error, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}
