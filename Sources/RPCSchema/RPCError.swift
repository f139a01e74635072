/// An error code carried by an `error.error` counter-request.
///
/// Open rather than a closed enum (sourcekit-lsp `ErrorCode`): a peer may send a code this build
/// does not know, and new codes can be added without breaking clients that switch over them.
public struct RPCErrorCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    /// The line is not valid JSON (or not valid UTF-8).
    public static let parseError = RPCErrorCode("parseError")
    /// The line is JSON but not a request: not an object, no string id, no method.
    public static let invalidRequest = RPCErrorCode("invalidRequest")
    /// The entity or the method does not exist.
    public static let methodNotFound = RPCErrorCode("methodNotFound")
    /// The param does not fit the method, or breaks a rule of the entity.
    public static let invalidParams = RPCErrorCode("invalidParams")
    /// The record named by the param does not exist.
    public static let notFound = RPCErrorCode("notFound")
    /// A record with that id exists already.
    public static let conflict = RPCErrorCode("conflict")
    /// The line is longer than the daemon's frame limit.
    public static let frameTooLarge = RPCErrorCode("frameTooLarge")
    /// The daemon refuses work it cannot take now (too many connections).
    public static let overloaded = RPCErrorCode("overloaded")
    /// The connection has not authenticated (`system.auth`) and the method needs it.
    public static let unauthorized = RPCErrorCode("unauthorized")
    /// The connection's role does not allow the method.
    public static let forbidden = RPCErrorCode("forbidden")
    /// An idempotency key came back with another method or param than the first time.
    public static let keyReused = RPCErrorCode("keyReused")
    /// One reply would pass the connection's output cap (`max_output_bytes`); ask for less (page lists).
    public static let replyTooLarge = RPCErrorCode("replyTooLarge")
    /// A change feed from a sequence number older than the leader's journal, without `snapshot: true`.
    public static let snapshotRequired = RPCErrorCode("snapshotRequired")
    /// A mutation sent to a follower: it serves reads only; the message names its leader.
    public static let readOnly = RPCErrorCode("readOnly")
    /// Fewer followers in sync than `min_sync_replicas`: the mutation was refused before it ran (retry later).
    public static let notEnoughReplicas = RPCErrorCode("notEnoughReplicas")
    /// The mutation ran here, but not enough followers confirmed it within `sync_timeout`; a retry
    /// with the same idempotency key waits for the confirmation and never applies it twice.
    public static let replicationTimeout = RPCErrorCode("replicationTimeout")
    /// The daemon failed; the message says why.
    public static let `internal` = RPCErrorCode("internal")

    public static let all: [RPCErrorCode] = [
        .parseError, .invalidRequest, .methodNotFound, .invalidParams, .notFound, .conflict,
        .frameTooLarge, .overloaded, .replyTooLarge, .unauthorized, .forbidden, .keyReused, .snapshotRequired, .readOnly,
        .notEnoughReplicas, .replicationTimeout, .internal,
    ]

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// The param of an `error.error` counter-request: `{"errorMessage": "...", "code": "..."}`.
public struct RPCError: Error, Hashable, Sendable, Codable, CustomStringConvertible {
    public var errorMessage: String
    public var code: RPCErrorCode

    public init(_ code: RPCErrorCode, _ errorMessage: String) {
        self.code = code
        self.errorMessage = errorMessage
    }

    public var description: String { "\(code): \(errorMessage)" }

    public static func parseError(_ message: String) -> RPCError { RPCError(.parseError, message) }
    public static func invalidRequest(_ message: String) -> RPCError { RPCError(.invalidRequest, message) }
    public static func methodNotFound(_ message: String) -> RPCError { RPCError(.methodNotFound, message) }
    public static func invalidParams(_ message: String) -> RPCError { RPCError(.invalidParams, message) }
    public static func notFound(_ message: String) -> RPCError { RPCError(.notFound, message) }
    public static func conflict(_ message: String) -> RPCError { RPCError(.conflict, message) }
    public static func frameTooLarge(_ message: String) -> RPCError { RPCError(.frameTooLarge, message) }
    public static func overloaded(_ message: String) -> RPCError { RPCError(.overloaded, message) }
    public static func replyTooLarge(_ message: String) -> RPCError { RPCError(.replyTooLarge, message) }
    public static func unauthorized(_ message: String) -> RPCError { RPCError(.unauthorized, message) }
    public static func forbidden(_ message: String) -> RPCError { RPCError(.forbidden, message) }
    public static func keyReused(_ message: String) -> RPCError { RPCError(.keyReused, message) }
    public static func snapshotRequired(_ message: String) -> RPCError { RPCError(.snapshotRequired, message) }
    public static func readOnly(_ message: String) -> RPCError { RPCError(.readOnly, message) }
    public static func notEnoughReplicas(_ message: String) -> RPCError { RPCError(.notEnoughReplicas, message) }
    public static func replicationTimeout(_ message: String) -> RPCError { RPCError(.replicationTimeout, message) }
    public static func `internal`(_ message: String) -> RPCError { RPCError(.internal, message) }
}
