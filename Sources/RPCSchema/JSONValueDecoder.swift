// Decodable types from JSONValue, with strict typing and precise coding paths.

/// Decodes `Decodable` values from a `JSONValue`. No coercion: Bool only from true/false, String only
/// from strings, integers only from integer literals that fit, floating point from any number.
/// Errors are `Swift.DecodingError`s with the coding path of the offending value.
public struct JSONValueDecoder: Sendable {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try _JSONValueDecoderImpl.decodeValue(T.self, value, path: [])
    }
}

// MARK: - Shared helpers

enum _JSONDecoding {
    static func kind(_ v: JSONValue) -> String {
        switch v {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    static func mismatch(_ type: Any.Type, expected: String, found v: JSONValue, path: @autoclosure () -> [any CodingKey]) -> DecodingError {
        if case .null = v {
            return .valueNotFound(type, .init(codingPath: path(), debugDescription: "expected \(expected), found null"))
        }
        return .typeMismatch(type, .init(codingPath: path(), debugDescription: "expected \(expected), found \(kind(v))"))
    }

    static func bool(_ v: JSONValue, path: @autoclosure () -> [any CodingKey]) throws -> Bool {
        if case .bool(let b) = v { return b }
        throw mismatch(Bool.self, expected: "a boolean", found: v, path: path())
    }

    static func string(_ v: JSONValue, path: @autoclosure () -> [any CodingKey]) throws -> String {
        if case .string(let s) = v { return s }
        throw mismatch(String.self, expected: "a string", found: v, path: path())
    }

    static func integer<T: FixedWidthInteger>(_ type: T.Type, _ v: JSONValue, path: @autoclosure () -> [any CodingKey]) throws -> T {
        guard case .number(let text) = v else {
            throw mismatch(T.self, expected: "an integer", found: v, path: path())
        }
        if let i = T(text) { return i }
        guard JSONNumberText.isIntegerLiteral(text) else {
            throw DecodingError.typeMismatch(
                T.self, .init(codingPath: path(), debugDescription: "expected an integer, found \(text)"))
        }
        throw DecodingError.dataCorrupted(
            .init(codingPath: path(), debugDescription: "number \(text) does not fit in \(T.self)"))
    }

    static func double(_ v: JSONValue, path: @autoclosure () -> [any CodingKey]) throws -> Double {
        guard case .number(let text) = v else {
            throw mismatch(Double.self, expected: "a number", found: v, path: path())
        }
        guard let d = Double(text), d.isFinite else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: path(), debugDescription: "number \(text) does not fit in Double"))
        }
        return d
    }

    static func float(_ v: JSONValue, path: @autoclosure () -> [any CodingKey]) throws -> Float {
        guard case .number(let text) = v else {
            throw mismatch(Float.self, expected: "a number", found: v, path: path())
        }
        guard let f = Float(text), f.isFinite else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: path(), debugDescription: "number \(text) does not fit in Float"))
        }
        return f
    }
}

// MARK: - Decoder

/// Returns `value` as `T`, which the caller has checked to be `U`'s own type (`T.self == U.self`).
/// Unlike `as? T`, this needs no `Optional<T>` metadata, which is costly to look up in generic code.
@inline(__always)
func _sameType<U, T>(_ value: U, as type: T.Type) -> T {
    precondition(T.self == U.self)
    return unsafeBitCast(value, to: T.self)
}

final class _JSONValueDecoderImpl: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: JSONValue, codingPath: [any CodingKey]) {
        self.value = value
        self.codingPath = codingPath
    }

    /// Decodes `T` from `v`, short-cutting JSONValue and the most common primitives.
    static func decodeValue<T: Decodable>(
        _ type: T.Type, _ v: JSONValue, path: @autoclosure () -> [any CodingKey]
    ) throws -> T {
        // Fast paths for the most common leaf types (skip a nested decoder and container).
        if T.self == JSONValue.self { return _sameType(v, as: T.self) }
        if T.self == String.self { return _sameType(try _JSONDecoding.string(v, path: path()), as: T.self) }
        if T.self == Int.self { return _sameType(try _JSONDecoding.integer(Int.self, v, path: path()), as: T.self) }
        if T.self == Bool.self { return _sameType(try _JSONDecoding.bool(v, path: path()), as: T.self) }
        if T.self == Double.self { return _sameType(try _JSONDecoding.double(v, path: path()), as: T.self) }
        return try T(from: _JSONValueDecoderImpl(value: v, codingPath: path()))
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let object) = value else {
            throw _JSONDecoding.mismatch(JSONObject.self, expected: "an object", found: value, path: codingPath)
        }
        return KeyedDecodingContainer(_JSONKeyedDecodingContainer<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else {
            throw _JSONDecoding.mismatch([JSONValue].self, expected: "an array", found: value, path: codingPath)
        }
        return _JSONUnkeyedDecodingContainer(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        _JSONSingleValueDecodingContainer(value: value, codingPath: codingPath)
    }
}

// MARK: - Keyed

/// The non-generic state of a keyed container. Keeping every field of the generic container in
/// one non-generic struct lets the runtime copy and destroy it without generic metadata look-ups.
struct _JSONKeyedDecodingState {
    let object: JSONObject
    let codingPath: [any CodingKey]
    /// Key -> index of the pair that counts (the last), built only for large objects.
    let index: [ExactID: Int]?

    init(object: JSONObject, codingPath: [any CodingKey]) {
        self.object = object
        self.codingPath = codingPath
        if object.pairs.count > 16 {
            var idx: [ExactID: Int] = [:]
            idx.reserveCapacity(object.pairs.count)
            for (i, p) in object.pairs.enumerated() { idx[ExactID(p.key)] = i }
            index = idx
        } else {
            index = nil
        }
    }

    @inline(__always)
    func lookup(_ key: String) -> JSONValue? {
        if let index {
            guard let i = index[ExactID(key)] else { return nil }
            return object.pairs[i].value
        }
        return object[key]
    }
}

struct _JSONKeyedDecodingContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let state: _JSONKeyedDecodingState

    init(object: JSONObject, codingPath: [any CodingKey]) {
        state = _JSONKeyedDecodingState(object: object, codingPath: codingPath)
    }

    var object: JSONObject { state.object }
    var codingPath: [any CodingKey] { state.codingPath }

    var allKeys: [Key] {
        var seen = Set<ExactID>()
        var keys: [Key] = []
        for p in object.pairs where seen.insert(ExactID(p.key)).inserted {
            if let k = Key(stringValue: p.key) { keys.append(k) }
        }
        return keys
    }

    @inline(__always)
    func lookup(_ key: Key) -> JSONValue? { state.lookup(key.stringValue) }

    func contains(_ key: Key) -> Bool { lookup(key) != nil }

    func path(_ key: Key) -> [any CodingKey] { codingPath + [key] }

    func require(_ key: Key) throws -> JSONValue {
        guard let v = lookup(key) else {
            throw DecodingError.keyNotFound(
                key, .init(codingPath: codingPath, debugDescription: "missing key '\(key.stringValue)'"))
        }
        return v
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        if case .null = try require(key) { return true }
        return false
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        try _JSONDecoding.bool(require(key), path: path(key))
    }
    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        try _JSONDecoding.string(require(key), path: path(key))
    }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        try _JSONDecoding.double(require(key), path: path(key))
    }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float {
        try _JSONDecoding.float(require(key), path: path(key))
    }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
        try _JSONDecoding.integer(Int.self, require(key), path: path(key))
    }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 {
        try _JSONDecoding.integer(Int8.self, require(key), path: path(key))
    }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 {
        try _JSONDecoding.integer(Int16.self, require(key), path: path(key))
    }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 {
        try _JSONDecoding.integer(Int32.self, require(key), path: path(key))
    }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
        try _JSONDecoding.integer(Int64.self, require(key), path: path(key))
    }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt {
        try _JSONDecoding.integer(UInt.self, require(key), path: path(key))
    }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 {
        try _JSONDecoding.integer(UInt8.self, require(key), path: path(key))
    }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 {
        try _JSONDecoding.integer(UInt16.self, require(key), path: path(key))
    }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 {
        try _JSONDecoding.integer(UInt32.self, require(key), path: path(key))
    }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
        try _JSONDecoding.integer(UInt64.self, require(key), path: path(key))
    }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try _JSONValueDecoderImpl.decodeValue(T.self, require(key), path: path(key))
    }

    // decodeIfPresent: nil for a missing key or an explicit null (the standard library's default
    // implementations do this through contains + decodeNil; these avoid double lookups).
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
        guard let v = lookup(key), !v.isNull else { return nil }
        return try _JSONDecoding.string(v, path: path(key))
    }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
        guard let v = lookup(key), !v.isNull else { return nil }
        return try _JSONDecoding.integer(Int.self, v, path: path(key))
    }
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
        guard let v = lookup(key), !v.isNull else { return nil }
        return try _JSONDecoding.bool(v, path: path(key))
    }
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let v = lookup(key), !v.isNull else { return nil }
        return try _JSONValueDecoderImpl.decodeValue(T.self, v, path: path(key))
    }

    func nestedContainer<NestedKey: CodingKey>(
        keyedBy type: NestedKey.Type, forKey key: Key
    ) throws -> KeyedDecodingContainer<NestedKey> {
        let v = try require(key)
        guard case .object(let o) = v else {
            throw _JSONDecoding.mismatch(JSONObject.self, expected: "an object", found: v, path: path(key))
        }
        return KeyedDecodingContainer(_JSONKeyedDecodingContainer<NestedKey>(object: o, codingPath: path(key)))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        let v = try require(key)
        guard case .array(let items) = v else {
            throw _JSONDecoding.mismatch([JSONValue].self, expected: "an array", found: v, path: path(key))
        }
        return _JSONUnkeyedDecodingContainer(items: items, codingPath: path(key))
    }

    func superDecoder() throws -> any Decoder {
        let key = _JSONDynamicKey.super
        return _JSONValueDecoderImpl(value: object["super"] ?? .null, codingPath: codingPath + [key])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        _JSONValueDecoderImpl(value: lookup(key) ?? .null, codingPath: path(key))
    }
}

// MARK: - Unkeyed

struct _JSONUnkeyedDecodingContainer: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(items: [JSONValue], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    var currentPath: [any CodingKey] { codingPath + [_JSONDynamicKey(intValue: currentIndex)] }

    mutating func next(_ type: Any.Type) throws -> JSONValue {
        guard currentIndex < items.count else {
            throw DecodingError.valueNotFound(
                type,
                .init(codingPath: currentPath, debugDescription: "expected \(type), found the end of the array"))
        }
        return items[currentIndex]
    }

    mutating func decodeNil() throws -> Bool {
        guard currentIndex < items.count else {
            throw DecodingError.valueNotFound(
                JSONValue.self, .init(codingPath: currentPath, debugDescription: "found the end of the array"))
        }
        if case .null = items[currentIndex] {
            currentIndex += 1
            return true
        }
        return false
    }

    mutating func take<T>(_ type: T.Type, _ f: (JSONValue, @autoclosure () -> [any CodingKey]) throws -> T) throws -> T {
        let v = try next(T.self)
        let r = try f(v, currentPath)
        currentIndex += 1
        return r
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try take(Bool.self, _JSONDecoding.bool) }
    mutating func decode(_ type: String.Type) throws -> String { try take(String.self, _JSONDecoding.string) }
    mutating func decode(_ type: Double.Type) throws -> Double { try take(Double.self, _JSONDecoding.double) }
    mutating func decode(_ type: Float.Type) throws -> Float { try take(Float.self, _JSONDecoding.float) }
    mutating func decode(_ type: Int.Type) throws -> Int { try take(Int.self) { try _JSONDecoding.integer(Int.self, $0, path: $1()) } }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try take(Int8.self) { try _JSONDecoding.integer(Int8.self, $0, path: $1()) } }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try take(Int16.self) { try _JSONDecoding.integer(Int16.self, $0, path: $1()) } }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try take(Int32.self) { try _JSONDecoding.integer(Int32.self, $0, path: $1()) } }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try take(Int64.self) { try _JSONDecoding.integer(Int64.self, $0, path: $1()) } }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try take(UInt.self) { try _JSONDecoding.integer(UInt.self, $0, path: $1()) } }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try take(UInt8.self) { try _JSONDecoding.integer(UInt8.self, $0, path: $1()) } }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try take(UInt16.self) { try _JSONDecoding.integer(UInt16.self, $0, path: $1()) } }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try take(UInt32.self) { try _JSONDecoding.integer(UInt32.self, $0, path: $1()) } }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try take(UInt64.self) { try _JSONDecoding.integer(UInt64.self, $0, path: $1()) } }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try take(T.self) { try _JSONValueDecoderImpl.decodeValue(T.self, $0, path: $1()) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try take(KeyedDecodingContainer<NestedKey>.self) { v, path in
            guard case .object(let o) = v else {
                throw _JSONDecoding.mismatch(JSONObject.self, expected: "an object", found: v, path: path())
            }
            return KeyedDecodingContainer(_JSONKeyedDecodingContainer<NestedKey>(object: o, codingPath: path()))
        }
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try take((any UnkeyedDecodingContainer).self) { v, path in
            guard case .array(let items) = v else {
                throw _JSONDecoding.mismatch([JSONValue].self, expected: "an array", found: v, path: path())
            }
            return _JSONUnkeyedDecodingContainer(items: items, codingPath: path())
        }
    }

    mutating func superDecoder() throws -> any Decoder {
        try take((any Decoder).self) { v, path in _JSONValueDecoderImpl(value: v, codingPath: path()) }
    }
}

// MARK: - Single value

struct _JSONSingleValueDecodingContainer: SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { value.isNull }

    func decode(_ type: Bool.Type) throws -> Bool { try _JSONDecoding.bool(value, path: codingPath) }
    func decode(_ type: String.Type) throws -> String { try _JSONDecoding.string(value, path: codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try _JSONDecoding.double(value, path: codingPath) }
    func decode(_ type: Float.Type) throws -> Float { try _JSONDecoding.float(value, path: codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try _JSONDecoding.integer(Int.self, value, path: codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try _JSONDecoding.integer(Int8.self, value, path: codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try _JSONDecoding.integer(Int16.self, value, path: codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try _JSONDecoding.integer(Int32.self, value, path: codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try _JSONDecoding.integer(Int64.self, value, path: codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try _JSONDecoding.integer(UInt.self, value, path: codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try _JSONDecoding.integer(UInt8.self, value, path: codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try _JSONDecoding.integer(UInt16.self, value, path: codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try _JSONDecoding.integer(UInt32.self, value, path: codingPath) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try _JSONDecoding.integer(UInt64.self, value, path: codingPath) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try _JSONValueDecoderImpl.decodeValue(T.self, value, path: codingPath)
    }
}
