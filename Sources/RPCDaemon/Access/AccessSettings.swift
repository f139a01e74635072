import RPCTransport

/// The access settings of `rpcd serve`, the same for the config file and the flags:
///
/// | key / flag | value |
/// |---|---|
/// | `auth_file` / `--auth-file` | PATH of the auth file (empty: none) |
/// | `protected_mode` / `--protected-mode` | `yes` (default) or `no` |
/// | `unix_roles` / `--unix-roles` | `UID_OR_USERNAME:ROLE, …` (empty: none) |
/// | `follow_auth_file` / `--follow-auth-file` | PATH of a follower's `NAME:TOKEN` file (empty: none) |
/// | `follow` / `--follow` | `HOST:PORT`, `tls:HOST:PORT` or `unix:PATH` of the leader to follow (empty: none, a leader) |
///
/// Without `auth_file`, `$CREDENTIALS_DIRECTORY/auth` is used when it exists: systemd's
/// `LoadCredential=auth:/etc/rpcd/auth` puts a copy of the file there, readable by the service's
/// dynamic user while the original stays root's alone.
enum AccessSettings {
    static let keys = ["auth_file", "protected_mode", "unix_roles", "follow_auth_file", "follow"]

    /// Flags, by the key they set.
    static let flags = [
        "--auth-file": "auth_file", "--protected-mode": "protected_mode", "--unix-roles": "unix_roles",
        "--follow-auth-file": "follow_auth_file", "--follow": "follow",
    ]

    /// The credential's name in `LoadCredential=NAME:PATH`.
    static let credentialName = "auth"

    /// Sets `key` from `value`; nil, or why the value is refused (a reason that follows the
    /// setting's name and value, as `ConfigValue.Problem` does).
    static func apply(
        _ key: String, _ value: String, to options: inout ServeOptions,
        lookup: (String) throws(Errno) -> UInt32? = Syscall.userID(named:)
    ) -> ConfigValue.Problem? {
        switch key {
        case "auth_file": options.authFile = value.isEmpty ? nil : value
        case "follow_auth_file": options.followAuthFile = value.isEmpty ? nil : value
        case "follow":
            guard !value.isEmpty else {
                options.follow = nil
                return nil
            }
            guard TLSSettings.parseListen(value) != nil else {
                return ConfigValue.Problem("is not the leader's address: use \(SocketAddress.acceptedForms); tls:HOST:PORT for a TLS leader")
            }
            options.follow = value
        case "protected_mode":
            switch value {
            case "yes": options.protectedMode = true
            case "no": options.protectedMode = false
            default: return ConfigValue.Problem("is not yes or no (yes: refuse non-loopback peers while no auth_file is set)")
            }
        case "unix_roles":
            switch UnixRole.parseList(value, lookup: lookup) {
            case .success(let roles): options.unixRoles = roles
            case .failure(let problem): return problem
            }
        default:
            return ConfigValue.Problem("is not an access setting")
        }
        return nil
    }

    /// Copies `key` from `flags` over `options` (the flag wins); false if `key` is not one of these.
    static func merge(_ key: String, from flags: ServeOptions, into options: inout ServeOptions) -> Bool {
        switch key {
        case "auth_file": options.authFile = flags.authFile
        case "protected_mode": options.protectedMode = flags.protectedMode
        case "unix_roles": options.unixRoles = flags.unixRoles
        case "follow_auth_file": options.followAuthFile = flags.followAuthFile
        case "follow": options.follow = flags.follow
        default: return false
        }
        return true
    }

    /// The lines of `check-config`'s rendering (an empty value for none).
    static func render(_ options: ServeOptions) -> [String] {
        [
            "auth_file = \(options.authFile ?? "")",
            "protected_mode = \(options.protectedMode ? "yes" : "no")",
            "unix_roles = \(UnixRole.render(options.unixRoles))",
            "follow_auth_file = \(options.followAuthFile ?? "")",
            "follow = \(options.follow ?? "")",
        ].map { $0.hasSuffix(" = ") ? String($0.dropLast()) : $0 }
    }

    /// `$CREDENTIALS_DIRECTORY/auth` when it exists, for `auth_file` set neither by flag nor file.
    static func credentialAuthFile(environment: [String: String]) -> String? {
        guard let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty else { return nil }
        let path = (directory.hasSuffix("/") ? directory : directory + "/") + credentialName
        return FileIO.exists(path) ? path : nil
    }
}
