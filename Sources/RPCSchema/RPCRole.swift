/// What a method requires of its caller: one entry of the method table declares it, and the
/// dispatcher, `system.describe` and the role check all read it there.
public enum RPCAccess: String, Sendable, Codable, CaseIterable, Comparable {
    /// Anyone, before authenticating (`system.ping`, `system.auth`).
    case open
    /// Reads: get, list, describe.
    case read
    /// Mutations: create, update, delete.
    case write
    /// Following the change feed (`replication.subscribe`).
    case replicate
    /// Operating the daemon (`system.stats`).
    case admin

    public static func < (a: RPCAccess, b: RPCAccess) -> Bool {
        allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
    }
}

/// What an authenticated peer may do. `replicate` is not above `write`: a follower reads and
/// subscribes, and changes nothing.
public enum RPCRole: String, Sendable, Codable, CaseIterable {
    case read, write, replicate, admin

    /// Whether this role may call a method requiring `access`.
    public func allows(_ access: RPCAccess) -> Bool {
        switch (self, access) {
        case (_, .open), (_, .read): return true
        case (.write, .write), (.replicate, .replicate): return true
        case (.admin, _): return true
        default: return false
        }
    }

    /// `read, write, replicate, admin`
    public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }
}
