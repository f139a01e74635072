/// `RPCCall.decode(fastParams:)` for the calls of the user and building entities: every request
/// and every replayed journal line decodes a param, and `Codable` costs several thousand
/// instructions for three strings. Anything but the plain shape (a missing field, a key the call
/// does not have, a number where a string goes, a limit that is not plain digits) returns nil and
/// goes through `Codable`, which decides and words the error.

/// A request's param object of plain strings, as it lies in the request line (`EnvelopeScanner.plainObject`):
/// `{}` or `{"k":"v",…}`, keys and values printable ASCII without a quote or a backslash, no
/// whitespace, no repeated key. Decoding a call from it makes no `JSONValue` (for a get, that
/// tree's array and its release were a fifth of the request path). A view: valid while the line is.
package struct PlainObject {
    package let bytes: UnsafeRawBufferPointer
    /// Its number of pairs.
    package let count: Int
    /// Larger objects are parsed as usual.
    package static let maxPairs = 8

    init(_ bytes: UnsafeRawBufferPointer, count: Int) {
        self.bytes = bytes
        self.count = count
    }

    /// The object as a JSON value (what the full parse makes of the same bytes).
    package var value: JSONValue {
        // Checked by the scanner: it parses.
        (try? JSONParser.parse(bytes)) ?? .object(JSONObject())
    }
}

/// A call that decodes from a `FastFields` of either source (a parsed object or a `PlainObject`);
/// `MethodTable` decodes such calls from a plain param without parsing it.
package protocol FastDecodable: RPCCall {
    static func decode(fields: inout FastFields) -> Self?
}

extension FastDecodable {
    public static func decode(fastParams object: JSONObject) -> Self? {
        var fields = FastFields(object)
        return decode(fields: &fields)
    }

    /// The call from a plain param, nil when it is not exactly the call's fields.
    package static func decode(plain: PlainObject) -> Self? {
        var fields = FastFields(plain)
        return decode(fields: &fields)
    }
}

/// Reads a param object's fields by type, counting the keys it used, so that a decoder can tell
/// the object has no other keys (the parser keeps no duplicate keys, nor does a plain object).
package struct FastFields {
    private enum Source {
        case parsed(JSONObject)
        case plain(PlainObject)
    }
    private let source: Source
    private var used = 0

    init(_ object: JSONObject) { source = .parsed(object) }
    init(_ object: PlainObject) { source = .plain(object) }

    /// True when every key of the object was read.
    var complete: Bool {
        switch source {
        case .parsed(let object): used == object.count
        case .plain(let object): used == object.count
        }
    }

    private subscript(key: String) -> JSONValue? {
        switch source {
        case .parsed(let object): object[key]
        case .plain(let object): object.string(key).map { .string($0) }
        }
    }

    /// The string at `key` when it is the object's only key (gets and deletes).
    mutating func only(_ key: String) -> String? {
        guard let value = string(key), complete else { return nil }
        return value
    }

    /// A list call's `after` and `limit`, when they are the object's only keys.
    mutating func page() -> (after: String?, limit: Int?)? {
        guard let after = optionalString("after"), let limit = optionalInt("limit"), complete else { return nil }
        return (after, limit)
    }

    /// The string at `key`; nil when absent or not a string.
    mutating func string(_ key: String) -> String? {
        let text: String
        switch source {
        case .plain(let object):
            // The plain object's string as it is: wrapping it in a `JSONValue` and taking it out
            // again copied it twice (~100 instructions a get).
            guard let plain = object.string(key) else { return nil }
            text = plain
        case .parsed(let object):
            guard case .string(let parsed)? = object[key] else { return nil }
            text = parsed
        }
        used += 1
        return text
    }

    /// `.some(nil)` when `key` is absent or null, `.some(text)` for a string, nil for anything else.
    mutating func optionalString(_ key: String) -> String?? {
        switch self[key] {
        case nil: return .some(nil)
        case .null?: used += 1; return .some(nil)
        case .string(let text)?: used += 1; return .some(text)
        default: return nil
        }
    }

    /// Like `optionalString`, for an array of strings.
    mutating func optionalStrings(_ key: String) -> [String]?? {
        switch self[key] {
        case nil: return .some(nil)
        case .null?: used += 1; return .some(nil)
        case .array(let items)?:
            var strings: [String] = []
            strings.reserveCapacity(items.count)
            for item in items {
                guard case .string(let text) = item else { return nil }
                strings.append(text)
            }
            used += 1
            return .some(strings)
        default: return nil
        }
    }

    /// Like `optionalString`, for an integer written as plain decimal digits.
    mutating func optionalInt(_ key: String) -> Int?? {
        switch self[key] {
        case nil: return .some(nil)
        case .null?: used += 1; return .some(nil)
        case .number(let text)?:
            guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = Int(text) else { return nil }
            used += 1
            return .some(value)
        default: return nil
        }
    }
}

extension CreateUser: FastDecodable {
    package static func decode(fields: inout FastFields) -> CreateUser? {
        guard let id = fields.string("id"), let name = fields.string("name"), let email = fields.string("email"), fields.complete
        else { return nil }
        return CreateUser(id: id, name: name, email: email)
    }
}

extension UpdateUser: FastDecodable {
    package static func decode(fields: inout FastFields) -> UpdateUser? {
        guard let userId = fields.string("userId"), let newName = fields.optionalString("newName"),
            let newEmail = fields.optionalString("newEmail"), fields.complete
        else { return nil }
        return UpdateUser(userId: userId, newName: newName, newEmail: newEmail)
    }
}

extension DeleteUser: FastDecodable {
    package static func decode(fields: inout FastFields) -> DeleteUser? {
        fields.only("userId").map { DeleteUser(userId: $0) }
    }
}

extension GetUser: FastDecodable {
    package static func decode(fields: inout FastFields) -> GetUser? {
        fields.only("userId").map { GetUser(userId: $0) }
    }
}

extension ListUsers: FastDecodable {
    package static func decode(fields: inout FastFields) -> ListUsers? {
        fields.page().map { ListUsers(after: $0.after, limit: $0.limit) }
    }
}

extension AddBuilding: FastDecodable {
    package static func decode(fields: inout FastFields) -> AddBuilding? {
        guard let id = fields.string("id"), let name = fields.string("name"), let address = fields.string("address"),
            let residents = fields.optionalStrings("residents"), let residents, fields.complete
        else { return nil }
        return AddBuilding(id: id, name: name, address: address, residents: residents)
    }
}

extension UpdateBuilding: FastDecodable {
    package static func decode(fields: inout FastFields) -> UpdateBuilding? {
        guard let buildingId = fields.string("buildingId"), let newName = fields.optionalString("newName"),
            let newAddress = fields.optionalString("newAddress"), let newResidents = fields.optionalStrings("newResidents"),
            fields.complete
        else { return nil }
        return UpdateBuilding(buildingId: buildingId, newName: newName, newAddress: newAddress, newResidents: newResidents)
    }
}

extension DeleteBuilding: FastDecodable {
    package static func decode(fields: inout FastFields) -> DeleteBuilding? {
        fields.only("buildingId").map { DeleteBuilding(buildingId: $0) }
    }
}

extension GetBuilding: FastDecodable {
    package static func decode(fields: inout FastFields) -> GetBuilding? {
        fields.only("buildingId").map { GetBuilding(buildingId: $0) }
    }
}

extension ListBuildings: FastDecodable {
    package static func decode(fields: inout FastFields) -> ListBuildings? {
        fields.page().map { ListBuildings(after: $0.after, limit: $0.limit) }
    }
}
