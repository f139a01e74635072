import RPCSchema

/// One change from a change feed: a mutation as the leader journaled it, or a marker of a
/// snapshot. What `RPCClient.changes(from:snapshot:bufferLimit:)` yields, inside an `RPCChangeEvent`.
///
/// Open, like `RPCErrorCode`: it names no entity. Read a change as the call that made it with
/// `as(_:)` (`change.as(CreateUser.self)`); an entity added to the daemon needs no edit here, only
/// its own call types on the client's side.
public struct RPCChange: Sendable, Equatable, CustomStringConvertible {
    /// The method of the call that made the change (or of the marker).
    public let method: RPCMethod
    /// Its param as the feed carried it.
    public let param: JSONValue

    public init(method: RPCMethod, param: JSONValue) {
        self.method = method
        self.param = param
    }

    /// The change `call` makes, as a feed would carry it (for comparisons and test doubles).
    public init<C: RPCCall>(_ call: C) {
        method = C.method
        // An RPCCall is a plain Codable struct: encoding it to a JSON value cannot fail.
        param = (try? JSONValueEncoder().encode(call)) ?? .null
    }

    /// A feed's request as a change.
    init(_ request: Request) {
        self.init(method: request.method, param: request.param ?? .object(JSONObject()))
    }

    /// The change as the call `C`: nil when it was made by another method, or its param does not
    /// decode as `C` (a newer daemon's field).
    public func `as`<C: RPCCall>(_ type: C.Type) -> C? { decoded(C.self, C.method) }

    /// `replication.snapshotBegin`: a snapshot follows; forget your state, the next `records`
    /// changes (each with `isSnapshotRecord`) rebuild it as of `sequence`.
    public var snapshotBegin: SnapshotBegin? { decoded(SnapshotBegin.self, SnapshotBegin.method) }
    /// `replication.snapshotEnd`: the snapshot's last record came; from here on, changes after `sequence`.
    public var snapshotEnd: SnapshotEnd? { decoded(SnapshotEnd.self, SnapshotEnd.method) }
    /// Among a snapshot's records: the remembered outcome of a keyed mutation (what the leader
    /// answers a retry with that key). A mirror that answers retries keeps it; others skip it.
    public var snapshotKey: SnapshotKey? { decoded(SnapshotKey.self, SnapshotKey.method) }

    private func decoded<T: Decodable>(_ type: T.Type, _ wanted: RPCMethod) -> T? {
        method == wanted ? try? JSONValueDecoder().decode(T.self, from: param) : nil
    }

    /// Equal when made by the same method with the same param, whatever the order of its fields.
    public static func == (lhs: RPCChange, rhs: RPCChange) -> Bool {
        lhs.method == rhs.method && lhs.param.canonical == rhs.param.canonical
    }

    public var description: String {
        var bytes: [UInt8] = []
        JSONWriter.write(param, into: &bytes)
        return "\(method) \(String(decoding: bytes, as: UTF8.self))"
    }
}

/// One element of a change feed: a change and where it stands in the leader's journal.
public struct RPCChangeEvent: Sendable, Equatable {
    /// The leader's sequence number of the change (its journal line's `"seq"`, its id `"r<seq>"`).
    /// A snapshot's markers and records carry the snapshot's sequence: a mirror that saves its
    /// position should save it only at `.snapshotEnd` and after each later change, since an
    /// interrupted snapshot must start again.
    public var sequence: Int
    public var change: RPCChange
    /// The idempotency key the mutation was made with, if it had one.
    public var key: String?
    /// Whether this is one of a snapshot's records (between `snapshotBegin` and `snapshotEnd`):
    /// a call that recreates a record (`user.createUser`, …) or a `snapshotKey`.
    public var isSnapshotRecord: Bool

    public init(sequence: Int, change: RPCChange, key: String? = nil, isSnapshotRecord: Bool = false) {
        self.sequence = sequence
        self.change = change
        self.key = key
        self.isSnapshotRecord = isSnapshotRecord
    }
}
