import RPCSchema
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// A role granted without a token to local peers of one uid on a Unix socket (`unix_roles`);
/// the kernel vouches for the uid (`SO_PEERCRED`).
public struct UnixRole: Equatable, Sendable {
    public var uid: UInt32
    public var role: RPCRole

    public init(uid: UInt32, role: RPCRole) {
        self.uid = uid
        self.role = role
    }

    /// `UID_OR_USERNAME:ROLE, …` (blanks around items allowed; empty: none) -> roles by uid, or
    /// why not (a reason that follows the setting's name and value). User names are resolved now,
    /// with `lookup` (`getpwnam_r` by default): an unknown user is a problem, not a role for nobody.
    static func parseList(
        _ text: String, lookup: (String) throws(Errno) -> UInt32? = Syscall.userID(named:)
    ) -> Result<[UnixRole], ConfigValue.Problem> {
        var roles: [UnixRole] = []
        var spelled: [UInt32: String] = [:]
        for item in text.split(separator: ",").map({ $0.trimmingBlanks() }) where !item.isEmpty {
            guard let colon = item.lastIndex(of: ":"), colon != item.startIndex else {
                return .failure(ConfigValue.Problem("has \"\(item)\", which is not UID_OR_USERNAME:ROLE (e.g. 1000:write or www-data:read)"))
            }
            let who = String(item[..<colon])
            let roleText = String(item[item.index(after: colon)...])
            let role: RPCRole
            switch AuthFile.role(roleText) {
            case .success(let value): role = value
            case .failure(let message): return .failure(ConfigValue.Problem("has \"\(item)\": \(message)"))
            }
            let uid: UInt32
            if who.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
                // (uid_t)-1 is no one's uid: chown(2) reads it as "leave unchanged".
                guard let number = UInt32(who), number != UInt32.max else {
                    return .failure(ConfigValue.Problem("has uid \(who), which is out of range (0 to 4294967294)"))
                }
                uid = number
            } else {
                do {
                    guard let found = try lookup(who) else {
                        return .failure(ConfigValue.Problem("names user \"\(who)\", who does not exist here; give a uid or an existing user name"))
                    }
                    uid = found
                } catch {
                    return .failure(ConfigValue.Problem("names user \"\(who)\", who could not be looked up (\(error))"))
                }
            }
            if let first = spelled[uid] {
                return .failure(ConfigValue.Problem("gives uid \(uid) two roles (as \"\(first)\" and \"\(who)\"); keep one"))
            }
            spelled[uid] = who
            roles.append(UnixRole(uid: uid, role: role))
        }
        return .success(roles)
    }

    /// `0:admin, 1000:write` (uids, as resolved).
    static func render(_ roles: [UnixRole]) -> String {
        roles.map { "\($0.uid):\($0.role.rawValue)" }.joined(separator: ", ")
    }
}
