import FuzzSupport
import RPCSchema

/// Fuzzes `RequestCodec.decode` with the input as one line, in either wire form. It must never
/// crash; an invalid line echoes the line's string id (else ""); a decoded request (or
/// counter-request) re-encoded canonical, and in its own form, decodes to the same request, and
/// its encoding is then stable byte for byte.
@main enum FuzzDecoder {
    static func main() {
        FuzzMain.run { data, size in
            FuzzDecoder.test(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
    }

    static func test(_ line: UnsafeRawBufferPointer) {
        let decoded = RequestCodec.decode(line)
        switch decoded {
        case .invalid(let id, _, _):
            let expected = stringID(line) ?? ""
            fuzzCheck(id == expected, "an invalid line answered with id \(id.debugDescription), not \(expected.debugDescription)")
        case .request(let request), .counterRequest(let request):
            fuzzCheck(request.id == (stringID(line) ?? ""), "decoded id \(request.id.debugDescription) is not the line's")
            roundTrip(request, decoded, as: .canonical)
            if request.form == .seed { roundTrip(request, decoded, as: .seed) }
        }
    }

    /// Encodes `request` in `form`, decodes that line and checks it is the same request (in `form`)
    /// of the same kind, and that encoding it again gives the same bytes.
    static func roundTrip(_ request: Request, _ original: DecodedLine, as form: WireForm) {
        var want = request
        want.form = form
        var line: [UInt8] = []
        RequestCodec.encode(want, into: &line)
        fuzzCheck(line.last == UInt8(ascii: "\n") && line.dropLast().allSatisfy({ $0 != UInt8(ascii: "\n") }),
            "the encoding of \(request) is not one line")
        line.removeLast()
        // Seed form wraps the param two levels deeper; past the parser's depth limit it cannot come back.
        if form == .seed, let param = request.param, depth(param) + 3 > 64 { return }
        let again = line.withUnsafeBytes { RequestCodec.decode($0) }
        switch (original, again) {
        case (.request, .request(let back)), (.counterRequest, .counterRequest(let back)):
            fuzzCheck(back == want, "\(want) came back as \(back) in \(form) form: \(String(decoding: line, as: UTF8.self))")
            var second: [UInt8] = []
            RequestCodec.encode(back, into: &second)
            second.removeLast()
            fuzzCheck(second == line, "re-encoding is not stable: \(String(decoding: line, as: UTF8.self)) then \(String(decoding: second, as: UTF8.self))")
        default:
            fuzzCheck(false, "\(original) re-encoded in \(form) form decodes as \(again): \(String(decoding: line, as: UTF8.self))")
        }
    }

    /// The line's top-level `"id"` when the line is a JSON object and it is a string.
    static func stringID(_ line: UnsafeRawBufferPointer) -> String? {
        guard case .object(let object)? = try? JSONParser.parse(line), case .string(let id)? = object["id"] else { return nil }
        return id
    }

    /// Nesting levels of arrays and objects in `value` (a scalar is 0).
    static func depth(_ value: JSONValue) -> Int {
        switch value {
        case .array(let items): return 1 + (items.map(depth).max() ?? 0)
        case .object(let object): return 1 + (object.pairs.map { depth($0.value) }.max() ?? 0)
        default: return 0
        }
    }
}
