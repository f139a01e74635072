import RPCSchema

/// Who may do what, from the settings: the auth file (loaded), protected mode and the Unix roles.
/// A plain value; loading the auth file is its only I/O. The daemon builds it at start (a problem
/// is a bad config: exit 2), then hands the auth file to an `AuthReloader` for SIGHUP.
struct AccessPolicy: Sendable, Equatable {
    /// nil: no tokens; TCP peers are served as protected mode says.
    var authFile: AuthFile?
    var protectedMode: Bool
    var unixRoles: [UInt32: RPCRole]

    init(authFile: AuthFile?, protectedMode: Bool = true, unixRoles: [UnixRole] = []) {
        self.authFile = authFile
        self.protectedMode = protectedMode
        // `UnixRole.parseList` refuses a uid listed twice, so the last would win only for values built by hand.
        self.unixRoles = Dictionary(unixRoles.map { ($0.uid, $0.role) }) { _, last in last }
    }

    /// The policy `options` describe, reading `options.authFile` if set (`Config.effective` has
    /// already put systemd's credential there when nothing else named a file); `warn` hears of an
    /// auth file others may read.
    static func load(_ options: ServeOptions, warn: (String) -> Void) throws(AuthFile.Problems) -> AccessPolicy {
        let file = try options.authFile.map { path throws(AuthFile.Problems) in try AuthFile.load(path: path, warn: warn) }
        return AccessPolicy(authFile: file, protectedMode: options.protectedMode, unixRoles: options.unixRoles)
    }

    /// The rules a listener applies to a new connection (`Server.access`).
    var connectionAccess: ConnectionAccess {
        ConnectionAccess(tokensConfigured: authFile != nil, protectedMode: protectedMode, unixRoles: unixRoles)
    }

    /// For the startup log: what is in effect, without a secret or a hash.
    var summary: String {
        var parts: [String] = []
        if let authFile {
            let count = authFile.principals.count
            parts.append("auth file \(authFile.path) (\(count) principal\(count == 1 ? "" : "s"))")
        } else {
            parts.append("no auth file")
            parts.append("protected mode \(protectedMode ? "on" : "off")")
        }
        if !unixRoles.isEmpty {
            parts.append("unix roles " + UnixRole.render(unixRoles.sorted { $0.key < $1.key }.map { UnixRole(uid: $0.key, role: $0.value) }))
        }
        return parts.joined(separator: ", ")
    }
}
