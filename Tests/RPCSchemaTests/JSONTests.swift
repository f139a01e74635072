import Testing

@testable import RPCSchema

// MARK: - Helpers

private func parse(_ s: String, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
    try JSONParser.parse(Array(s.utf8), maxDepth: maxDepth)
}

private func parseError(_ bytes: [UInt8], maxDepth: Int = 64) -> JSONParseError? {
    do {
        _ = try JSONParser.parse(bytes, maxDepth: maxDepth)
        return nil
    } catch {
        return error
    }
}

private func parseError(_ s: String, maxDepth: Int = 64) -> JSONParseError? {
    parseError(Array(s.utf8), maxDepth: maxDepth)
}

/// A tiny deterministic PRNG (SplitMix64).
private struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private func pathStrings(_ path: [any CodingKey]) -> [String] { path.map(\.stringValue) }

// MARK: - Parsing

@Suite struct JSONParserTests {
    @Test func parsesScalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse(" \t\r\nfalse\n") == .bool(false))
        #expect(try parse("\"hi\"") == .string("hi"))
        for n in ["0", "-0", "42", "-1.5e3", "1E+2", "0.000", "1e-7", "123456789012345678901234567890"] {
            #expect(try parse(n) == .number(n), "number \(n) keeps its text")
        }
    }

    @Test func parsesStringsWithEscapesAndUnicode() throws {
        #expect(try parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{c}\n\r\t"))
        #expect(try parse(#""\u0041\u00e9\u20AC""#) == .string("Aé€"))
        #expect(try parse(#""\ud83d\ude00 x""#) == .string("😀 x"))
        #expect(try parse("\"é€😀\"") == .string("é€😀"))
        #expect(try parse(#""é\n😀""#) == .string("é\n😀"))
        #expect(try parse(#""\u0000""#) == .string("\u{0}"))
        #expect(try parse("\"\"") == .string(""))
    }

    /// Strings are scanned eight bytes at a time: every kind of byte that ends a plain run, at
    /// every offset around a word boundary, is found where it is.
    @Test func stringScanFindsSpecialBytesAtEveryOffset() throws {
        for before in 0..<20 {
            let head = String(repeating: "a", count: before)
            let tail = String(repeating: "z", count: 20 - before)
            #expect(try parse("\"\(head)\"") == .string(head))
            #expect(try parse("\"\(head)\\n\(tail)\"") == .string("\(head)\n\(tail)"))
            #expect(try parse("\"\(head)é\u{7F} \(tail)\"") == .string("\(head)é\u{7F} \(tail)"))
            for control: UInt8 in [0x00, 0x01, 0x0A, 0x1F] {
                let bytes = [0x22] + Array(head.utf8) + [control] + Array(tail.utf8) + [0x22]
                #expect(throws: JSONParseError(offset: before + 1, reason: "control character in string")) {
                    try JSONParser.parse(bytes)
                }
            }
            let invalid = [0x22] + Array(head.utf8) + [0xFF] + Array(tail.utf8) + [0x22]
            #expect(throws: JSONParseError(offset: before + 1, reason: "invalid UTF-8")) { try JSONParser.parse(invalid) }
        }
    }

    @Test func parsesContainersKeepingOrder() throws {
        let v = try parse(#" { "id" : "1", "method":"m" , "param":[1, {"b":null,"a":true}, []], "e":{} } "#)
        let o = try #require(v.objectValue)
        #expect(o.keys == ["id", "method", "param", "e"])
        #expect(o["id"] == "1")
        #expect(o["param"] == [1, ["b": nil, "a": true], []])
        #expect(o["e"] == .object(JSONObject()))
        #expect(o["missing"] == nil)
    }

    @Test func duplicateKeysLastWins() throws {
        let o = try #require(try parse(#"{"a":1,"b":2,"a":3}"#).objectValue)
        #expect(o.count == 2)
        #expect(o.keys == ["a", "b"])
        #expect(o["a"] == 3)
        // Large objects take the indexed path.
        var text = "{"
        for i in 0..<40 { text += "\"k\(i)\":\(i)," }
        text += "\"k5\":\"last\",\"k39\":true}"
        let big = try #require(try parse(text).objectValue)
        #expect(big.count == 40)
        #expect(big["k5"] == "last")
        #expect(big["k39"] == true)
        #expect(big.keys[5] == "k5")
    }

    @Test func acceptsEveryCollectionKind() throws {
        let bytes = Array(#"  [1,"x"]  "#.utf8)
        #expect(try JSONParser.parse(bytes) == [1, "x"])
        #expect(try JSONParser.parse(bytes[2..<9]) == [1, "x"])
        #expect(try JSONParser.parse(#"{"a":[]}"#.utf8) == ["a": []])
        let fromRaw = try bytes.withUnsafeBytes { (raw) throws(JSONParseError) -> JSONValue in try JSONParser.parse(raw) }
        #expect(fromRaw == [1, "x"])
        // Offsets count from the slice's start.
        let slice = Array("xx[1,]".utf8)[2...]
        #expect(parseError(Array(slice)) == JSONParseError(offset: 3, reason: "trailing comma in array"))
        #expect(throws: JSONParseError(offset: 3, reason: "trailing comma in array")) { try JSONParser.parse(slice) }
        // A non-contiguous collection.
        #expect(try JSONParser.parse(Array("[true]".utf8).lazy.map { $0 }) == [true])
    }

    struct Rejection: Sendable, CustomTestStringConvertible {
        var input: [UInt8]
        var reason: String
        var offset: Int
        init(_ s: String, _ reason: String, _ offset: Int) {
            self.init(bytes: Array(s.utf8), reason, offset)
        }
        init(bytes: [UInt8], _ reason: String, _ offset: Int) {
            input = bytes
            self.reason = reason
            self.offset = offset
        }
        var testDescription: String { "\(input) -> \(reason) at \(offset)" }
    }

    static let rejections: [Rejection] = [
        .init("", "empty input", 0),
        .init("  \n ", "empty input", 4),
        .init("01", "leading zeros are not allowed", 0),
        .init("-01", "leading zeros are not allowed", 1),
        .init("[00]", "leading zeros are not allowed", 1),
        .init("+1", "unexpected character '+'", 0),
        .init(".5", "unexpected character '.'", 0),
        .init("1.", "unexpected end of input", 2),
        .init("[1.]", "expected digit after '.'", 3),
        .init("1.e3", "expected digit after '.'", 2),
        .init("1e", "unexpected end of input", 2),
        .init("1e+", "unexpected end of input", 3),
        .init("1ex", "expected digit in exponent", 2),
        .init("-", "unexpected end of input", 1),
        .init("-a", "expected digit", 1),
        .init("NaN", "unexpected character 'N'", 0),
        .init("Infinity", "unexpected character 'I'", 0),
        .init("-Infinity", "expected digit", 1),
        .init("[1,]", "trailing comma in array", 3),
        .init(#"{"a":1,}"#, "trailing comma in object", 7),
        .init("[,1]", "unexpected character ','", 1),
        .init("'a'", "unexpected character '''", 0),
        .init("{'a':1}", "expected string key in object", 1),
        .init("// c\n1", "unexpected character '/'", 0),
        .init("/* c */ 1", "unexpected character '/'", 0),
        .init("[1/*c*/]", "expected ',' or ']' in array", 2),
        .init(#"{"a" 1}"#, "expected ':' after object key", 5),
        .init(#"{"a":1 "b":2}"#, "expected ',' or '}' in object", 7),
        .init(#"{"a":}"#, "unexpected character '}'", 5),
        .init(#"{"a""#, "unexpected end of input", 4),
        .init("[1 2]", "expected ',' or ']' in array", 3),
        .init("[1", "unexpected end of input", 2),
        .init("{", "unexpected end of input", 1),
        .init("1 2", "trailing characters after JSON value", 2),
        .init("{} x", "trailing characters after JSON value", 3),
        .init("tru", "unexpected end of input", 3),
        .init("trux", "invalid literal", 0),
        .init("[nul]", "invalid literal", 1),
        .init("True", "unexpected character 'T'", 0),
        .init("\"abc", "unexpected end of input", 4),
        .init("\"a\nb\"", "control character in string", 2),
        .init("\"a\tb\"", "control character in string", 2),
        .init("\"\\n\u{1F}\"", "control character in string", 3),
        .init(#""\x""#, "invalid escape", 1),
        .init(#""ab\'""#, "invalid escape", 3),
        .init(#""\"#, "unexpected end of input", 2),
        .init(#""\u12"#, "unexpected end of input", 5),
        .init(#""\u12G4""#, #"invalid \u escape"#, 1),
        .init(#""\ud800""#, #"invalid \u escape"#, 1),
        .init(#""\udc00""#, #"invalid \u escape"#, 1),
        .init(#""x\ud800\u0041""#, #"invalid \u escape"#, 2),
        .init(#""\ud800x""#, #"invalid \u escape"#, 1),
        .init(#""\ud800\n""#, #"invalid \u escape"#, 1),
        .init(#""\udbff\udbff""#, #"invalid \u escape"#, 1),
        .init(bytes: [0x22, 0x61, 0x00, 0x22], "control character in string", 2),
        .init(bytes: [0x5B, 0x00, 0x5D], "unexpected byte 0x00", 1),
        .init(bytes: [0x31, 0x00], "trailing characters after JSON value", 1),
        .init(bytes: [0x22, 0xC0, 0x80, 0x22], "invalid UTF-8", 1),  // overlong NUL
        .init(bytes: [0x22, 0xC1, 0xBF, 0x22], "invalid UTF-8", 1),  // overlong
        .init(bytes: [0x22, 0xE0, 0x80, 0xAF, 0x22], "invalid UTF-8", 1),  // overlong 3-byte
        .init(bytes: [0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22], "invalid UTF-8", 1),  // overlong 4-byte
        .init(bytes: [0x22, 0xED, 0xA0, 0x80, 0x22], "invalid UTF-8", 1),  // UTF-8 encoded surrogate
        .init(bytes: [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], "invalid UTF-8", 1),  // above U+10FFFF
        .init(bytes: [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22], "invalid UTF-8", 1),  // byte > 0xF4
        .init(bytes: [0x22, 0xFF, 0x22], "invalid UTF-8", 1),
        .init(bytes: [0x22, 0x61, 0x80, 0x22], "invalid UTF-8", 2),  // lone continuation
        .init(bytes: [0x22, 0xC3, 0x22], "invalid UTF-8", 1),  // truncated sequence
        .init(bytes: [0x22, 0xE2, 0x82], "invalid UTF-8", 1),  // cut off by end of input
        .init(bytes: [0x22, 0x5C, 0x6E, 0xC0, 0xAF, 0x22], "invalid UTF-8", 3),  // after an escape
        .init(bytes: [0xFF], "invalid UTF-8", 0),
        .init(bytes: [0x5B, 0x31, 0x2C, 0xC3, 0xA9, 0x5D], "unexpected character 'é'", 3),
        .init(bytes: [0xEF, 0xBB, 0xBF, 0x31], "unexpected character '\u{FEFF}'", 0),  // BOM
    ]

    @Test(arguments: rejections)
    func rejects(_ r: Rejection) {
        let e = parseError(r.input)
        #expect(e == JSONParseError(offset: r.offset, reason: r.reason))
    }

    @Test func errorDescription() {
        let e = parseError(#"{"a" 1}"#)
        #expect(e?.description == "expected ':' after object key at byte 5")
        #expect(parseError(#""\ud800""#)?.reason == "invalid \\u escape")
    }

    @Test func depthLimit() throws {
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(try parse(ok).arrayValue != nil)
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(parseError(deep) == JSONParseError(offset: 64, reason: "nesting deeper than 64 levels"))
        var objects = ""
        for _ in 0..<65 { objects += #"{"a":"# }
        objects += "1" + String(repeating: "}", count: 65)
        #expect(parseError(objects) == JSONParseError(offset: 64 * 5, reason: "nesting deeper than 64 levels"))
        #expect(parseError("[[1]]", maxDepth: 1) == JSONParseError(offset: 1, reason: "nesting deeper than 1 levels"))
        #expect(try parse("[[1]]", maxDepth: 2) == [[1]])
        // Depth goes back down after a container closes.
        let wide = "[" + Array(repeating: String(repeating: "[", count: 63) + String(repeating: "]", count: 63), count: 50)
            .joined(separator: ",") + "]"
        #expect(try parse(wide).arrayValue?.count == 50)
        // A huge nesting attempt fails fast instead of overflowing the stack.
        let huge = [UInt8](repeating: 0x5B, count: 1_000_000)
        #expect(parseError(huge)?.reason == "nesting deeper than 64 levels")
    }
}

// MARK: - Writing

@Suite struct JSONWriterTests {
    @Test func writesCompactly() {
        let v: JSONValue = ["id": "1", "method": "user.get", "param": ["n": 5, "x": [true, false, nil, .number("-1.5e3")]]]
        #expect(JSONWriter.string(v) == #"{"id":"1","method":"user.get","param":{"n":5,"x":[true,false,null,-1.5e3]}}"#)
        #expect(JSONWriter.string([]) == "[]")
        #expect(JSONWriter.string(.object(JSONObject())) == "{}")
        #expect(JSONWriter.string(.number(-7)) == "-7")
        #expect(v.description == JSONWriter.string(v))
    }

    @Test func escapesStrings() {
        var out: [UInt8] = []
        JSONWriter.writeString("a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1F}\u{0}/é😀\u{7F}", into: &out)
        #expect(String(decoding: out, as: UTF8.self) == #""a\"b\\c\n\r\t\b\f\u0001\u001f\u0000/é😀"# + "\u{7F}\"")
        out.removeAll()
        JSONWriter.writeString("plain", into: &out)
        #expect(out == Array("\"plain\"".utf8))
        JSONWriter.writeString("", into: &out)
        #expect(out == Array("\"plain\"\"\"".utf8))
    }

    /// Strings are scanned eight bytes at a time: every byte that needs an escape is found at
    /// every offset around a word boundary, and non-ASCII bytes beside it are left alone.
    @Test func escapesAtEveryOffset() {
        for before in 0..<20 {
            let head = String(repeating: "a", count: before)
            let tail = String(repeating: "é", count: (20 - before) / 2) + String(repeating: "z", count: before % 3)
            for (raw, escaped) in [("\"", #"\""#), ("\\", #"\\"#), ("\n", #"\n"#), ("\u{0}", #"\u0000"#), ("\u{1F}", #"\u001f"#)] {
                var out: [UInt8] = []
                JSONWriter.writeString(head + raw + tail, into: &out)
                #expect(String(decoding: out, as: UTF8.self) == "\"" + head + escaped + tail + "\"", "\(before) \(escaped)")
            }
            var plain: [UInt8] = []
            JSONWriter.writeString(head + "\u{7F} ~" + tail, into: &plain)
            #expect(String(decoding: plain, as: UTF8.self) == "\"" + head + "\u{7F} ~" + tail + "\"")
        }
    }

    @Test func roundTripsCanonicalText() throws {
        let texts = [
            #"{"id":"1","method":"m","param":{"a":[1,2.5,-3e10,{"b":null}],"c":"\"\\\n\u0000é"}}"#,
            #"[[],{},"",0,-0,true,false,null]"#,
            #""😀""#,
        ]
        for t in texts {
            #expect(JSONWriter.string(try parse(t)) == t)
        }
    }

    @Test func writeThenParseProperty() throws {
        var rng = SplitMix64(seed: 0xC0FFEE)
        for _ in 0..<2_000 {
            let v = randomValue(&rng, depth: 0)
            var out: [UInt8] = []
            JSONWriter.write(v, into: &out)
            let back = try JSONParser.parse(out)
            #expect(back == v, "\(JSONWriter.string(v))")
            // Writing is deterministic and idempotent.
            #expect(JSONWriter.string(back) == String(decoding: out, as: UTF8.self))
        }
    }
}

private let sampleScalars: [Unicode.Scalar] = [
    "a", "Z", "0", " ", "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{1}", "\u{8}", "\u{C}", "\u{1F}", "\u{7F}",
    "é", "ß", "€", "\u{2028}", "\u{FFFD}", "\u{FEFF}", "😀", "\u{10FFFF}", "中",
]
private let sampleNumbers = ["0", "-0", "1", "-1", "42", "3.14", "-1.5e3", "1E+2", "2e-8", "1.0", "18446744073709551616"]

private func randomString(_ rng: inout SplitMix64) -> String {
    let n = Int.random(in: 0...12, using: &rng)
    var s = String.UnicodeScalarView()
    for _ in 0..<n {
        if Bool.random(using: &rng) {
            s.append(sampleScalars[Int.random(in: 0..<sampleScalars.count, using: &rng)])
        } else if let u = Unicode.Scalar(UInt32.random(in: 0...0x10FFFF, using: &rng)) {
            s.append(u)
        }
    }
    return String(s)
}

private func randomValue(_ rng: inout SplitMix64, depth: Int) -> JSONValue {
    let pick = Int.random(in: 0..<(depth >= 5 ? 5 : 7), using: &rng)
    switch pick {
    case 0: return .null
    case 1: return .bool(Bool.random(using: &rng))
    case 2: return .number(sampleNumbers[Int.random(in: 0..<sampleNumbers.count, using: &rng)])
    case 3: return .number(Int.random(in: Int.min...Int.max, using: &rng))
    case 4: return .string(randomString(&rng))
    case 5:
        return .array((0..<Int.random(in: 0...4, using: &rng)).map { _ in randomValue(&rng, depth: depth + 1) })
    default:
        var o = JSONObject()
        for _ in 0..<Int.random(in: 0...4, using: &rng) {
            o[randomString(&rng)] = randomValue(&rng, depth: depth + 1)
        }
        return .object(o)
    }
}

// MARK: - Fuzz

@Suite struct JSONFuzzTests {
    static let seeds: [String] = [
        #"{"id":"42","method":"user.get","param":{"userId":"u1","fields":["name","email"]}}"#,
        #"[1,-2.5e-3,true,false,null,"a\"b\\c\u00e9\ud83d\ude00",{"k":[{}]}]"#,
        #"{"a":{"b":{"c":{"d":[[[["deep"]]]]}}}}"#,
        "\"héllo wörld 😀\"",
        "  -0.0e+0  ",
    ]

    @Test func randomAndMutatedInputsNeverCrash() throws {
        var rng = SplitMix64(seed: 0x5EED_1234)
        let alphabet = Array(#"{}[],:"\/ -+.eE0123456789tfnrulasbu"#.utf8) + [0x00, 0x0A, 0x09, 0x80, 0xBF, 0xC3, 0xED, 0xF0, 0xF4, 0xFF]
        var accepted = 0
        for round in 0..<20_000 {
            var bytes: [UInt8]
            if round % 2 == 0 {
                let n = Int.random(in: 0...48, using: &rng)
                bytes = (0..<n).map { _ in
                    Bool.random(using: &rng)
                        ? alphabet[Int.random(in: 0..<alphabet.count, using: &rng)] : UInt8.random(in: 0...255, using: &rng)
                }
            } else {
                bytes = Array(Self.seeds[Int.random(in: 0..<Self.seeds.count, using: &rng)].utf8)
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    guard !bytes.isEmpty else { break }
                    let i = Int.random(in: 0..<bytes.count, using: &rng)
                    switch Int.random(in: 0..<5, using: &rng) {
                    case 0: bytes[i] = UInt8.random(in: 0...255, using: &rng)
                    case 1: bytes.insert(alphabet[Int.random(in: 0..<alphabet.count, using: &rng)], at: i)
                    case 2: bytes.remove(at: i)
                    case 3: bytes.removeSubrange(i...)
                    default: bytes.insert(contentsOf: bytes[i...].prefix(8), at: i)
                    }
                }
            }
            do {
                let v = try JSONParser.parse(bytes)
                accepted += 1
                // Whatever parses must survive a write/parse round trip unchanged.
                var out: [UInt8] = []
                JSONWriter.write(v, into: &out)
                #expect(try JSONParser.parse(out) == v)
            } catch {
                #expect(error.offset >= 0 && error.offset <= bytes.count, "\(error) for \(bytes)")
                #expect(!error.reason.isEmpty)
            }
        }
        #expect(accepted > 100)
    }
}

// MARK: - Codable

private struct Address: Codable, Equatable {
    var city: String
    var zip: String?
}

private enum Role: String, Codable, Equatable {
    case admin, member
}

private enum Mode: Codable, Equatable {
    case user(String)
    case range(from: Int, to: Int)
    case none
}

private struct Profile: Codable, Equatable {
    var id: Int
    var name: String
    var score: Double
    var active: Bool
    var nickname: String?
    var tags: [String]
    var address: Address?
    var role: Role
    var modes: [Mode]
    var counts: [UInt8]
    var extra: JSONValue?
}

private struct Item: Codable, Equatable {
    var n: Int
}

private struct Order: Codable, Equatable {
    var items: [Item]
}

@Suite struct JSONCodableTests {
    let encoder = JSONValueEncoder()
    let decoder = JSONValueDecoder()

    @Test func encodesNestedStructExactly() throws {
        let p = Profile(
            id: 7, name: "Ann \"A\"", score: 1.5, active: true, nickname: nil, tags: ["x", "y"],
            address: Address(city: "Oslo", zip: nil), role: .admin,
            modes: [.user("x"), .range(from: 1, to: 2), .none], counts: [0, 255], extra: ["v": .number("1.50")])
        let v = try encoder.encode(p)
        #expect(
            JSONWriter.string(v)
                == #"{"id":7,"name":"Ann \"A\"","score":1.5,"active":true,"tags":["x","y"],"address":{"city":"Oslo"},"role":"admin","modes":[{"user":{"_0":"x"}},{"range":{"from":1,"to":2}},{"none":{}}],"counts":[0,255],"extra":{"v":1.50}}"#
        )
        #expect(try decoder.decode(Profile.self, from: v) == p)
        // Through text too.
        let text = JSONWriter.string(v)
        #expect(try decoder.decode(Profile.self, from: try parse(text)) == p)
    }

    @Test func encodesPrimitivesAndRejectsNonFinite() throws {
        #expect(try encoder.encode(5) == .number("5"))
        #expect(try encoder.encode(UInt64.max) == .number("18446744073709551615"))
        #expect(try encoder.encode(Int8.min) == .number("-128"))
        #expect(try encoder.encode(0.1) == .number("0.1"))
        #expect(try encoder.encode(1e300) == .number("1e+300"))
        #expect(try encoder.encode(Float(0.25)) == .number("0.25"))
        #expect(try encoder.encode("s") == .string("s"))
        #expect(try encoder.encode([1, 2]) == [1, 2])
        #expect(try encoder.encode([Int?.none, 3]) == [nil, 3])
        #expect(try encoder.encode(["k": true]) == ["k": true])
        #expect(try encoder.encode(JSONValue.number("1.0")) == .number("1.0"))
        #expect(throws: EncodingError.self) { try encoder.encode(Double.infinity) }
        #expect(throws: EncodingError.self) { try encoder.encode([1.0, .nan]) }
        do {
            _ = try encoder.encode(["a": [Double.nan]])
            Issue.record("expected an error")
        } catch EncodingError.invalidValue(_, let ctx) {
            #expect(pathStrings(ctx.codingPath) == ["a", "Index 0"])
        }
    }

    @Test func decodeTypeMismatches() throws {
        func failure<T: Decodable>(_ type: T.Type, _ text: String) throws -> DecodingError? {
            do {
                _ = try decoder.decode(T.self, from: try parse(text))
                return nil
            } catch let e as DecodingError {
                return e
            }
        }
        guard case .typeMismatch(_, let c1)? = try failure(Address.self, #"{"city":5}"#) else {
            Issue.record("expected typeMismatch")
            return
        }
        #expect(pathStrings(c1.codingPath) == ["city"])
        #expect(c1.debugDescription == "expected a string, found a number")

        guard case .typeMismatch(_, let c2)? = try failure(Item.self, #"{"n":1.5}"#) else {
            Issue.record("expected typeMismatch for 1.5")
            return
        }
        #expect(c2.debugDescription == "expected an integer, found 1.5")
        guard case .typeMismatch? = try failure(Item.self, #"{"n":1e3}"#) else {
            Issue.record("expected typeMismatch for 1e3")
            return
        }
        guard case .dataCorrupted(let c3)? = try failure([UInt8].self, "[1,300]") else {
            Issue.record("expected dataCorrupted for 300 as UInt8")
            return
        }
        #expect(pathStrings(c3.codingPath) == ["Index 1"])
        #expect(c3.debugDescription == "number 300 does not fit in UInt8")
        guard case .dataCorrupted? = try failure(Int.self, "99999999999999999999") else {
            Issue.record("expected dataCorrupted for overflow")
            return
        }
        guard case .typeMismatch(_, let c4)? = try failure(Bool.self, "1") else {
            Issue.record("no Bool from a number")
            return
        }
        #expect(c4.debugDescription == "expected a boolean, found a number")
        guard case .typeMismatch? = try failure(String.self, "true") else {
            Issue.record("no String from a boolean")
            return
        }
        guard case .typeMismatch(_, let c5)? = try failure(Address.self, "[]") else {
            Issue.record("no struct from an array")
            return
        }
        #expect(c5.debugDescription == "expected an object, found an array")
        #expect(try decoder.decode(Int.self, from: .number("-0")) == 0)
        #expect(try decoder.decode(Double.self, from: .number("1e3")) == 1000)
        #expect(try decoder.decode(Float.self, from: .number("2")) == 2)
        #expect(try decoder.decode(Int64.self, from: .number("-9223372036854775808")) == Int64.min)
        guard case .dataCorrupted? = try failure(Double.self, "1e400") else {
            Issue.record("1e400 is not a finite Double")
            return
        }
    }

    @Test func decodeCodingPathThroughArrays() throws {
        do {
            _ = try decoder.decode(Order.self, from: try parse(#"{"items":[{"n":1},{"n":"x"}]}"#))
            Issue.record("expected an error")
        } catch DecodingError.typeMismatch(_, let ctx) {
            #expect(pathStrings(ctx.codingPath) == ["items", "Index 1", "n"])
            #expect(ctx.codingPath[1].intValue == 1)
        }
    }

    @Test func missingAndNullKeys() throws {
        do {
            _ = try decoder.decode(Order.self, from: try parse(#"{"other":1}"#))
            Issue.record("expected keyNotFound")
        } catch DecodingError.keyNotFound(let key, let ctx) {
            #expect(key.stringValue == "items")
            #expect(ctx.codingPath.isEmpty)
            #expect(ctx.debugDescription == "missing key 'items'")
        }
        do {
            _ = try decoder.decode(Order.self, from: try parse(#"{"items":[{"n":null}]}"#))
            Issue.record("expected valueNotFound")
        } catch DecodingError.valueNotFound(_, let ctx) {
            #expect(pathStrings(ctx.codingPath) == ["items", "Index 0", "n"])
            #expect(ctx.debugDescription == "expected an integer, found null")
        }
        // decodeIfPresent: nil for a missing key or an explicit null.
        #expect(try decoder.decode(Address.self, from: ["city": "c"]) == Address(city: "c", zip: nil))
        #expect(try decoder.decode(Address.self, from: ["city": "c", "zip": nil]) == Address(city: "c", zip: nil))
        #expect(try decoder.decode(Address.self, from: ["city": "c", "zip": "z"]) == Address(city: "c", zip: "z"))
        #expect(throws: DecodingError.self) { try decoder.decode(Address.self, from: ["city": "c", "zip": 1]) }
        // Unknown keys are ignored by synthesized Codable.
        #expect(try decoder.decode(Item.self, from: ["n": 1, "junk": [1, 2]]) == Item(n: 1))
    }

    struct Strict: Decodable, Equatable {
        var a: Int
        enum CodingKeys: String, CodingKey { case a }
        struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init?(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }
        init(from decoder: any Decoder) throws {
            let all = try decoder.container(keyedBy: AnyKey.self)
            let unknown = all.allKeys.map(\.stringValue).filter { $0 != "a" }
            guard unknown.isEmpty else {
                throw DecodingError.dataCorrupted(.init(codingPath: [], debugDescription: "unknown keys \(unknown)"))
            }
            a = try decoder.container(keyedBy: CodingKeys.self).decode(Int.self, forKey: .a)
        }
    }

    @Test func allKeysListsObjectKeys() throws {
        #expect(try decoder.decode(Strict.self, from: ["a": 1]).a == 1)
        #expect(throws: DecodingError.self) { try decoder.decode(Strict.self, from: ["a": 1, "b": 2]) }
    }

    final class Base: Codable {
        var x: Int
        init(x: Int) { self.x = x }
    }

    final class Derived: Codable {
        var base: Base
        var y: Int
        init(base: Base, y: Int) {
            self.base = base
            self.y = y
        }
        enum CodingKeys: String, CodingKey { case y }
        init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            y = try c.decode(Int.self, forKey: .y)
            base = try Base(from: try c.superDecoder())
        }
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(y, forKey: .y)
            try base.encode(to: c.superEncoder())
        }
    }

    @Test func superEncoderAndDecoder() throws {
        let v = try encoder.encode(Derived(base: Base(x: 1), y: 2))
        #expect(JSONWriter.string(v) == #"{"y":2,"super":{"x":1}}"#)
        let d = try decoder.decode(Derived.self, from: v)
        #expect(d.base.x == 1 && d.y == 2)
    }

    @Test func unkeyedContainerEnd() throws {
        struct Pair: Decodable {
            var a: Int
            var b: Int
            init(from decoder: any Decoder) throws {
                var c = try decoder.unkeyedContainer()
                a = try c.decode(Int.self)
                b = try c.decode(Int.self)
            }
        }
        #expect(try decoder.decode(Pair.self, from: [1, 2]).b == 2)
        do {
            _ = try decoder.decode(Pair.self, from: [1])
            Issue.record("expected valueNotFound")
        } catch DecodingError.valueNotFound(_, let ctx) {
            #expect(pathStrings(ctx.codingPath) == ["Index 1"])
        }
    }

    @Test func jsonValueIsCodable() throws {
        let v: JSONValue = ["a": [.number("1.50"), nil, "s", ["b": false]]]
        #expect(try encoder.encode(v) == v)
        #expect(try decoder.decode(JSONValue.self, from: v) == v)
        struct Envelope: Codable, Equatable {
            var id: String
            var param: JSONValue?
        }
        let e = Envelope(id: "1", param: v)
        #expect(try decoder.decode(Envelope.self, from: try encoder.encode(e)) == e)
        #expect(try decoder.decode(Envelope.self, from: ["id": "1"]) == Envelope(id: "1", param: nil))
    }

    @Test func valueAccessorsAndLiterals() {
        let v: JSONValue = ["s": "x", "n": 3, "f": .number("1.5"), "a": [1], "o": ["k": nil]]
        let o = v.objectValue
        #expect(o?["s"]?.stringValue == "x")
        #expect(o?["n"]?.intValue == 3)
        #expect(o?["f"]?.intValue == nil)
        #expect(o?["f"]?.doubleValue == 1.5)
        #expect(o?["a"]?.arrayValue == [1])
        #expect(o?["o"]?.objectValue?["k"] == .null)
        #expect(JSONValue.number(-12) == .number("-12"))
        var obj = JSONObject()
        obj["a"] = 1
        obj["b"] = 2
        obj["a"] = 3
        #expect(obj.keys == ["a", "b"] && obj["a"] == 3)
        obj["a"] = nil
        #expect(obj.keys == ["b"] && obj.count == 1)
        // Order matters for equality.
        #expect(JSONValue.object(["a": 1, "b": 2]) != JSONValue.object(["b": 2, "a": 1]))
        // With duplicate pairs given directly, the last one wins on lookup.
        #expect(JSONObject([(key: "k", value: 1), (key: "k", value: 2)])["k"] == 2)
    }
}

// MARK: - Keys are exact bytes

@Suite struct JSONExactKeyTests {
    /// `"\u212A"` (Kelvin sign) and `"K"` are one key to Swift's `String ==`; to JSON they are two.
    @Test func canonicallyEquivalentKeysStayApart() throws {
        for count in [2, 20] {  // small objects (linear scan) and large ones (indexed)
            var text = #"{"\u212A":1,"K":2,"caf\u00e9":3,"cafe\u0301":4"#
            for i in 0..<count { text += #","k\#(i)":0"# }
            text += "}"
            guard case .object(let object) = try parse(text) else {
                Issue.record("not an object")
                return
            }
            #expect(object.count == 4 + count)
            #expect(object["\u{212A}"] == .number("1") && object["K"] == .number("2"))
            #expect(object["caf\u{E9}"] == .number("3") && object["cafe\u{301}"] == .number("4"))
            struct Keys: Decodable {
                var K: Int
                var kelvin: Int
                enum CodingKeys: String, CodingKey { case K, kelvin = "\u{212A}" }
            }
            let keys = try JSONValueDecoder().decode(Keys.self, from: .object(object))
            #expect(keys.K == 2 && keys.kelvin == 1)
        }
        // A true duplicate (same bytes) still keeps one pair, the last value.
        #expect(try parse(#"{"a":1,"a":2}"#) == ["a": 2])
    }
}
