// A strict RFC 8259 JSON parser over UTF-8 bytes.

/// Why and where parsing failed.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset in the input where the problem is.
    public var offset: Int
    /// Short lowercase phrase, e.g. "unexpected end of input".
    public var reason: String

    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// "<reason> at byte <offset>"
    public var description: String { "\(reason) at byte \(offset)" }
}

public enum JSONParser {
    /// Parses exactly one JSON value (surrounded by optional whitespace) from UTF-8 bytes.
    /// Arrays and objects may nest at most `maxDepth` levels.
    public static func parse(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            throw JSONParseError(offset: 0, reason: "empty input")
        }
        var p = _JSONParserState(
            ptr: base.assumingMemoryBound(to: UInt8.self), end: bytes.count, maxDepth: maxDepth)
        return try p.parseDocument()
    }

    /// Parses the one JSON value that starts at `offset` (no whitespace before it) and returns it
    /// with the offset just past it; the bytes after it are not looked at. For a caller that scans
    /// a fixed envelope around a value itself (`EnvelopeScanner`).
    ///
    /// `written` is true when the value's bytes are exactly what `JSONWriter.write` gives for it:
    /// no whitespace, no escape in any string, no repeated key. A caller can then copy the bytes
    /// instead of writing the value again.
    package static func parseValue(
        in bytes: UnsafeRawBufferPointer, at offset: Int, maxDepth: Int = 64
    ) throws(JSONParseError) -> (value: JSONValue, end: Int, written: Bool) {
        guard let base = bytes.baseAddress, offset >= 0, offset < bytes.count else {
            throw JSONParseError(offset: offset, reason: "unexpected end of input")
        }
        var p = _JSONParserState(
            ptr: base.assumingMemoryBound(to: UInt8.self), end: bytes.count, maxDepth: maxDepth)
        p.pos = offset
        let value = try p.parseValue()
        return (value, p.pos, p.written)
    }

    /// Parses exactly one JSON value from UTF-8 bytes (Array, ArraySlice, String.UTF8View, ...).
    /// Offsets in errors count from the collection's first byte.
    public static func parse(_ bytes: some Collection<UInt8>, maxDepth: Int = 64) throws(JSONParseError) -> JSONValue {
        let r: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buf in
            Result { () throws(JSONParseError) -> JSONValue in
                try parse(UnsafeRawBufferPointer(buf), maxDepth: maxDepth)
            }
        }
        if let r { return try r.get() }
        let copy = Array(bytes)
        let r2 = copy.withUnsafeBytes { raw in
            Result { () throws(JSONParseError) -> JSONValue in try parse(raw, maxDepth: maxDepth) }
        }
        return try r2.get()
    }
}

// MARK: - Implementation

private enum Byte {
    static let quote: UInt8 = 0x22  // "
    static let backslash: UInt8 = 0x5C
    static let slash: UInt8 = 0x2F
    static let comma: UInt8 = 0x2C
    static let colon: UInt8 = 0x3A
    static let openBracket: UInt8 = 0x5B
    static let closeBracket: UInt8 = 0x5D
    static let openBrace: UInt8 = 0x7B
    static let closeBrace: UInt8 = 0x7D
    static let minus: UInt8 = 0x2D
    static let plus: UInt8 = 0x2B
    static let dot: UInt8 = 0x2E
    static let zero: UInt8 = 0x30
    static let nine: UInt8 = 0x39
    static let lowerE: UInt8 = 0x65
    static let upperE: UInt8 = 0x45
    static let space: UInt8 = 0x20
    static let tab: UInt8 = 0x09
    static let lf: UInt8 = 0x0A
    static let cr: UInt8 = 0x0D
}

struct _JSONParserState {
    let ptr: UnsafePointer<UInt8>
    let end: Int
    let maxDepth: Int
    var pos = 0
    var depth = 0
    /// Reused buffer for strings that contain escapes.
    var scratch: [UInt8] = []
    /// No whitespace skipped, no escape read, no key repeated so far: the bytes read are what
    /// `JSONWriter` writes for the values read (numbers keep their text, strings their UTF-8).
    var written = true

    init(ptr: UnsafePointer<UInt8>, end: Int, maxDepth: Int) {
        self.ptr = ptr
        self.end = end
        self.maxDepth = maxDepth
    }

    // MARK: Errors

    func fail(_ reason: String, at offset: Int) -> JSONParseError {
        JSONParseError(offset: offset, reason: reason)
    }

    func eof() -> JSONParseError {
        JSONParseError(offset: end, reason: "unexpected end of input")
    }

    /// An error for an unexpected byte at `i` (which must be < end).
    func unexpected(at i: Int) -> JSONParseError {
        let b = ptr[i]
        if b >= 0x21 && b <= 0x7E {
            return fail("unexpected character '\(Character(Unicode.Scalar(b)))'", at: i)
        }
        if b >= 0x80 {
            guard let next = utf8SequenceEnd(at: i) else { return fail("invalid UTF-8", at: i) }
            let s = String(decoding: UnsafeBufferPointer(start: ptr + i, count: next - i), as: UTF8.self)
            return fail("unexpected character '\(s)'", at: i)
        }
        return fail("unexpected byte 0x\(Self.hex2(b))", at: i)
    }

    static func hex2(_ b: UInt8) -> String {
        let digits: [Character] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "A", "B", "C", "D", "E", "F"]
        return String([digits[Int(b >> 4)], digits[Int(b & 0xF)]])
    }

    // MARK: Document

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        guard pos < end else { throw fail("empty input", at: pos) }
        let v = try parseValue()
        skipWhitespace()
        guard pos == end else { throw fail("trailing characters after JSON value", at: pos) }
        return v
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while pos < end {
            let b = ptr[pos]
            if b == Byte.space || b == Byte.lf || b == Byte.cr || b == Byte.tab {
                pos += 1
                written = false
            } else {
                return
            }
        }
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard pos < end else { throw eof() }
        switch ptr[pos] {
        case Byte.quote:
            return .string(try parseString())
        case Byte.openBrace:
            return try parseObject()
        case Byte.openBracket:
            return try parseArray()
        case Byte.minus, Byte.zero...Byte.nine:
            return .number(try parseNumber())
        case 0x74:  // t
            try expectLiteral("true")
            return .bool(true)
        case 0x66:  // f
            try expectLiteral("false")
            return .bool(false)
        case 0x6E:  // n
            try expectLiteral("null")
            return .null
        default:
            throw unexpected(at: pos)
        }
    }

    mutating func expectLiteral(_ word: StaticString) throws(JSONParseError) {
        let start = pos
        let n = word.utf8CodeUnitCount
        let w = word.utf8Start
        for k in 0..<n {
            guard start + k < end else { throw eof() }
            guard ptr[start + k] == w[k] else { throw fail("invalid literal", at: start) }
        }
        pos = start + n
    }

    // MARK: Containers

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth { throw fail("nesting deeper than \(maxDepth) levels", at: pos) }
    }

    mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1  // [
        skipWhitespace()
        guard pos < end else { throw eof() }
        if ptr[pos] == Byte.closeBracket {
            pos += 1
            depth -= 1
            return .array([])
        }
        var items: [JSONValue] = []
        items.reserveCapacity(4)
        while true {
            items.append(try parseValue())
            if try closes(Byte.closeBracket, "]", in: "array") { return .array(items) }
        }
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        pos += 1  // {
        skipWhitespace()
        guard pos < end else { throw eof() }
        if ptr[pos] == Byte.closeBrace {
            pos += 1
            depth -= 1
            return .object(JSONObject())
        }
        var object = JSONObject()
        object.pairs.reserveCapacity(8)  // a journal record has 5-6 keys, a request 3-4
        // For large objects, an index of key -> position keeps duplicate detection linear.
        var index: [ExactID: Int]? = nil
        while true {
            guard ptr[pos] == Byte.quote else { throw fail("expected string key in object", at: pos) }
            let key = try parseString()
            skipWhitespace()
            guard pos < end else { throw eof() }
            guard ptr[pos] == Byte.colon else { throw fail("expected ':' after object key", at: pos) }
            pos += 1
            skipWhitespace()
            let value = try parseValue()
            if !Self.insert(key, value, into: &object.pairs, index: &index) { written = false }
            if try closes(Byte.closeBrace, "}", in: "object") { return .object(object) }
        }
    }

    /// After a container's value: true at its closing byte (consumed, the container left), false
    /// after a comma (another value follows).
    @inline(__always)
    mutating func closes(_ closing: UInt8, _ shown: String, in container: String) throws(JSONParseError) -> Bool {
        skipWhitespace()
        guard pos < end else { throw eof() }
        let b = ptr[pos]
        if b == Byte.comma {
            pos += 1
            skipWhitespace()
            guard pos < end else { throw eof() }
            if ptr[pos] == closing { throw fail("trailing comma in \(container)", at: pos) }
            return false
        }
        guard b == closing else { throw fail("expected ',' or '\(shown)' in \(container)", at: pos) }
        pos += 1
        depth -= 1
        return true
    }

    /// Inserts a pair; a repeated key keeps its first position and takes the new (last) value.
    /// False for a repeated key.
    @inline(__always)
    static func insert(
        _ key: String, _ value: JSONValue, into pairs: inout [(key: String, value: JSONValue)],
        index: inout [ExactID: Int]?
    ) -> Bool {
        if let existing = index {
            if let i = existing[ExactID(key)] {
                pairs[i].value = value
                return false
            } else {
                index?[ExactID(key)] = pairs.count
                pairs.append((key: key, value: value))
            }
            return true
        }
        for i in pairs.indices where ExactUTF8.equal(pairs[i].key, key) {
            pairs[i].value = value
            return false
        }
        pairs.append((key: key, value: value))
        if pairs.count >= 16 {
            var built: [ExactID: Int] = [:]
            built.reserveCapacity(pairs.count * 2)
            for (i, p) in pairs.enumerated() { built[ExactID(p.key)] = i }
            index = built
        }
        return true
    }

    // MARK: Numbers

    mutating func parseNumber() throws(JSONParseError) -> String {
        let start = pos
        var i = pos
        if ptr[i] == Byte.minus { i += 1 }
        guard i < end else { throw eof() }
        let first = ptr[i]
        if first == Byte.zero {
            i += 1
            if i < end, ptr[i] >= Byte.zero && ptr[i] <= Byte.nine {
                throw fail("leading zeros are not allowed", at: i - 1)
            }
        } else if first > Byte.zero && first <= Byte.nine {
            i += 1
            while i < end, ptr[i] >= Byte.zero && ptr[i] <= Byte.nine { i += 1 }
        } else {
            throw fail("expected digit", at: i)
        }
        if i < end, ptr[i] == Byte.dot {
            i += 1
            guard i < end else { throw eof() }
            guard ptr[i] >= Byte.zero && ptr[i] <= Byte.nine else { throw fail("expected digit after '.'", at: i) }
            while i < end, ptr[i] >= Byte.zero && ptr[i] <= Byte.nine { i += 1 }
        }
        if i < end, ptr[i] == Byte.lowerE || ptr[i] == Byte.upperE {
            i += 1
            guard i < end else { throw eof() }
            if ptr[i] == Byte.plus || ptr[i] == Byte.minus { i += 1 }
            guard i < end else { throw eof() }
            guard ptr[i] >= Byte.zero && ptr[i] <= Byte.nine else { throw fail("expected digit in exponent", at: i) }
            while i < end, ptr[i] >= Byte.zero && ptr[i] <= Byte.nine { i += 1 }
        }
        pos = i
        return Self.validatedString(UnsafeBufferPointer(start: ptr + start, count: i - start), ascii: true)
    }

    // MARK: Strings

    /// Parses a string starting at the opening quote at `pos`.
    mutating func parseString() throws(JSONParseError) -> String {
        let start = pos + 1
        var i = start
        var ascii = true
        while true {
            // Fast scan over plain ASCII, eight bytes at a time, then byte by byte.
            i = plainASCIIEnd(from: i)
            while i < end {
                let b = ptr[i]
                if b < 0x80 && b >= 0x20 && b != Byte.quote && b != Byte.backslash {
                    i += 1
                } else {
                    break
                }
            }
            guard i < end else { throw eof() }
            let b = ptr[i]
            if b == Byte.quote {
                pos = i + 1
                return Self.validatedString(UnsafeBufferPointer(start: ptr + start, count: i - start), ascii: ascii)
            }
            if b == Byte.backslash {
                return try parseEscapedString(start: start, at: i)
            }
            if b < 0x20 { throw fail("control character in string", at: i) }
            guard let next = utf8SequenceEnd(at: i) else { throw fail("invalid UTF-8", at: i) }
            i = next
            ascii = false
        }
    }

    /// The first index at or after `i` of a byte that is not a plain string byte (ASCII 0x20-0x7F
    /// other than `"` and `\`), eight bytes at a time; the last few bytes are left to the byte loop.
    @inline(__always)
    func plainASCIIEnd(from i: Int) -> Int {
        var i = i
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        while i + 8 <= end {
            let word = UInt64(littleEndian: UnsafeRawPointer(ptr + i).loadUnaligned(as: UInt64.self))
            // A byte's high bit is set in `special` if it may be a quote, a backslash, a control
            // byte or non-ASCII (the classic "has zero / has less" tests: they can flag a byte
            // above a real hit, never one below, so the lowest flag is a real one).
            let quote = word ^ (ones &* UInt64(Byte.quote))
            let backslash = word ^ (ones &* UInt64(Byte.backslash))
            let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word) | word
            let flagged = special & highs
            if flagged != 0 { return i + flagged.trailingZeroBitCount / 8 }
            i += 8
        }
        return i
    }

    /// A String of bytes this parser has checked are UTF-8 (`ascii`: all below 0x80). Where the
    /// standard library can (Swift 6.2), it takes them without checking them again (a parse makes
    /// about ten strings a request; the second check was a tenth of a journal replay).
    @inline(__always)
    static func validatedString(_ bytes: UnsafeBufferPointer<UInt8>, ascii: Bool) -> String {
        #if compiler(>=6.2)
        if #available(macOS 26.0, iOS 26.0, watchOS 26.0, tvOS 26.0, visionOS 26.0, *) {
            return unsafe String(copying: UTF8Span(unchecked: bytes.span, isKnownASCII: ascii))
        }
        #endif
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Continues a string that has an escape at `i`; bytes `start..<i` are plain and already valid.
    mutating func parseEscapedString(start: Int, at escapeAt: Int) throws(JSONParseError) -> String {
        written = false
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(start: ptr + start, count: escapeAt - start))
        var i = escapeAt
        while true {
            let runStart = i
            while i < end {
                let b = ptr[i]
                if b < 0x80 && b >= 0x20 && b != Byte.quote && b != Byte.backslash {
                    i += 1
                } else if b >= 0x80 {
                    guard let next = utf8SequenceEnd(at: i) else { throw fail("invalid UTF-8", at: i) }
                    i = next
                } else {
                    break
                }
            }
            if i > runStart {
                scratch.append(contentsOf: UnsafeBufferPointer(start: ptr + runStart, count: i - runStart))
            }
            guard i < end else { throw eof() }
            let b = ptr[i]
            if b == Byte.quote {
                pos = i + 1
                return String(decoding: scratch, as: UTF8.self)
            }
            if b < 0x20 { throw fail("control character in string", at: i) }
            // Backslash.
            let escapeStart = i
            guard i + 1 < end else { throw eof() }
            let e = ptr[i + 1]
            i += 2
            switch e {
            case Byte.quote: scratch.append(Byte.quote)
            case Byte.backslash: scratch.append(Byte.backslash)
            case Byte.slash: scratch.append(Byte.slash)
            case 0x62: scratch.append(0x08)  // b
            case 0x66: scratch.append(0x0C)  // f
            case 0x6E: scratch.append(0x0A)  // n
            case 0x72: scratch.append(0x0D)  // r
            case 0x74: scratch.append(0x09)  // t
            case 0x75:  // u
                var scalar = try hex4(at: i, escapeStart: escapeStart)
                i += 4
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    // Must be followed by an escaped low surrogate.
                    guard i < end else { throw eof() }
                    guard ptr[i] == Byte.backslash else { throw fail("invalid \\u escape", at: escapeStart) }
                    guard i + 1 < end else { throw eof() }
                    guard ptr[i + 1] == 0x75 else { throw fail("invalid \\u escape", at: escapeStart) }
                    let low = try hex4(at: i + 2, escapeStart: i)
                    guard low >= 0xDC00 && low <= 0xDFFF else { throw fail("invalid \\u escape", at: escapeStart) }
                    i += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
                    throw fail("invalid \\u escape", at: escapeStart)
                }
                appendUTF8(scalar)
            default:
                throw fail("invalid escape", at: escapeStart)
            }
        }
    }

    /// Reads 4 hex digits at `i` (part of the \u escape that starts at `escapeStart`).
    func hex4(at i: Int, escapeStart: Int) throws(JSONParseError) -> UInt32 {
        var v: UInt32 = 0
        for k in 0..<4 {
            guard i + k < end else { throw eof() }
            let b = ptr[i + k]
            let d: UInt8
            switch b {
            case 0x30...0x39: d = b - 0x30
            case 0x41...0x46: d = b - 0x41 + 10
            case 0x61...0x66: d = b - 0x61 + 10
            default: throw fail("invalid \\u escape", at: escapeStart)
            }
            v = v << 4 | UInt32(d)
        }
        return v
    }

    mutating func appendUTF8(_ s: UInt32) {
        if s < 0x80 {
            scratch.append(UInt8(s))
        } else if s < 0x800 {
            scratch.append(UInt8(0xC0 | (s >> 6)))
            scratch.append(UInt8(0x80 | (s & 0x3F)))
        } else if s < 0x10000 {
            scratch.append(UInt8(0xE0 | (s >> 12)))
            scratch.append(UInt8(0x80 | ((s >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (s & 0x3F)))
        } else {
            scratch.append(UInt8(0xF0 | (s >> 18)))
            scratch.append(UInt8(0x80 | ((s >> 12) & 0x3F)))
            scratch.append(UInt8(0x80 | ((s >> 6) & 0x3F)))
            scratch.append(UInt8(0x80 | (s & 0x3F)))
        }
    }

    /// Validates one multi-byte UTF-8 sequence whose lead byte (>= 0x80) is at `i`, per Unicode
    /// Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF). Returns the index after it,
    /// or nil if invalid or cut off by the end of input.
    @inline(__always)
    func utf8SequenceEnd(at i: Int) -> Int? {
        let b0 = ptr[i]
        @inline(__always) func cont(_ k: Int, _ lo: UInt8 = 0x80, _ hi: UInt8 = 0xBF) -> Bool {
            i + k < end && ptr[i + k] >= lo && ptr[i + k] <= hi
        }
        switch b0 {
        case 0xC2...0xDF:
            return cont(1) ? i + 2 : nil
        case 0xE0:
            return cont(1, 0xA0, 0xBF) && cont(2) ? i + 3 : nil
        case 0xE1...0xEC, 0xEE...0xEF:
            return cont(1) && cont(2) ? i + 3 : nil
        case 0xED:
            return cont(1, 0x80, 0x9F) && cont(2) ? i + 3 : nil
        case 0xF0:
            return cont(1, 0x90, 0xBF) && cont(2) && cont(3) ? i + 4 : nil
        case 0xF1...0xF3:
            return cont(1) && cont(2) && cont(3) ? i + 4 : nil
        case 0xF4:
            return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? i + 4 : nil
        default:
            return nil
        }
    }
}

// The plain-param scanner reads its bytes through a pointer for the same reason as the parser
// above: every field of a hot request is read this way, bounds checked by the scan that found them.
extension PlainObject {
    /// The string at `key`, nil when absent.
    func string(_ key: String) -> String? {
        stringBytes(key).map { _JSONParserState.validatedString($0.assumingMemoryBound(to: UInt8.self), ascii: true) }
    }

    /// The bytes of the string at `key`, nil when absent: its text, since a plain object's
    /// strings are printable ASCII with no escape. Each pair is `"key":"value"` followed by `,`
    /// or `}`: no quote inside either string.
    package func stringBytes(_ key: String) -> UnsafeRawBufferPointer? {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        return ExactUTF8.withBytes(key) { wanted -> UnsafeRawBufferPointer? in
            let quote = UInt8(ascii: "\"")
            var i = 1  // past `{`
            while i < bytes.count && base[i] == quote {
                let keyStart = i + 1
                let k = nextQuote(base, from: keyStart)
                let valueStart = k + 3  // past `":"`
                let v = nextQuote(base, from: valueStart)
                if k - keyStart == wanted.count, ExactUTF8.compare(UnsafeBufferPointer(start: base + keyStart, count: k - keyStart), wanted) == 0 {
                    return UnsafeRawBufferPointer(start: base + valueStart, count: v - valueStart)
                }
                i = v + 2  // past `"` and `,` (or `}`)
            }
            return nil
        }
    }

    /// The first quote at or after `i` (there is one: the scanner checked the object), eight bytes
    /// at a time while eight are left.
    @inline(__always)
    private func nextQuote(_ base: UnsafePointer<UInt8>, from i: Int) -> Int {
        var i = i
        let ones: UInt64 = 0x0101_0101_0101_0101
        while i + 8 <= bytes.count {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) ^ (ones &* 0x22)
            let zero = (word &- ones) & ~word & (ones &* 0x80)
            if zero != 0 { return i + zero.trailingZeroBitCount / 8 }
            i += 8
        }
        while base[i] != UInt8(ascii: "\"") { i += 1 }
        return i
    }
}
