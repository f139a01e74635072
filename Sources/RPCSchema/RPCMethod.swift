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
        // One pass over the contiguous UTF-8 bytes (this runs for every request; slicing the
        // `utf8` view into Substrings cost ~1,500 instructions). Splitting at an ASCII dot keeps
        // both sides valid UTF-8, so decoding them is exact.
        var text = text
        let parts = text.withUTF8 { bytes -> (String, String)? in
            guard let dot = bytes.firstIndex(of: UInt8(ascii: ".")), dot > 0, dot + 1 < bytes.count,
                !bytes[(dot + 1)...].contains(UInt8(ascii: "."))
            else { return nil }
            // A String's bytes are valid UTF-8, so both halves are: taken without a second check
            // (told whether they are ASCII, which lets comparing and hashing them skip normalizing).
            let ascii = !bytes.contains { $0 >= 0x80 }
            return (
                _JSONParserState.validatedString(UnsafeBufferPointer(rebasing: bytes[..<dot]), ascii: ascii),
                _JSONParserState.validatedString(UnsafeBufferPointer(rebasing: bytes[(dot + 1)...]), ascii: ascii))
        }
        guard let (entity, name) = parts else { return nil }
        self.init(entity, name)
    }

    /// The error entity's one method: every failed request is answered with it.
    public static let error = RPCMethod("error", "error")

    /// A counter-request (`…Result` or `error.error`) is never answered.
    public var isCounterRequest: Bool {
        // By bytes (asked of every line): `hasSuffix` and `==` compare Unicode text, ~190
        // instructions a line. The same answer for every name whose last grapheme is not
        // split by a combining mark or a prepended character around "Result".
        let answer = name.utf8.withContiguousStorageIfAvailable { name -> Bool in
            let n = name.count
            if n >= 6, name[n - 6] == 0x52, name[n - 5] == 0x65, name[n - 4] == 0x73, name[n - 3] == 0x75,
                name[n - 2] == 0x6C, name[n - 1] == 0x74
            {
                return true  // …Result
            }
            return Self.isError(name) && (entity.utf8.withContiguousStorageIfAvailable(Self.isError) ?? (entity == "error"))
        }
        return answer ?? (name.hasSuffix("Result") || self == .error)
    }

    /// The bytes of "error".
    private static func isError(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        bytes.count == 5 && bytes[0] == 0x65 && bytes[1] == 0x72 && bytes[2] == 0x72 && bytes[3] == 0x6F && bytes[4] == 0x72
    }

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
