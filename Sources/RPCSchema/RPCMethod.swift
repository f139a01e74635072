/// A method name on the wire: `entity.method`, e.g. `user.getUser`.
public struct RPCMethod: Hashable, Sendable, CustomStringConvertible, Codable {
    public var entity: String
    public var name: String

    public init(_ entity: String, _ name: String) {
        self.entity = entity
        self.name = name
    }

    /// Parses the canonical form `entity.method`; nil unless there is exactly one dot with a name on both sides.
    public init?(parsing text: String) {
        // One pass over the UTF-8 bytes (this runs for every request).
        let utf8 = text.utf8
        guard let dot = utf8.firstIndex(of: UInt8(ascii: ".")), dot != utf8.startIndex,
            utf8.index(after: dot) != utf8.endIndex,
            !utf8[utf8.index(after: dot)...].contains(UInt8(ascii: "."))
        else { return nil }
        // Sliced on the UTF-8 view: a String index after the dot would step over a whole
        // Character, dropping a combining mark that follows the dot.
        self.init(String(Substring(utf8[..<dot])), String(Substring(utf8[utf8.index(after: dot)...])))
    }

    /// The error entity's one method: every failed request is answered with it.
    public static let error = RPCMethod("error", "error")

    /// A counter-request (`…Result` or `error.error`) is never answered.
    public var isCounterRequest: Bool { name.hasSuffix("Result") || self == .error }

    /// The paired method a success is sent back to: `user.getUser` -> `user.getUserResult`.
    public var result: RPCMethod { RPCMethod(entity, name + "Result") }

    public var description: String { "\(entity).\(name)" }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let method = RPCMethod(parsing: text) else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "expected entity.method, found \"\(text)\""))
        }
        self = method
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
