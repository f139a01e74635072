import Foundation
import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

/// `--tls`: a CA and a certificate for 127.0.0.1 made once per run by the openssl command (in a
/// temporary directory `Cleanup` removes), the client context that trusts the CA, and the
/// handshake each load connection makes before the load starts.
final class BenchTLS: @unchecked Sendable {
    // @unchecked: set up once, before any load thread starts; read only after.
    let directory: String
    var caFile: String { directory + "/ca.pem" }
    var certificateFile: String { directory + "/server.pem" }
    var keyFile: String { directory + "/server.key" }
    private let client: TLSContext

    nonisolated(unsafe) static var made: BenchTLS?
    static var shared: BenchTLS {
        if let made { return made }
        do {
            let tls = try BenchTLS()
            made = tls
            return tls
        } catch {
            fail("--tls: \(error)")
        }
    }

    private init() throws {
        directory = Cleanup.makeTemporaryDirectory(tag: "tls")
        let curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try Self.openssl(["req", "-x509"] + curve + ["-keyout", directory + "/ca.key", "-out", directory + "/ca.pem", "-days", "2", "-subj", "/CN=rpcbench CA"])
        try Self.openssl(["req"] + curve + ["-keyout", directory + "/server.key", "-out", directory + "/server.csr", "-subj", "/CN=127.0.0.1"])
        try "subjectAltName=IP:127.0.0.1\n".write(toFile: directory + "/server.ext", atomically: true, encoding: .utf8)
        try Self.openssl([
            "x509", "-req", "-in", directory + "/server.csr", "-CA", directory + "/ca.pem", "-CAkey", directory + "/ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", directory + "/server.ext", "-out", directory + "/server.pem",
        ])
        chmod(directory + "/server.key", 0o600)
        chmod(directory + "/ca.key", 0o600)
        client = try TLSContext.client(TLSConfiguration(caFile: directory + "/ca.pem"))
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw UsageError("openssl \(arguments.first ?? "") failed; is the openssl command installed?") }
    }

    /// A TLS session on a connected non-blocking `fd`, its handshake done (verified against the CA).
    func handshake(_ fd: Int32, timeout: Double = 10) throws -> TLSSession {
        let session = try client.session(serverName: "127.0.0.1")
        session.startHandshake()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        let deadline = nowNanoseconds() + UInt64(timeout * 1e9)
        while !session.isEstablished {
            guard nowNanoseconds() < deadline else { throw UsageError("TLS handshake timed out") }
            _ = try session.pendingOutput.flush { bytes throws(Errno) in try Syscall.send(fd, bytes) }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            _ = poll(&poller, 1, 100)
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n == 0 { throw UsageError("the server closed the connection during the TLS handshake") }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { continue }
                throw UsageError("TLS handshake: \(String(cString: strerror(errno)))")
            }
            buffer.withUnsafeBytes { session.receive(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            if case .failed(let message) = buffer.withUnsafeMutableBytes({ session.read(into: $0) }) { throw UsageError(message) }
        }
        _ = try session.pendingOutput.flush { bytes throws(Errno) in try Syscall.send(fd, bytes) }
        return session
    }
}
