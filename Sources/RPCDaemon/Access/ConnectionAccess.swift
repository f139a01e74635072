import RPCSchema
import RPCTransport

/// What a new connection may do before it authenticates, from where it came in: the rules of
/// "Access control" in README (protected mode, tokens, Unix users).
struct ConnectionAccess: Sendable {
    enum Decision: Equatable, Sendable {
        /// Serve it with this role (nil: only `system.ping` and `system.auth` until it authenticates).
        case admit(RPCRole?, principal: String?)
        /// Send this error and close.
        case refuse(RPCError)
    }

    /// An auth file is in effect: every TCP connection authenticates.
    var tokensConfigured = false
    /// Refuse non-loopback peers on a non-loopback listener when no auth file is in effect.
    var protectedMode = true
    /// Roles granted to local peers on Unix sockets by their uid, without a token.
    var unixRoles: [UInt32: RPCRole] = [:]

    func decide(listener: SocketAddress, peer: SocketAddress?, credentials: PeerCredentials?) -> Decision {
        if case .unix = listener {
            if let uid = credentials?.uid, let role = unixRoles[uid] { return .admit(role, principal: "uid \(uid)") }
            // A Unix socket is reachable only through its file mode; without tokens or roles it is as
            // trusted as loopback TCP.
            return tokensConfigured || !unixRoles.isEmpty ? .admit(nil, principal: nil) : .admit(.admin, principal: nil)
        }
        if tokensConfigured { return .admit(nil, principal: nil) }
        if protectedMode && !listener.isLoopback && !(peer?.isLoopback ?? false) {
            return .refuse(.unauthorized(
                "protected mode: rpcd listens on \(listener) without an auth_file, so it serves loopback peers only; "
                    + "set auth_file (create tokens with rpcd auth add NAME ROLE) to admit other peers, "
                    + "or set protected_mode = no to accept anyone who can reach the port"))
        }
        return .admit(.admin, principal: nil)
    }
}
