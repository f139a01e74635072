/// Reads a line of a fixed shape, such as `{"id":"…","method":"…","param":…}`, without building
/// its envelope as a JSON object: literal bytes, plain strings, one JSON value, whole numbers.
/// Package-internal: not part of the `RPC` product's API.
/// Every method returns nil or false for anything outside its narrow case, and the caller then
/// parses the line in full, which decides and words the error: so a scanner path must accept
/// only what the full parse would accept, and read it the same way.
package struct EnvelopeScanner {
    private let bytes: UnsafeRawBufferPointer
    /// Where the scanned part ends (a journal line's seal starts there).
    private let end: Int
    package private(set) var position = 0

    package init(_ bytes: UnsafeRawBufferPointer, end: Int? = nil) {
        self.bytes = bytes
        self.end = min(end ?? bytes.count, bytes.count)
    }

    package var atEnd: Bool { position == end }

    /// Consumes `literal` if the bytes at the position are exactly it.
    @inline(__always)  // a few bytes, several times a line: a call cost as much as the compare
    package mutating func expect(_ literal: UnsafeBufferPointer<UInt8>) -> Bool {
        guard end - position >= literal.count else { return false }
        for k in literal.indices where bytes[position + k] != literal[k] { return false }
        position += literal.count
        return true
    }

    /// The rest of a string whose opening quote was consumed, through its closing quote: printable
    /// ASCII without escapes only (nil for anything else, including a `\`).
    package mutating func plainString() -> String? {
        let start = position
        guard let close = plainEnd(), let base = bytes.baseAddress else { return nil }
        position = close + 1
        // Printable ASCII, checked by `plainEnd`: taken without a second check.
        return _JSONParserState.validatedString(
            UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self) + start, count: close - start), ascii: true)
    }

    /// Where the closing quote of a plain string starting at the position lies (the position
    /// is not moved); nil if a byte before it is not printable ASCII, or is a backslash.
    @inline(__always)
    private func plainEnd() -> Int? {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return nil }
        var i = position
        // Eight bytes at a time while none is a quote, a backslash, a control byte, DEL or non-ASCII.
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        @inline(__always) func hasZeroByte(_ x: UInt64) -> Bool { (x &- ones) & ~x & highs != 0 }
        while i + 8 <= end {
            let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
            let special = word & highs != 0 || (word &- ones &* 0x20) & ~word & highs != 0
                || hasZeroByte(word ^ (ones &* 0x22)) || hasZeroByte(word ^ (ones &* 0x5C)) || hasZeroByte(word ^ (ones &* 0x7F))
            if special { break }
            i += 8
        }
        while i < end {
            let byte = base[i]
            if byte == UInt8(ascii: "\"") { return i }
            guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") else { return nil }
            i += 1
        }
        return nil
    }

    /// An object of plain strings starting at the position, `{}` or `{"k":"v",…}` with at most
    /// `PlainObject.maxPairs` pairs: keys and values printable ASCII without a quote or a
    /// backslash, no whitespace, no repeated key; nil (position unchanged) for anything else.
    /// Such an object is what `JSONWriter` writes for it, and reads the same to every parser.
    package mutating func plainObject() -> PlainObject? {
        let start = position
        let count = withUnsafeTemporaryAllocation(of: Range<Int>.self, capacity: PlainObject.maxPairs) { keys -> Int? in
            guard expect(Self.openBrace.bytes) else { return nil }
            if expect(Self.closingBrace.bytes) { return 0 }
            var count = 0
            while true {
                let keyStart = position + 1
                guard count < keys.count, expect(Self.quote.bytes), plainSpan() else { return nil }
                let key = keyStart..<(position - 1)
                guard !keys[..<count].contains(where: { $0.count == key.count && ExactUTF8.compare(utf8($0), utf8(key)) == 0 }),
                    expect(Self.colonQuote.bytes), plainSpan()
                else { return nil }
                keys.initializeElement(at: count, to: key)
                count += 1
                if expect(Self.closingBrace.bytes) { return count }
                guard expect(Self.comma.bytes) else { return nil }
            }
        }
        guard let count else {
            position = start
            return nil
        }
        written = start..<position
        return PlainObject(UnsafeRawBufferPointer(rebasing: bytes[start..<position]), count: count)
    }

    /// The bytes in `range` as UTF-8 code units.
    private func utf8(_ range: Range<Int>) -> UnsafeBufferPointer<UInt8> { slice(range).assumingMemoryBound(to: UInt8.self) }

    /// The text of plain ASCII bytes the scanner checked (a `requestHead`'s method).
    package func text(_ range: Range<Int>) -> String {
        _JSONParserState.validatedString(utf8(range), ascii: true)
    }

    /// The bytes in `range`, a view valid while the scanned line is.
    package func slice(_ range: Range<Int>) -> UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[range]) }

    /// Skips the rest of a plain string whose opening quote was consumed, through its closing
    /// quote (`plainString` without making the string).
    private mutating func plainSpan() -> Bool {
        guard let close = plainEnd() else { return false }
        position = close + 1
        return true
    }

    /// One JSON value starting at the position, nested at most `maxDepth` levels (one less than
    /// the full parse allows when the value sits inside the envelope object).
    package mutating func value(maxDepth: Int) -> JSONValue? {
        guard position < end,
            let parsed = try? JSONParser.parseValue(in: UnsafeRawBufferPointer(rebasing: bytes[..<end]), at: position, maxDepth: maxDepth)
        else { return nil }
        written = parsed.written ? position..<parsed.end : nil
        position = parsed.end
        return parsed.value
    }

    /// Where the last value read lies, when its bytes are exactly what `JSONWriter` writes for it
    /// (no whitespace, no escape, no repeated key); nil otherwise.
    package private(set) var written: Range<Int>?

    /// A JSON whole number (no sign, no leading zero) that fits in 64 bits.
    package mutating func wholeNumber() -> UInt64? {
        let start = position
        var number: UInt64 = 0
        while position < end, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
            let (times10, overflow) = number.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times10.addingReportingOverflow(UInt64(bytes[position] - UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            number = sum
            position += 1
        }
        guard position > start, bytes[start] != UInt8(ascii: "0") || position == start + 1 else { return nil }
        return number
    }

    /// The start every writer gives a request and a journal record: `{"id":"…","method":"…",
    /// "param":…` and an optional `,"key":"…"`. A `null` param is no param, as in the full decode.
    /// `methodAndParam`: where `,"method":"…","param":…` lies, when the param's bytes are what
    /// `JSONWriter` writes for it (and so the whole is what a writer writes for method and param).
    ///
    /// With `plainParams`, a param that is a `plainObject()` is not parsed: `param` is nil and
    /// `plain` holds it (the caller decodes it from there, or parses it when it needs the value).
    /// `method`: where the method's text lies (plain ASCII, checked; `text(_:)` makes it a string).
    /// With `plainParams`, the key is not made a string either: `keySpan` says where its bytes lie
    /// (plain ASCII, checked, as long as a key may be) and `key` is nil.
    package mutating func requestHead(plainParams: Bool = false) -> (
        id: String, method: Range<Int>, param: JSONValue?, plain: PlainObject?, key: String?, keySpan: Range<Int>?,
        methodAndParam: Range<Int>?
    )? {
        guard expect(Self.idPrefix.bytes), let id = plainString() else { return nil }
        let methodStart = position
        guard expect(Self.methodPrefix.bytes) else { return nil }
        let nameStart = position
        guard plainSpan() else { return nil }
        let method = nameStart..<(position - 1)
        guard expect(Self.paramPrefix.bytes) else { return nil }
        let plain = plainParams ? plainObject() : nil
        let value: JSONValue
        if plain != nil {
            value = .object(JSONObject())  // a placeholder, not returned: an empty object allocates nothing
        } else {
            guard let parsed = self.value(maxDepth: 63) else { return nil }
            value = parsed
        }
        let methodAndParam = written.map { methodStart..<$0.upperBound }
        var key: String?
        var keySpan: Range<Int>?
        if expect(Self.keyPrefix.bytes) {
            // As a request and a record accept it: 1 to `Request.maxKeyBytes` bytes.
            let keyStart = position
            guard plainSpan(), position - 1 > keyStart, position - 1 - keyStart <= Request.maxKeyBytes else { return nil }
            keySpan = keyStart..<(position - 1)
            if !plainParams { key = text(keyStart..<(position - 1)) }
        }
        // Not `value.isNull ? nil : value`: JSONValue is ExpressibleByNilLiteral, so that `nil` is `.null`.
        if let plain { return (id, method, nil, plain, key, keySpan, methodAndParam) }
        return (id, method, value.isNull ? .none : value, nil, key, keySpan, value.isNull ? nil : methodAndParam)
    }

    private static let idPrefix: StaticString = #"{"id":""#
    private static let methodPrefix: StaticString = #","method":""#
    private static let paramPrefix: StaticString = #","param":"#
    private static let keyPrefix: StaticString = #","key":""#
    package static let seqPrefix: StaticString = #","seq":"#
    package static let crcPrefix: StaticString = #","crc":""#
    package static let closingBrace: StaticString = "}"
    private static let openBrace: StaticString = "{"
    private static let quote: StaticString = "\""
    private static let colonQuote: StaticString = #":""#
    private static let comma: StaticString = ","
}
