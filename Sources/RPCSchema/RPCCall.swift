/// One callable method, described by its param type.
///
/// The param type names the method and its result, so a typed client call
/// `try await client.call(GetUser(userId: "u1"))` returns a `User` (JSONRPCKit's `Request`,
/// isowords' routes). Adding a method to an entity is one such type here and its handler on the
/// server side (`MethodTable.on`); the client needs no code for it (README, "Adding a method").
public protocol RPCCall: Codable, Sendable {
    /// What the success counter-request carries as its param.
    associatedtype Reply: Codable & Sendable
    /// What a typed client call returns (usually the reply itself).
    associatedtype Output: Sendable = Reply

    static var method: RPCMethod { get }
    /// Whether the call changes state (and so is journaled). Reads are never journaled.
    static var isMutation: Bool { get }
    static func output(from reply: Reply) -> Output
    /// The call read straight from its param object, without `Codable`: when the object has the
    /// call's fields with exactly their types, and no other key. Nil otherwise (the default): the
    /// daemon then decodes with `Codable`, which also says what is wrong. A server-side speed-up
    /// only; it never changes what decodes.
    static func decode(fastParams object: JSONObject) -> Self?
}

extension RPCCall {
    public static var isMutation: Bool { false }
    public static func decode(fastParams object: JSONObject) -> Self? { nil }
}

extension RPCCall where Output == Reply {
    public static func output(from reply: Reply) -> Output { reply }
}

/// A list method: records sorted by id, at most `limit` of them, with ids after `after`. Its reply
/// is a page whose `next` says where the following page starts, so a client can walk every page
/// (`client.pages(ListUsers(limit: 100))`) without knowing the entity.
public protocol RPCListCall: RPCCall where Reply: RPCPage {
    /// List records with ids after this one (nil: from the first).
    var after: String? { get set }
}

/// One page of a list: `next` is the last id returned when more remain; nil on the last page.
public protocol RPCPage: Sendable {
    var next: String? { get }
}

/// The description of one param field, derived from the param type's `Decodable` conformance.
public struct RPCField: Hashable, Sendable, Codable {
    public var name: String
    /// `string`, `integer`, `number`, `boolean`, `[string]`, `object` …
    public var type: String
    public var optional: Bool

    public init(name: String, type: String, optional: Bool) {
        self.name = name
        self.type = type
        self.optional = optional
    }
}

extension RPCCall {
    /// The param's fields in declaration order, read off the synthesized `init(from:)`.
    public static var fields: [RPCField] { FieldRecorder.fields(of: Self.self) }
}
