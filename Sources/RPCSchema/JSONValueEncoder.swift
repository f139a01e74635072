// Encodable types to JSONValue, keeping the order keys were encoded in.

/// Encodes `Encodable` values to a `JSONValue`. Keyed containers keep the order keys were encoded
/// in (synthesized Codable encodes in declaration order); nil optionals encoded with
/// `encodeIfPresent` (as synthesized code does) are omitted. Integers become `.number` with their
/// decimal text, floating point values their shortest round-trip text; non-finite values throw
/// `EncodingError.invalidValue`. A value that encodes nothing becomes `{}`.
public struct JSONValueEncoder: Sendable {
    public init() {}

    public func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        try _JSONEncoding.node(value, path: []).finish()
    }
}

// MARK: - Storage

/// A node of the value being built. Containers are reference types so that containers handed out
/// earlier keep writing into the same place.
enum _JSONEncNode {
    case value(JSONValue)
    case object(_JSONEncObject)
    case array(_JSONEncArray)
    /// Filled in later by a super encoder.
    case deferred(_JSONValueEncoderImpl)

    func finish() -> JSONValue {
        switch self {
        case .value(let v): return v
        case .object(let o): return o.finish()
        case .array(let a): return a.finish()
        case .deferred(let e): return e.result()
        }
    }
}

final class _JSONEncObject {
    var pairs: [(key: String, node: _JSONEncNode)]
    /// Key -> position, built once the object grows large so that `set` stays O(1).
    var index: [String: Int]? = nil

    init() {
        pairs = []
        pairs.reserveCapacity(4)
    }

    /// Sets `key`, replacing an earlier value in place (keeping its position) or appending.
    func set(_ key: String, _ node: _JSONEncNode) {
        if index == nil {
            for i in pairs.indices where pairs[i].key == key {
                pairs[i].node = node
                return
            }
            pairs.append((key: key, node: node))
            if pairs.count > 16 {
                var idx: [String: Int] = [:]
                idx.reserveCapacity(pairs.count * 2)
                for (i, p) in pairs.enumerated() { idx[p.key] = i }
                index = idx
            }
        } else if let i = index?[key] {
            pairs[i].node = node
        } else {
            index?[key] = pairs.count
            pairs.append((key: key, node: node))
        }
    }

    func finish() -> JSONValue {
        var out: [(key: String, value: JSONValue)] = []
        out.reserveCapacity(pairs.count)
        for p in pairs { out.append((key: p.key, value: p.node.finish())) }
        return .object(JSONObject(out))
    }
}

final class _JSONEncArray {
    var nodes: [_JSONEncNode]

    init() {
        nodes = []
        nodes.reserveCapacity(4)
    }

    func finish() -> JSONValue {
        .array(nodes.map { $0.finish() })
    }
}

enum _JSONEncoding {
    static func double(_ d: Double, path: @autoclosure () -> [any CodingKey]) throws -> JSONValue {
        guard d.isFinite else {
            throw EncodingError.invalidValue(
                d, .init(codingPath: path(), debugDescription: "cannot encode non-finite number \(d)"))
        }
        return .number("\(d)")
    }

    static func float(_ f: Float, path: @autoclosure () -> [any CodingKey]) throws -> JSONValue {
        guard f.isFinite else {
            throw EncodingError.invalidValue(
                f, .init(codingPath: path(), debugDescription: "cannot encode non-finite number \(f)"))
        }
        return .number("\(f)")
    }

    /// The node for an arbitrary Encodable, with fast paths for JSONValue and common primitives.
    static func node<T: Encodable>(_ value: T, path: @autoclosure () -> [any CodingKey]) throws -> _JSONEncNode {
        if T.self == JSONValue.self { return .value(_sameType(value, as: JSONValue.self)) }
        if T.self == String.self { return .value(.string(_sameType(value, as: String.self))) }
        if T.self == Int.self { return .value(.number(String(_sameType(value, as: Int.self)))) }
        if T.self == Bool.self { return .value(.bool(_sameType(value, as: Bool.self))) }
        if T.self == Double.self { return .value(try double(_sameType(value, as: Double.self), path: path())) }
        let e = _JSONValueEncoderImpl(codingPath: path())
        try value.encode(to: e)
        return e.storage ?? .value(.object(JSONObject()))
    }
}

// MARK: - Encoder

final class _JSONValueEncoderImpl: Encoder {
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }
    var storage: _JSONEncNode?

    init(codingPath: [any CodingKey]) {
        self.codingPath = codingPath
    }

    func result() -> JSONValue {
        storage?.finish() ?? .object(JSONObject())
    }

    func storeValue(_ v: JSONValue) {
        storage = .value(v)
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let object: _JSONEncObject
        if case .object(let existing) = storage {
            object = existing
        } else {
            object = _JSONEncObject()
            storage = .object(object)
        }
        return KeyedEncodingContainer(_JSONKeyedEncodingContainer<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let array: _JSONEncArray
        if case .array(let existing) = storage {
            array = existing
        } else {
            array = _JSONEncArray()
            storage = .array(array)
        }
        return _JSONUnkeyedEncodingContainer(array: array, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        _JSONSingleValueEncodingContainer(encoder: self)
    }
}

// MARK: - Keyed

/// The non-generic state of a keyed container (see `_JSONKeyedDecodingState`).
struct _JSONKeyedEncodingState {
    let object: _JSONEncObject
    let codingPath: [any CodingKey]
}

struct _JSONKeyedEncodingContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let state: _JSONKeyedEncodingState

    init(object: _JSONEncObject, codingPath: [any CodingKey]) {
        state = _JSONKeyedEncodingState(object: object, codingPath: codingPath)
    }

    var object: _JSONEncObject { state.object }
    var codingPath: [any CodingKey] { state.codingPath }

    func put(_ v: JSONValue, _ key: Key) { object.set(key.stringValue, .value(v)) }

    mutating func encodeNil(forKey key: Key) throws { put(.null, key) }
    mutating func encode(_ value: Bool, forKey key: Key) throws { put(.bool(value), key) }
    mutating func encode(_ value: String, forKey key: Key) throws { put(.string(value), key) }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        put(try _JSONEncoding.double(value, path: codingPath + [key]), key)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws {
        put(try _JSONEncoding.float(value, path: codingPath + [key]), key)
    }
    mutating func encode(_ value: Int, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { put(.number(String(value)), key) }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        object.set(key.stringValue, try _JSONEncoding.node(value, path: codingPath + [key]))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(
        keyedBy keyType: NestedKey.Type, forKey key: Key
    ) -> KeyedEncodingContainer<NestedKey> {
        let nested = _JSONEncObject()
        object.set(key.stringValue, .object(nested))
        return KeyedEncodingContainer(_JSONKeyedEncodingContainer<NestedKey>(object: nested, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = _JSONEncArray()
        object.set(key.stringValue, .array(nested))
        return _JSONUnkeyedEncodingContainer(array: nested, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder {
        let key = _JSONDynamicKey.super
        let e = _JSONValueEncoderImpl(codingPath: codingPath + [key])
        object.set(key.stringValue, .deferred(e))
        return e
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let e = _JSONValueEncoderImpl(codingPath: codingPath + [key])
        object.set(key.stringValue, .deferred(e))
        return e
    }
}

// MARK: - Primitives

/// What the unkeyed and single-value containers share: a primitive becomes one JSON value, put
/// where the container puts values (`primitivePath` names it in an error).
protocol _JSONPrimitiveSink {
    func put(_ v: JSONValue)
    var primitivePath: [any CodingKey] { get }
}

extension _JSONPrimitiveSink {
    mutating func encodeNil() throws { put(.null) }
    mutating func encode(_ value: Bool) throws { put(.bool(value)) }
    mutating func encode(_ value: String) throws { put(.string(value)) }
    mutating func encode(_ value: Double) throws { put(try _JSONEncoding.double(value, path: primitivePath)) }
    mutating func encode(_ value: Float) throws { put(try _JSONEncoding.float(value, path: primitivePath)) }
    mutating func encode(_ value: Int) throws { put(.number(String(value))) }
    mutating func encode(_ value: Int8) throws { put(.number(String(value))) }
    mutating func encode(_ value: Int16) throws { put(.number(String(value))) }
    mutating func encode(_ value: Int32) throws { put(.number(String(value))) }
    mutating func encode(_ value: Int64) throws { put(.number(String(value))) }
    mutating func encode(_ value: UInt) throws { put(.number(String(value))) }
    mutating func encode(_ value: UInt8) throws { put(.number(String(value))) }
    mutating func encode(_ value: UInt16) throws { put(.number(String(value))) }
    mutating func encode(_ value: UInt32) throws { put(.number(String(value))) }
    mutating func encode(_ value: UInt64) throws { put(.number(String(value))) }
}

// MARK: - Unkeyed

struct _JSONUnkeyedEncodingContainer: UnkeyedEncodingContainer, _JSONPrimitiveSink {
    let array: _JSONEncArray
    let codingPath: [any CodingKey]

    var count: Int { array.nodes.count }

    var nextPath: [any CodingKey] { codingPath + [_JSONDynamicKey(intValue: array.nodes.count)] }

    func put(_ v: JSONValue) { array.nodes.append(.value(v)) }
    var primitivePath: [any CodingKey] { nextPath }

    mutating func encode<T: Encodable>(_ value: T) throws {
        array.nodes.append(try _JSONEncoding.node(value, path: nextPath))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let path = nextPath
        let nested = _JSONEncObject()
        array.nodes.append(.object(nested))
        return KeyedEncodingContainer(_JSONKeyedEncodingContainer<NestedKey>(object: nested, codingPath: path))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let path = nextPath
        let nested = _JSONEncArray()
        array.nodes.append(.array(nested))
        return _JSONUnkeyedEncodingContainer(array: nested, codingPath: path)
    }

    mutating func superEncoder() -> any Encoder {
        let e = _JSONValueEncoderImpl(codingPath: nextPath)
        array.nodes.append(.deferred(e))
        return e
    }
}

// MARK: - Single value

struct _JSONSingleValueEncodingContainer: SingleValueEncodingContainer, _JSONPrimitiveSink {
    let encoder: _JSONValueEncoderImpl
    var codingPath: [any CodingKey] { encoder.codingPath }

    func put(_ v: JSONValue) { encoder.storage = .value(v) }
    var primitivePath: [any CodingKey] { codingPath }

    mutating func encode<T: Encodable>(_ value: T) throws {
        encoder.storage = try _JSONEncoding.node(value, path: codingPath)
    }
}
