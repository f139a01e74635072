import COpenSSL
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A blocking TLS client over `LineClient`'s socket (OpenSSL on the fd): for hostile-peer tests
/// against a TLS listener. Verifies the daemon against `caFile`. Bounded by the socket's timeouts.
final class TLSLineClient {
    let plain: LineClient
    private let context: OpaquePointer
    private let ssl: OpaquePointer
    private var buffer: [UInt8] = []

    init(port: Int, caFile: String, timeout: Double = 10, handshake: Bool = true) throws {
        _ = ignoreSIGPIPEInTests
        plain = try LineClient(port: port, timeout: timeout)
        guard let context = SSL_CTX_new(TLS_client_method()) else { throw HarnessError("SSL_CTX_new failed") }
        self.context = context
        SSL_CTX_load_verify_locations(context, caFile, nil)
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        guard let ssl = SSL_new(context) else { throw HarnessError("SSL_new failed") }
        self.ssl = ssl
        SSL_set_fd(ssl, plain.fd)
        if handshake {
            guard SSL_connect(ssl) == 1 else { throw HarnessError("TLS handshake with 127.0.0.1:\(port) failed") }
        }
    }

    deinit {
        SSL_free(ssl)
        SSL_CTX_free(context)
    }

    func send(_ text: String) throws {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            var written = 0
            let ok = bytes.withUnsafeMutableBytes { SSL_write_ex(ssl, $0.baseAddress! + offset, $0.count - offset, &written) }
            guard ok == 1 else { throw LineClientError.closedByPeer(errno: errno) }
            offset += written
        }
        bytes.removeAll()
    }

    /// The next line, or nil once the daemon closed (or reset) the connection or the timeout passed.
    func readLine() -> String? {
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[..<newline], as: UTF8.self)
                buffer.removeSubrange(...newline)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            var count = 0
            let ok = chunk.withUnsafeMutableBytes { SSL_read_ex(ssl, $0.baseAddress, $0.count, &count) }
            guard ok == 1 else { return nil }
            buffer.append(contentsOf: chunk[..<count])
        }
    }

    func request(_ line: String) throws -> String? {
        try send(line + "\n")
        return readLine()
    }

    /// Closes with a reset (SO_LINGER 0).
    func abort() { plain.abort() }
}
