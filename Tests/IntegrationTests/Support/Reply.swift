import Foundation
import Testing

/// A reply line parsed with JSONSerialization, in either wire form.
struct Reply {
    let line: String
    let object: [String: Any]

    init(_ line: String) throws {
        self.line = line
        guard let data = line.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) as? [String: Any]
        else { throw HarnessError("reply is not a JSON object: \(line.prefix(300))") }
        self.object = object
    }

    var id: String? { object["id"] as? String }

    /// The method as written on the wire in canonical form (`"user.getUserResult"`), or rebuilt from
    /// the seed form (`{"user":{"_0":"getUserResult"}}` -> `"user.getUserResult"`).
    var method: String? {
        if let string = object["method"] as? String { return string }
        if let seed = object["method"] as? [String: Any], seed.count == 1, let (entity, value) = seed.first,
            let inner = value as? [String: Any], let name = inner["_0"] as? String
        {
            return "\(entity).\(name)"
        }
        return nil
    }

    var isSeedForm: Bool { object["method"] is [String: Any] }

    /// The result/error payload: `param` in canonical form, `param.<entity>.<method>` in seed form.
    var param: [String: Any]? {
        if !isSeedForm { return object["param"] as? [String: Any] }
        guard let method, let dot = method.firstIndex(of: ".") else { return nil }
        let entity = String(method[..<dot])
        let name = String(method[method.index(after: dot)...])
        return ((object["param"] as? [String: Any])?[entity] as? [String: Any])?[name] as? [String: Any]
    }

    var isError: Bool { method == "error.error" }
    var errorCode: String? { isError ? param?["code"] as? String : nil }
    var errorMessage: String? { isError ? param?["errorMessage"] as? String : nil }

    /// The ids of `param.users` / `param.buildings`.
    func listIDs(_ key: String) -> [String]? {
        (param?[key] as? [[String: Any]])?.compactMap { $0["id"] as? String }
    }

    var next: String? { param?["next"] as? String }
    var hasNext: Bool { param?["next"] != nil }
}

/// Checks that `line` is an `error.error` counter-request with `code` (and `id`, when given), a
/// non-empty one-line message, and the canonical key order `id, method, param`.
@discardableResult
func expectError(
    _ line: String?, code: String, id: String? = nil, seedForm: Bool = false,
    sourceLocation: SourceLocation = #_sourceLocation
) -> Reply? {
    guard let line else {
        Issue.record("expected error \(code), got EOF", sourceLocation: sourceLocation)
        return nil
    }
    guard let reply = try? Reply(line) else {
        Issue.record("expected error \(code), got non-JSON: \(line.prefix(300))", sourceLocation: sourceLocation)
        return nil
    }
    #expect(reply.isError, "expected error.error, got: \(line.prefix(300))", sourceLocation: sourceLocation)
    #expect(reply.errorCode == code, "expected code \(code), got: \(line.prefix(300))", sourceLocation: sourceLocation)
    if let id {
        #expect(reply.id == id, "expected id \(id.debugDescription), got: \(line.prefix(300))", sourceLocation: sourceLocation)
    }
    let message = reply.errorMessage ?? ""
    #expect(!message.isEmpty && !message.contains("\n") && !message.contains("\r"),
        "errorMessage must be one non-empty line: \(line.prefix(300))", sourceLocation: sourceLocation)
    #expect(reply.isSeedForm == seedForm, "wrong wire form: \(line.prefix(300))", sourceLocation: sourceLocation)
    if !seedForm, let id = reply.id {
        let prefix = #"{"id":"# + jsonString(id) + #","method":"error.error","param":{"#
        #expect(line.hasPrefix(prefix), "keys must be in order id, method, param: \(line.prefix(300))",
            sourceLocation: sourceLocation)
    }
    return reply
}

/// A JSON string literal for `s` (quotes included), escaped the way every encoder agrees on for
/// plain ASCII ids.
func jsonString(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
        switch scalar {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        default:
            if scalar.value < 0x20 {
                out += String(format: "\\u%04x", scalar.value)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out + "\""
}
