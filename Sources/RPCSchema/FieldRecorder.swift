/// Reads the fields of a `Decodable` struct by running its `init(from:)` against a decoder that
/// records every key asked for and answers with an empty value of the asked type.
///
/// This is how `system.describe` and unknown-field checks stay generated from the schema types
/// instead of a hand-kept list. Works for flat structs whose fields are strings, numbers, booleans
/// and arrays of those, which is what every param here is.
enum FieldRecorder {
    static func fields<T: Decodable>(of type: T.Type) -> [RPCField] {
        let log = Log()
        _ = try? T(from: RecordingDecoder(log: log, depth: 0))
        return log.fields
    }

    final class Log {
        var fields: [RPCField] = []
        /// Keys checked for null first: the standard `decodeIfPresent` overloads do that, so they are optional.
        var nilChecked: Set<String> = []
        func record(_ key: CodingKey, _ type: Any.Type, optional: Bool) {
            guard !fields.contains(where: { $0.name == key.stringValue }) else { return }
            let optional = optional || nilChecked.contains(key.stringValue)
            fields.append(RPCField(name: key.stringValue, type: FieldRecorder.name(of: type), optional: optional))
        }
    }

    static func name(of type: Any.Type) -> String {
        switch type {
        case is String.Type: return "string"
        case is Bool.Type: return "boolean"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt.Type, is UInt64.Type: return "integer"
        case is Double.Type, is Float.Type: return "number"
        case is [String].Type: return "[string]"
        case is [Int].Type: return "[integer]"
        default: return "object"
        }
    }

    struct RecordingDecoder: Decoder {
        let log: Log
        let depth: Int
        var codingPath: [any CodingKey] = []
        var userInfo: [CodingUserInfoKey: Any] = [:]

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            KeyedDecodingContainer(Keyed<Key>(log: log, depth: depth))
        }
        func unkeyedContainer() throws -> any UnkeyedDecodingContainer { Empty() }
        func singleValueContainer() throws -> any SingleValueDecodingContainer { Single() }
    }

    /// Answers nested values with empty ones; records only the top level.
    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let log: Log
        let depth: Int
        var codingPath: [any CodingKey] { [] }
        var allKeys: [Key] { [] }
        func contains(_ key: Key) -> Bool { true }

        func decodeNil(forKey key: Key) throws -> Bool {
            if depth == 0 { log.nilChecked.insert(key.stringValue) }
            return false
        }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            if depth == 0 { log.record(key, type, optional: false) }
            return try T(from: RecordingDecoder(log: log, depth: depth + 1))
        }
        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            if depth == 0 { log.record(key, type, optional: true) }
            return nil
        }
        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            KeyedDecodingContainer(Keyed<NestedKey>(log: log, depth: depth + 1))
        }
        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { Empty() }
        func superDecoder() throws -> any Decoder { RecordingDecoder(log: log, depth: depth + 1) }
        func superDecoder(forKey key: Key) throws -> any Decoder { RecordingDecoder(log: log, depth: depth + 1) }
    }

    struct Empty: UnkeyedDecodingContainer {
        var codingPath: [any CodingKey] { [] }
        var count: Int? { 0 }
        var isAtEnd: Bool { true }
        var currentIndex: Int { 0 }
        mutating func decodeNil() throws -> Bool { false }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            throw DecodingError.valueNotFound(type, .init(codingPath: [], debugDescription: "empty"))
        }
        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            throw DecodingError.valueNotFound(KeyedDecodingContainer<NestedKey>.self, .init(codingPath: [], debugDescription: "empty"))
        }
        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { self }
        mutating func superDecoder() throws -> any Decoder {
            throw DecodingError.valueNotFound(Decoder.self, .init(codingPath: [], debugDescription: "empty"))
        }
    }

    struct Single: SingleValueDecodingContainer {
        var codingPath: [any CodingKey] { [] }
        func decodeNil() -> Bool { false }
        func decode(_ type: Bool.Type) throws -> Bool { false }
        func decode(_ type: String.Type) throws -> String { "" }
        func decode(_ type: Double.Type) throws -> Double { 0 }
        func decode(_ type: Float.Type) throws -> Float { 0 }
        func decode(_ type: Int.Type) throws -> Int { 0 }
        func decode(_ type: Int8.Type) throws -> Int8 { 0 }
        func decode(_ type: Int16.Type) throws -> Int16 { 0 }
        func decode(_ type: Int32.Type) throws -> Int32 { 0 }
        func decode(_ type: Int64.Type) throws -> Int64 { 0 }
        func decode(_ type: UInt.Type) throws -> UInt { 0 }
        func decode(_ type: UInt8.Type) throws -> UInt8 { 0 }
        func decode(_ type: UInt16.Type) throws -> UInt16 { 0 }
        func decode(_ type: UInt32.Type) throws -> UInt32 { 0 }
        func decode(_ type: UInt64.Type) throws -> UInt64 { 0 }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { throw DecodingError.valueNotFound(type, .init(codingPath: [], debugDescription: "empty")) }
    }
}
