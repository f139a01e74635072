import COpenSSL
#if canImport(Glibc)
import Glibc
#endif

/// What went wrong setting up or speaking TLS, in one line a person can act on.
public struct TLSError: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// How one end of a TLS connection is set up. A value: the daemon and the client fill it from
/// their settings, `TLSContext` turns it into OpenSSL's.
public struct TLSConfiguration: Sendable {
    public enum ClientAuthentication: String, Sendable, CaseIterable {
        /// No client certificate asked for.
        case none
        /// Asked for and verified when sent; a client without one is served too.
        case optional
        /// A client without a verified certificate fails the handshake.
        case required
    }

    /// PEM certificate chain: the server's own, or a client's for client authentication.
    public var certificateFile: String?
    /// PEM private key for `certificateFile`.
    public var privateKeyFile: String?
    /// PEM CA certificates that verify the peer. On a client, nil means the system's trust store.
    public var caFile: String?
    /// A server's demand for client certificates.
    public var clientAuthentication: ClientAuthentication = .none
    /// A client's check of the server's certificate; off only when a person said `--insecure`.
    public var verifiesPeer = true
    /// Sent to a peer that speaks plain text to a TLS listener, before it is closed (a server only):
    /// the transport knows nothing of the protocol, so the owner words it.
    public var plaintextRefusal: [UInt8]?

    public init(
        certificateFile: String? = nil, privateKeyFile: String? = nil, caFile: String? = nil,
        clientAuthentication: ClientAuthentication = .none, verifiesPeer: Bool = true
    ) {
        self.certificateFile = certificateFile
        self.privateKeyFile = privateKeyFile
        self.caFile = caFile
        self.clientAuthentication = clientAuthentication
        self.verifiesPeer = verifiesPeer
    }
}

/// OpenSSL's context for one side (server or client), made once and shared by its connections.
public final class TLSContext: @unchecked Sendable {
    // @unchecked: the SSL_CTX is configured in init and only read after (SSL_new on a configured
    // context is thread-safe); nothing else is stored.
    let context: OpaquePointer
    public let isServer: Bool
    public let configuration: TLSConfiguration

    /// A server's context: its certificate and key must be given and match.
    public static func server(_ configuration: TLSConfiguration) throws(TLSError) -> TLSContext {
        guard let certificate = configuration.certificateFile, let key = configuration.privateKeyFile else {
            throw TLSError("a TLS listener needs tls_cert_file and tls_key_file")
        }
        let context = try TLSContext(server: true, configuration)
        try context.use(certificate: certificate, key: key)
        if let ca = configuration.caFile {
            try context.loadCA(ca)
            guard let names = SSL_load_client_CA_file(ca) else { throw TLSError("tls_ca_file \(ca): no CA certificate in it (\(TLSError.lastReason()))") }
            SSL_CTX_set_client_CA_list(context.context, names)
        }
        switch configuration.clientAuthentication {
        case .none: break
        case .optional, .required:
            guard configuration.caFile != nil else {
                throw TLSError("tls_client_auth = \(configuration.clientAuthentication.rawValue) needs tls_ca_file to verify client certificates")
            }
            let failIfNone = configuration.clientAuthentication == .required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0
            SSL_CTX_set_verify(context.context, SSL_VERIFY_PEER | failIfNone, nil)
        }
        return context
    }

    /// A client's context: verifies the server against `caFile`, else the system's trust store.
    public static func client(_ configuration: TLSConfiguration) throws(TLSError) -> TLSContext {
        let context = try TLSContext(server: false, configuration)
        if let certificate = configuration.certificateFile {
            guard let key = configuration.privateKeyFile else { throw TLSError("a client certificate (\(certificate)) needs its key file too") }
            try context.use(certificate: certificate, key: key)
        }
        if configuration.verifiesPeer {
            if let ca = configuration.caFile {
                try context.loadCA(ca)
            } else if SSL_CTX_set_default_verify_paths(context.context) != 1 {
                throw TLSError("cannot load the system's trust store (\(TLSError.lastReason())); name a CA file")
            }
            SSL_CTX_set_verify(context.context, SSL_VERIFY_PEER, nil)
        } else {
            SSL_CTX_set_verify(context.context, SSL_VERIFY_NONE, nil)
        }
        return context
    }

    private init(server: Bool, _ configuration: TLSConfiguration) throws(TLSError) {
        ERR_clear_error()
        guard let method = server ? TLS_server_method() : TLS_client_method(), let context = SSL_CTX_new(method) else {
            throw TLSError("OpenSSL could not make a TLS context (\(TLSError.lastReason()))")
        }
        self.context = context
        self.isServer = server
        self.configuration = configuration
        _ = crpc_ssl_ctx_set_min_tls12(context)
        _ = crpc_ssl_ctx_set_default_modes(context)
        _ = crpc_ssl_ctx_set_default_options(context)
    }

    deinit { SSL_CTX_free(context) }

    private func use(certificate: String, key: String) throws(TLSError) {
        ERR_clear_error()
        guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1 else {
            throw TLSError("certificate file \(certificate): \(TLSError.lastReason()); it must hold a PEM certificate (chain)")
        }
        guard SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
            let reason = TLSError.lastReason()
            if reason == "key values mismatch" {
                throw TLSError("key file \(key) does not match certificate \(certificate); give the key the certificate was made for")
            }
            throw TLSError("key file \(key): \(reason); it must hold the PEM private key")
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            throw TLSError("key file \(key) does not match certificate \(certificate); give the key the certificate was made for")
        }
    }

    private func loadCA(_ path: String) throws(TLSError) {
        ERR_clear_error()
        guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
            throw TLSError("CA file \(path): \(TLSError.lastReason()); it must hold PEM CA certificates")
        }
    }

    /// A session for one connection. A client verifies the server as `serverName` (a DNS name or
    /// an IP address) and sends it as SNI when it is a name.
    public func session(serverName: String? = nil) throws(TLSError) -> TLSSession {
        try TLSSession(context: self, serverName: serverName)
    }
}

extension TLSError {
    /// The newest reason on OpenSSL's error queue of this thread (emptied), or "no reason given".
    static func lastReason() -> String {
        var reason = "no reason given"
        while case let code = ERR_get_error(), code != 0 {
            if let text = ERR_reason_error_string(code) {
                reason = String(cString: text)
            } else {
                var buffer = [CChar](repeating: 0, count: 256)
                ERR_error_string_n(code, &buffer, buffer.count)
                reason = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            }
        }
        return reason
    }
}

/// One connection's TLS: OpenSSL over two memory buffers, so the connection keeps its own
/// non-blocking socket I/O (no SIGPIPE, one syscall layer) and OpenSSL never touches the fd.
/// Used on the connection's loop only.
public final class TLSSession {
    package enum ReadResult {
        /// Plaintext bytes written to the buffer.
        case data(Int)
        /// No whole record buffered: wait for the socket.
        case needsInput
        /// The peer's close_notify: the stream ended.
        case closed
        case failed(String)
    }

    private let ssl: OpaquePointer
    private let input: OpaquePointer
    private let output: OpaquePointer
    let isServer: Bool
    let plaintextRefusal: [UInt8]?
    /// Encrypted bytes made by OpenSSL and not yet taken by the socket.
    package var pendingOutput = OutboundBuffer()
    /// Whether the first byte from the peer was looked at (a server checks it is TLS).
    var checkedFirstByte = false
    /// Whether the connection told its owner the handshake finished.
    var announcedEstablished = false
    /// Set once: a failure that ends the connection.
    private(set) var failure: String?

    init(context: TLSContext, serverName: String?) throws(TLSError) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.context) else { throw TLSError("OpenSSL could not make a TLS session (\(TLSError.lastReason()))") }
        guard let input = BIO_new(BIO_s_mem()), let output = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw TLSError("OpenSSL could not make a TLS buffer")
        }
        SSL_set_bio(ssl, input, output)
        self.ssl = ssl
        self.input = input
        self.output = output
        self.isServer = context.isServer
        self.plaintextRefusal = context.isServer ? context.configuration.plaintextRefusal : nil
        if context.isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            if let name = serverName, !name.isEmpty {
                let isAddress = Self.isIPAddress(name)
                if context.configuration.verifiesPeer {
                    let set = isAddress ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) : SSL_set1_host(ssl, name)
                    guard set == 1 else { throw TLSError("\(name) cannot be checked against a certificate; give a DNS name or an IP address") }
                }
                if !isAddress { _ = crpc_ssl_set_sni(ssl, name) }
            }
        }
    }

    deinit { SSL_free(ssl) }

    private static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    /// The handshake is done: application data flows.
    public var isEstablished: Bool { SSL_is_init_finished(ssl) == 1 }

    /// A client's first flight (ClientHello), queued in `pendingOutput`.
    package func startHandshake() {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result != 1 { _ = classify(result) }
        collectOutput()
    }

    /// Takes encrypted bytes read from the socket.
    package func receive(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count {
            let chunk = Int32(clamping: bytes.count - offset)
            let written = BIO_write(input, bytes.baseAddress! + offset, chunk)
            guard written > 0 else {
                fail("TLS could not buffer input")
                return
            }
            offset += Int(written)
        }
    }

    /// Bytes received and not yet decrypted: a read must be retried after a pause.
    var hasBufferedInput: Bool { crpc_bio_pending(input) > 0 || SSL_pending(ssl) > 0 }

    /// Decrypts what it can into `buffer` (driving the handshake first).
    package func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadResult {
        if let failure { return .failed(failure) }
        ERR_clear_error()
        var count = 0
        let result = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count)
        defer { collectOutput() }
        if result == 1 { return .data(count) }
        return classify(Int32(result))
    }

    /// Encrypts a prefix of `bytes` (at most a record's worth) into `pendingOutput`; returns how
    /// many plaintext bytes it took, 0 while the handshake is under way.
    package func write(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard failure == nil, !bytes.isEmpty else { return 0 }
        ERR_clear_error()
        var count = 0
        let result = SSL_write_ex(ssl, bytes.baseAddress, min(bytes.count, 16 * 1024), &count)
        defer { collectOutput() }
        if result == 1 { return count }
        if case .failed = classify(Int32(result)) { return 0 }
        return 0
    }

    /// A close_notify for the peer, queued in `pendingOutput`.
    func shutdown() {
        guard failure == nil, isEstablished else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        collectOutput()
    }

    private func classify(_ result: Int32) -> ReadResult {
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .needsInput
        case SSL_ERROR_ZERO_RETURN: return .closed
        default:
            let reason = TLSError.lastReason()
            let verify = SSL_get_verify_result(ssl)
            var message = isEstablished ? "TLS failed: \(reason)" : "TLS handshake failed: \(reason)"
            if verify != X509_V_OK, let text = X509_verify_cert_error_string(verify) {
                message += " (\(String(cString: text)))"
            }
            fail(message)
            return .failed(message)
        }
    }

    private func fail(_ message: String) {
        if failure == nil { failure = message }
    }

    /// Moves what OpenSSL wrote (records, alerts) into `pendingOutput`.
    private func collectOutput() {
        let pending = crpc_bio_pending(output)
        guard pending > 0 else { return }
        pendingOutput.append { bytes in
            let start = bytes.count
            bytes.append(contentsOf: repeatElement(0, count: pending))
            let read = bytes.withUnsafeMutableBytes { raw in
                BIO_read(output, raw.baseAddress! + start, Int32(clamping: pending))
            }
            bytes.removeLast(pending - max(0, Int(read)))
        }
    }

    // MARK: - The peer's certificate

    /// The names a verified peer certificate holds: its subject's common name and its DNS names.
    /// Empty without a certificate or when it did not verify.
    public var verifiedPeerNames: [String] {
        guard SSL_get_verify_result(ssl) == X509_V_OK, let certificate = SSL_get1_peer_certificate(ssl) else { return [] }
        defer { X509_free(certificate) }
        var names: [String] = []
        if let subject = X509_get_subject_name(certificate) {
            var index: Int32 = -1
            while true {
                index = X509_NAME_get_index_by_NID(subject, NID_commonName, index)
                guard index >= 0, let entry = X509_NAME_get_entry(subject, index), let data = X509_NAME_ENTRY_get_data(entry) else { break }
                if let bytes = ASN1_STRING_get0_data(data), ASN1_STRING_length(data) > 0 {
                    names.append(String(decoding: UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(data))), as: UTF8.self))
                }
            }
        }
        if let raw = X509_get_ext_d2i(certificate, NID_subject_alt_name, nil, nil) {
            let general = OpaquePointer(raw)
            let count = OPENSSL_sk_num(general)
            for index in 0..<max(0, count) {
                guard let item = OPENSSL_sk_value(general, index)?.assumingMemoryBound(to: GENERAL_NAME.self) else { continue }
                guard item.pointee.type == GEN_DNS, let data = item.pointee.d.dNSName, let bytes = ASN1_STRING_get0_data(data) else { continue }
                if ASN1_STRING_length(data) > 0 {
                    names.append(String(decoding: UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(data))), as: UTF8.self))
                }
            }
            GENERAL_NAMES_free(general)
        }
        return names
    }
}
