import RPCSchema

/// One mutation from a change feed, typed: the call that made it on the leader, or a marker of a
/// snapshot. What `RPCClient.changes(from:snapshot:bufferLimit:)` yields, inside an `RPCChangeEvent`.
public enum RPCChange: Sendable, Equatable {
    case createUser(CreateUser)
    case updateUser(UpdateUser)
    case deleteUser(DeleteUser)
    case addBuilding(AddBuilding)
    case updateBuilding(UpdateBuilding)
    case deleteBuilding(DeleteBuilding)
    /// A snapshot follows: forget your state; the next `records` changes (each with
    /// `isSnapshotRecord`) rebuild it as of `sequence`.
    case snapshotBegin(sequence: Int, records: Int)
    /// The snapshot's last record came; from here on, changes after `sequence`.
    case snapshotEnd(sequence: Int)
    /// Among a snapshot's records: the remembered outcome of a keyed mutation (what the leader
    /// answers a retry with that key). A mirror that answers retries keeps it; others skip it.
    case snapshotKey(SnapshotKey)
    /// A change this client cannot read as one of the cases above: a method it does not know (a
    /// newer daemon), or a param that does not decode as its type. The request as it came.
    case other(Request)

    /// Reads a request of the feed as a typed change (`.other` when it cannot).
    init(_ request: Request, decoder: JSONValueDecoder) {
        func typed<C: Decodable>(_ type: C.Type, _ make: (C) -> RPCChange) -> RPCChange {
            guard let call = try? decoder.decode(C.self, from: request.param ?? .object(JSONObject())) else { return .other(request) }
            return make(call)
        }
        switch request.method {
        case CreateUser.method: self = typed(CreateUser.self, RPCChange.createUser)
        case UpdateUser.method: self = typed(UpdateUser.self, RPCChange.updateUser)
        case DeleteUser.method: self = typed(DeleteUser.self, RPCChange.deleteUser)
        case AddBuilding.method: self = typed(AddBuilding.self, RPCChange.addBuilding)
        case UpdateBuilding.method: self = typed(UpdateBuilding.self, RPCChange.updateBuilding)
        case DeleteBuilding.method: self = typed(DeleteBuilding.self, RPCChange.deleteBuilding)
        case SnapshotBegin.method: self = typed(SnapshotBegin.self) { .snapshotBegin(sequence: $0.sequence, records: $0.records) }
        case SnapshotEnd.method: self = typed(SnapshotEnd.self) { .snapshotEnd(sequence: $0.sequence) }
        case SnapshotKey.method: self = typed(SnapshotKey.self, RPCChange.snapshotKey)
        default: self = .other(request)
        }
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
    /// Whether this is one of a snapshot's records (between `.snapshotBegin` and `.snapshotEnd`):
    /// a create (`.createUser`, `.addBuilding`) or a `.snapshotKey`.
    public var isSnapshotRecord: Bool

    public init(sequence: Int, change: RPCChange, key: String? = nil, isSnapshotRecord: Bool = false) {
        self.sequence = sequence
        self.change = change
        self.key = key
        self.isSnapshotRecord = isSnapshotRecord
    }
}
