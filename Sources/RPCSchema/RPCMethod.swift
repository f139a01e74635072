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

    /// The method whose canonical text (`entity.method`) is `bytes`, when it is one of this
    /// schema's calls or their results, or `error.error`: taken from a table, no string made
    /// (parsing the text made three, ~700 instructions a request). Nil for any other text.
    package static func known(_ bytes: UnsafeRawBufferPointer) -> RPCMethod? {
        KnownMethods.shared.find(bytes)
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

/// This schema's methods by their canonical text, grouped by its length.
struct KnownMethods: Sendable {
    private let methods: [RPCMethod]
    /// Every method's text, one after another, in order of length.
    private let texts: [UInt8]
    /// Per method, in the same order: where its text starts in `texts`, and its index in `methods`.
    private let entries: [(start: Int, method: Int)]
    /// `entries[first[n]..<first[n + 1]]` are the methods whose text is `n` bytes long.
    private let first: [Int]

    static let shared = KnownMethods([
        CreateUser.method, UpdateUser.method, DeleteUser.method, GetUser.method, ListUsers.method,
        AddBuilding.method, UpdateBuilding.method, DeleteBuilding.method, GetBuilding.method, ListBuildings.method,
        SystemPing.method, SystemDescribe.method, SystemStats.method, SystemAuth.method,
        ReplicationSubscribe.method, SnapshotBegin.method, SnapshotEnd.method, SnapshotKey.method,
    ])

    init(_ calls: [RPCMethod]) {
        let methods = calls + calls.map(\.result) + [.error]
        let order = methods.indices.sorted { methods[$0].description.utf8.count < methods[$1].description.utf8.count }
        var texts: [UInt8] = []
        var entries: [(start: Int, method: Int)] = []
        let longest = methods.map(\.description.utf8.count).max() ?? 0
        var first = Array(repeating: 0, count: longest + 2)
        for index in order {
            entries.append((texts.count, index))
            texts += methods[index].description.utf8
        }
        for length in 0...(longest + 1) {
            first[length] = order.firstIndex { methods[$0].description.utf8.count >= length } ?? order.count
        }
        self.methods = methods
        self.texts = texts
        self.entries = entries
        self.first = first
    }

    func find(_ bytes: UnsafeRawBufferPointer) -> RPCMethod? {
        let n = bytes.count
        guard n + 1 < first.count, let wanted = bytes.baseAddress else { return nil }
        return texts.withUnsafeBufferPointer { texts -> RPCMethod? in
            for k in first[n]..<first[n + 1] {
                let candidate = UnsafeBufferPointer(rebasing: texts[entries[k].start..<(entries[k].start + n)])
                if ExactUTF8.compare(candidate, UnsafeBufferPointer(start: wanted.assumingMemoryBound(to: UInt8.self), count: n)) == 0 {
                    return methods[entries[k].method]
                }
            }
            return nil
        }
    }
}
