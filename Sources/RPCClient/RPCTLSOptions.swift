/// TLS for a client's connection: whom to trust, what name the daemon's certificate must carry,
/// and an optional client certificate (for a daemon with `tls_client_auth`).
///
/// ```swift
/// var options = RPCClientOptions()
/// options.tls = RPCTLSOptions(caFile: "/etc/rpcd/ca.pem")
/// let client = try await RPCClient.connect(to: "tls:10.0.0.5:7879", options: options)
/// ```
///
/// The client sends nothing (no token, no call) before the daemon's certificate verified.
public struct RPCTLSOptions: Sendable, Equatable {
    /// PEM CA certificates that verify the daemon; nil: the system's trust store.
    public var caFile: String?
    /// The name (DNS name or IP address) the daemon's certificate must carry; nil: the host
    /// connected to.
    public var serverName: String?
    /// A client certificate and its key, presented when the daemon asks for one.
    public var certificateFile: String?
    public var keyFile: String?
    /// Skips verifying the daemon's certificate: anyone on the path can read and change the
    /// traffic. For a first try against a self-signed daemon only.
    public var insecure: Bool

    public init(caFile: String? = nil, serverName: String? = nil, certificateFile: String? = nil, keyFile: String? = nil, insecure: Bool = false) {
        self.caFile = caFile
        self.serverName = serverName
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        self.insecure = insecure
    }
}
