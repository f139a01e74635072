/// `RPCCall.decode(fastParams:)` for the calls of the user and building entities: every request
/// and every replayed journal line decodes a param, and `Codable` costs several thousand
/// instructions for three strings. Anything but the plain shape (a missing field, a key the call
/// does not have, a number where a string goes, a limit that is not plain digits) returns nil and
/// goes through `Codable`, which decides and words the error.

/// Reads a param object's fields by type, counting the keys it used, so that a decoder can tell
/// the object has no other keys (the parser keeps no duplicate keys).
struct FastFields {
    let object: JSONObject
    private var used = 0

    init(_ object: JSONObject) { self.object = object }

    /// True when every key of the object was read.
    var complete: Bool { used == object.count }

    /// The string at `key` when it is the object's only key (gets and deletes).
    static func only(_ key: String, in object: JSONObject) -> String? {
        var fields = FastFields(object)
        guard let value = fields.string(key), fields.complete else { return nil }
        return value
    }

    /// A list call's `after` and `limit`, when they are the object's only keys.
    static func page(in object: JSONObject) -> (after: String?, limit: Int?)? {
        var fields = FastFields(object)
        guard let after = fields.optionalString("after"), let limit = fields.optionalInt("limit"), fields.complete else { return nil }
        return (after, limit)
    }

    /// The string at `key`; nil when absent or not a string.
    mutating func string(_ key: String) -> String? {
        guard case .string(let text)? = object[key] else { return nil }
        used += 1
        return text
    }

    /// `.some(nil)` when `key` is absent or null, `.some(text)` for a string, nil for anything else.
    mutating func optionalString(_ key: String) -> String?? {
        switch object[key] {
        case nil: return .some(nil)
        case .null?: used += 1; return .some(nil)
        case .string(let text)?: used += 1; return .some(text)
        default: return nil
        }
    }

    /// Like `optionalString`, for an array of strings.
    mutating func optionalStrings(_ key: String) -> [String]?? {
        switch object[key] {
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
        switch object[key] {
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

extension CreateUser {
    public static func decode(fastParams object: JSONObject) -> CreateUser? {
        var fields = FastFields(object)
        guard let id = fields.string("id"), let name = fields.string("name"), let email = fields.string("email"), fields.complete
        else { return nil }
        return CreateUser(id: id, name: name, email: email)
    }
}

extension UpdateUser {
    public static func decode(fastParams object: JSONObject) -> UpdateUser? {
        var fields = FastFields(object)
        guard let userId = fields.string("userId"), let newName = fields.optionalString("newName"),
            let newEmail = fields.optionalString("newEmail"), fields.complete
        else { return nil }
        return UpdateUser(userId: userId, newName: newName, newEmail: newEmail)
    }
}

extension DeleteUser {
    public static func decode(fastParams object: JSONObject) -> DeleteUser? {
        FastFields.only("userId", in: object).map { DeleteUser(userId: $0) }
    }
}

extension GetUser {
    public static func decode(fastParams object: JSONObject) -> GetUser? {
        FastFields.only("userId", in: object).map { GetUser(userId: $0) }
    }
}

extension ListUsers {
    public static func decode(fastParams object: JSONObject) -> ListUsers? {
        FastFields.page(in: object).map { ListUsers(after: $0.after, limit: $0.limit) }
    }
}

extension AddBuilding {
    public static func decode(fastParams object: JSONObject) -> AddBuilding? {
        var fields = FastFields(object)
        guard let id = fields.string("id"), let name = fields.string("name"), let address = fields.string("address"),
            let residents = fields.optionalStrings("residents"), let residents, fields.complete
        else { return nil }
        return AddBuilding(id: id, name: name, address: address, residents: residents)
    }
}

extension UpdateBuilding {
    public static func decode(fastParams object: JSONObject) -> UpdateBuilding? {
        var fields = FastFields(object)
        guard let buildingId = fields.string("buildingId"), let newName = fields.optionalString("newName"),
            let newAddress = fields.optionalString("newAddress"), let newResidents = fields.optionalStrings("newResidents"),
            fields.complete
        else { return nil }
        return UpdateBuilding(buildingId: buildingId, newName: newName, newAddress: newAddress, newResidents: newResidents)
    }
}

extension DeleteBuilding {
    public static func decode(fastParams object: JSONObject) -> DeleteBuilding? {
        FastFields.only("buildingId", in: object).map { DeleteBuilding(buildingId: $0) }
    }
}

extension GetBuilding {
    public static func decode(fastParams object: JSONObject) -> GetBuilding? {
        FastFields.only("buildingId", in: object).map { GetBuilding(buildingId: $0) }
    }
}

extension ListBuildings {
    public static func decode(fastParams object: JSONObject) -> ListBuildings? {
        FastFields.page(in: object).map { ListBuildings(after: $0.after, limit: $0.limit) }
    }
}
