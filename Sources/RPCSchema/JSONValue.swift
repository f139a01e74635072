// A parsed JSON value that keeps number literals as text and object keys in order.

/// A parsed JSON value. Objects keep key order (needed for deterministic output such as
/// `{"id":..,"method":..,"param":..}`).
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// The literal text as it appeared (or as written), e.g. "42", "-1.5e3".
    case number(String)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// A number holding the decimal text of `i`.
    public static func number(_ i: Int) -> JSONValue {
        .number(String(i))
    }
}

// MARK: - Accessors

extension JSONValue {
    /// The payload of `.string`, else nil.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The payload of `.object`, else nil.
    public var objectValue: JSONObject? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// The payload of `.array`, else nil.
    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// The value of a `.number` whose literal is an integer (no fraction, no exponent) that fits in
    /// `Int`; else nil.
    public var intValue: Int? {
        if case .number(let text) = self, JSONNumberText.isIntegerLiteral(text) { return Int(text) }
        return nil
    }

    /// The payload of `.bool`, else nil.
    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The value of any `.number` as a Double (nil if not a number or not finite).
    public var doubleValue: Double? {
        if case .number(let text) = self, let d = Double(text), d.isFinite { return d }
        return nil
    }

    /// True for `.null`.
    public var isNull: Bool {
        if case .null = self { return true }
        return false
    }
}

enum JSONNumberText {
    /// True when `text` is an optional "-" followed by decimal digits only.
    static func isIntegerLiteral(_ text: String) -> Bool {
        var sawDigit = false
        var first = true
        for b in text.utf8 {
            defer { first = false }
            if b >= 0x30 && b <= 0x39 { sawDigit = true; continue }
            if first && b == 0x2D { continue }
            return false
        }
        return sawDigit
    }
}

// MARK: - Literals

extension JSONValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension JSONValue: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int) { self = .number(String(value)) }
}

extension JSONValue: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
}

extension JSONValue: ExpressibleByDictionaryLiteral {
    /// Keeps literal order; a key repeated in the literal keeps its first position and last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        var o = JSONObject()
        for (k, v) in elements { o[k] = v }
        self = .object(o)
    }
}

extension JSONValue: ExpressibleByNilLiteral {
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue: CustomStringConvertible {
    /// Compact JSON text.
    public var description: String { JSONWriter.string(self) }
}

// MARK: - JSONObject

/// A JSON object: key/value pairs in insertion order.
public struct JSONObject: Sendable, Equatable {
    /// The pairs in insertion order. Lookups treat the last pair with a given key as the one that
    /// counts; the parser and the subscript setter never produce duplicates.
    public var pairs: [(key: String, value: JSONValue)]

    public init(_ pairs: [(key: String, value: JSONValue)] = []) {
        self.pairs = pairs
    }

    /// Keys are matched by their exact UTF-8 bytes (`ExactUTF8`), not as canonically equivalent text.
    ///
    /// The value for `key` (the last pair with that key). Setting replaces the value in place, or
    /// appends a new pair; setting nil removes every pair with that key.
    public subscript(key: String) -> JSONValue? {
        get {
            var i = pairs.count
            while i > 0 {
                i -= 1
                if ExactUTF8.equal(pairs[i].key, key) { return pairs[i].value }
            }
            return nil
        }
        set {
            if let newValue {
                var i = pairs.count
                while i > 0 {
                    i -= 1
                    if ExactUTF8.equal(pairs[i].key, key) {
                        pairs[i].value = newValue
                        return
                    }
                }
                pairs.append((key: key, value: newValue))
            } else {
                pairs.removeAll { ExactUTF8.equal($0.key, key) }
            }
        }
    }

    public var count: Int { pairs.count }

    public var keys: [String] { pairs.map(\.key) }

    public var isEmpty: Bool { pairs.isEmpty }

    /// Order-sensitive: two objects are equal when they hold the same pairs in the same order.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.pairs.count == rhs.pairs.count else { return false }
        for i in lhs.pairs.indices {
            guard ExactUTF8.equal(lhs.pairs[i].key, rhs.pairs[i].key), lhs.pairs[i].value == rhs.pairs[i].value else {
                return false
            }
        }
        return true
    }
}

extension JSONObject: ExpressibleByDictionaryLiteral {
    /// Keeps literal order; a key repeated in the literal keeps its first position and last value.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self.init()
        for (k, v) in elements { self[k] = v }
    }
}

// MARK: - Codable

/// `JSONValue` is Codable so that a Codable struct can hold arbitrary JSON (e.g. RPC params).
/// With `JSONValueEncoder`/`JSONValueDecoder` it passes through unchanged (number text kept);
/// with other coders numbers go through Int64 or Double.
extension JSONValue: Codable {
    public init(from decoder: any Decoder) throws {
        if let d = decoder as? _JSONValueDecoderImpl {
            self = d.value
            return
        }
        if let keyed = try? decoder.container(keyedBy: _JSONDynamicKey.self) {
            var o = JSONObject()
            for key in keyed.allKeys {
                o[key.stringValue] = try keyed.decode(JSONValue.self, forKey: key)
            }
            self = .object(o)
            return
        }
        if var unkeyed = try? decoder.unkeyedContainer() {
            var items: [JSONValue] = []
            while !unkeyed.isAtEnd {
                items.append(try unkeyed.decode(JSONValue.self))
            }
            self = .array(items)
            return
        }
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? c.decode(Int64.self) {
            self = .number(String(i))
        } else if let u = try? c.decode(UInt64.self) {
            self = .number(String(u))
        } else if let d = try? c.decode(Double.self) {
            self = .number("\(d)")
        } else {
            self = .string(try c.decode(String.self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        if let e = encoder as? _JSONValueEncoderImpl {
            e.storeValue(self)
            return
        }
        switch self {
        case .null:
            var c = encoder.singleValueContainer()
            try c.encodeNil()
        case .bool(let b):
            var c = encoder.singleValueContainer()
            try c.encode(b)
        case .number(let text):
            var c = encoder.singleValueContainer()
            if JSONNumberText.isIntegerLiteral(text), let i = Int64(text) {
                try c.encode(i)
            } else if JSONNumberText.isIntegerLiteral(text), let u = UInt64(text) {
                try c.encode(u)
            } else if let d = Double(text) {
                try c.encode(d)
            } else {
                throw EncodingError.invalidValue(
                    self, .init(codingPath: encoder.codingPath, debugDescription: "invalid number literal \(text)"))
            }
        case .string(let s):
            var c = encoder.singleValueContainer()
            try c.encode(s)
        case .array(let items):
            var c = encoder.unkeyedContainer()
            for item in items { try c.encode(item) }
        case .object(let o):
            var c = encoder.container(keyedBy: _JSONDynamicKey.self)
            for (k, v) in o.pairs { try c.encode(v, forKey: _JSONDynamicKey(k)) }
        }
    }
}

/// A coding key that is any string (or an array index).
struct _JSONDynamicKey: CodingKey, Sendable {
    var stringValue: String
    var intValue: Int?

    init(_ s: String) {
        stringValue = s
        intValue = nil
    }

    init?(stringValue: String) {
        self.stringValue = stringValue
        intValue = nil
    }

    init(intValue: Int) {
        stringValue = "Index \(intValue)"
        self.intValue = intValue
    }

    static let `super` = _JSONDynamicKey("super")
}
