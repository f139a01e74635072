import Foundation
import RPCClient
import RPCSchema
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// The TLS settings of `rpcd serve`, the same for the config file and the flags:
///
/// | key / flag | value |
/// |---|---|
/// | `tls_cert_file` / `--tls-cert-file` | PATH of the PEM certificate (chain) TLS listeners present |
/// | `tls_key_file` / `--tls-key-file` | PATH of its PEM private key; refused when group or others may read it |
/// | `tls_ca_file` / `--tls-ca-file` | PATH of PEM CA certificates that verify client certificates |
/// | `tls_client_auth` / `--tls-client-auth` | `none` (default), `optional` or `required` |
/// | `tls_handshake_timeout` / `--tls-handshake-timeout` | seconds a peer has to finish its handshake (default 10) |
///
/// A listener is TLS when its address starts with `tls:` (`listen = tls:0.0.0.0:7879`).
enum TLSSettings {
    static let keys = ["tls_cert_file", "tls_key_file", "tls_ca_file", "tls_client_auth", "tls_handshake_timeout"]

    /// Flags, by the key they set.
    static let flags = [
        "--tls-cert-file": "tls_cert_file", "--tls-key-file": "tls_key_file", "--tls-ca-file": "tls_ca_file",
        "--tls-client-auth": "tls_client_auth", "--tls-handshake-timeout": "tls_handshake_timeout",
    ]

    static let listenPrefix = "tls:"

    /// A listen address: `[tls:]HOST:PORT` or `unix:PATH`.
    static func parseListen(_ text: String) -> (address: SocketAddress, tls: Bool)? {
        if text.hasPrefix(listenPrefix) {
            guard let address = SocketAddress(parsing: String(text.dropFirst(listenPrefix.count))) else { return nil }
            if case .unix = address { return nil }
            return (address, true)
        }
        return SocketAddress(parsing: text).map { ($0, false) }
    }

    static let acceptedListenForms = SocketAddress.acceptedForms + "; tls:HOST:PORT for a TLS listener"

    /// Sets `key` from `value`; nil, or why the value is refused.
    static func apply(_ key: String, _ value: String, to options: inout ServeOptions) -> ConfigValue.Problem? {
        switch key {
        case "tls_cert_file": options.tlsCertFile = value.isEmpty ? nil : value
        case "tls_key_file": options.tlsKeyFile = value.isEmpty ? nil : value
        case "tls_ca_file": options.tlsCAFile = value.isEmpty ? nil : value
        case "tls_client_auth":
            guard let mode = TLSConfiguration.ClientAuthentication(rawValue: value) else {
                return ConfigValue.Problem("is not none, optional or required")
            }
            options.tlsClientAuth = mode
        case "tls_handshake_timeout":
            switch ConfigValue.seconds(value, in: SettingRanges.idleTimeout, zero: "never") {
            case .success(let seconds): options.tlsHandshakeTimeout = seconds
            case .failure(let problem): return problem
            }
        default:
            return ConfigValue.Problem("is not a TLS setting")
        }
        return nil
    }

    /// Copies `key` from `flags` over `options` (the flag wins); false if `key` is not one of these.
    static func merge(_ key: String, from flags: ServeOptions, into options: inout ServeOptions) -> Bool {
        switch key {
        case "tls_cert_file": options.tlsCertFile = flags.tlsCertFile
        case "tls_key_file": options.tlsKeyFile = flags.tlsKeyFile
        case "tls_ca_file": options.tlsCAFile = flags.tlsCAFile
        case "tls_client_auth": options.tlsClientAuth = flags.tlsClientAuth
        case "tls_handshake_timeout": options.tlsHandshakeTimeout = flags.tlsHandshakeTimeout
        default: return false
        }
        return true
    }

    /// The lines of `check-config`'s rendering (an empty value for none).
    static func render(_ options: ServeOptions) -> [String] {
        [
            "tls_cert_file = \(options.tlsCertFile ?? "")",
            "tls_key_file = \(options.tlsKeyFile ?? "")",
            "tls_ca_file = \(options.tlsCAFile ?? "")",
            "tls_client_auth = \(options.tlsClientAuth.rawValue)",
            "tls_handshake_timeout = \(ConfigValue.render(seconds: options.tlsHandshakeTimeout))",
        ].map { $0.hasSuffix(" = ") ? String($0.dropLast()) : $0 }
    }

    /// A follower's TLS to a `tls:HOST:PORT` leader: the leader verified against `tls_ca_file`
    /// (else the system's trust store), and `tls_cert_file`/`tls_key_file` presented when the
    /// leader asks for a client certificate. nil for a plain leader.
    static func followerOptions(_ options: ServeOptions) -> RPCTLSOptions? {
        // A coordinated member follows whichever member leads: over TLS when it advertises `tls:`.
        guard options.follow?.hasPrefix(listenPrefix) == true || options.coordinator != nil else { return nil }
        return RPCTLSOptions(caFile: options.tlsCAFile, certificateFile: options.tlsCertFile, keyFile: options.tlsKeyFile)
    }

    /// The server context for the TLS listeners, or nil when there are none. Checks what a
    /// listener needs (certificate, key, key mode) and that OpenSSL takes the files.
    static func serverContext(_ options: ServeOptions) throws(TLSError) -> TLSContext? {
        guard options.listen.contains(where: { $0.hasPrefix(listenPrefix) }) else { return nil }
        guard let certificate = options.tlsCertFile, let key = options.tlsKeyFile else {
            throw TLSError("a tls: listener needs tls_cert_file and tls_key_file; set both (rpcd tls selfsigned --out DIR makes a pair to try)")
        }
        var status = stat()
        guard stat(key, &status) == 0 else {
            throw TLSError("tls_key_file \(key): cannot read it (\(String(cString: strerror(errno)))); check the path")
        }
        if status.st_mode & 0o044 != 0 {
            throw TLSError("tls_key_file \(key) is readable by group or others (mode \(SecretFile.octal(status.st_mode))); run chmod 600 \(key)")
        }
        var configuration = TLSConfiguration(
            certificateFile: certificate, privateKeyFile: key, caFile: options.tlsCAFile, clientAuthentication: options.tlsClientAuth)
        // A plain-text peer on a TLS port gets one line it can read, then the connection closes.
        var refusal: [UInt8] = []
        RequestCodec.encodeError(
            id: "", .invalidRequest("this port speaks TLS; connect with TLS (rpcd call tls:HOST:PORT, openssl s_client -quiet -connect HOST:PORT)"),
            form: .canonical, into: &refusal)
        configuration.plaintextRefusal = refusal
        return try TLSContext.server(configuration)
    }
}

/// The TLS listeners' context, swapped by SIGHUP: each accept takes the current one, so a
/// connection keeps the certificate it began with.
final class TLSContextHolder: @unchecked Sendable {
    // @unchecked: `context` is read and written only under `lock`.
    private let lock = NSLock()
    private var context: TLSContext

    init(_ context: TLSContext) { self.context = context }

    var current: TLSContext {
        get { lock.withLock { context } }
        set { lock.withLock { context = newValue } }
    }
}
