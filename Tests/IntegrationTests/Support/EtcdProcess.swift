import Foundation
import TestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A real etcd (Debian's `etcd-server`) on free loopback ports with a temporary data directory,
/// killed and removed on `stop()` and in `deinit`.
final class EtcdProcess {
    let pid: pid_t
    private let exit: ChildExit
    private let drain: PipeDrain
    let dataDir: URL
    let clientPort: Int

    /// `etcd` on PATH or in /usr/bin; nil when it is not installed.
    static let binary: URL? = {
        let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin"]
        return paths.map { URL(fileURLWithPath: $0).appendingPathComponent("etcd") }.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }()

    /// Tests that need etcd run when it is installed, and always in CI (where a missing etcd fails them).
    static var shouldRun: Bool { binary != nil || ProcessInfo.processInfo.environment["CI"] != nil }

    /// `etcd:127.0.0.1:PORT`, for `--coordinator`.
    var coordinator: String { "etcd:127.0.0.1:\(clientPort)" }

    init() throws {
        guard let binary = Self.binary else {
            throw HarnessError("etcd is not installed; apt-get install etcd-server (CI installs it)")
        }
        dataDir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-etcd-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: dataDir, withIntermediateDirectories: true)
        clientPort = try Self.freePort()
        let peerPort = try Self.freePort()
        let client = "http://127.0.0.1:\(clientPort)"
        let peer = "http://127.0.0.1:\(peerPort)"
        let pipe = Pipe()
        pid = try Spawn.start(
            binary.path,
            [
                "--name", "test", "--data-dir", dataDir.path, "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "test=\(peer)",
            ], stderr: pipe.fileHandleForWriting.fileDescriptor)
        exit = ChildExit(pid: pid)
        try? pipe.fileHandleForWriting.close()
        drain = PipeDrain(pipe)
        guard drain.wait(timeout: TestPace.seconds(20), until: { $0.contains("ready to serve client requests") }) else {
            stop()
            throw HarnessError("etcd did not get ready in 20 s:\n\(drain.text.suffix(3000))")
        }
    }

    deinit { stop() }

    func signal(_ sig: Int32) {
        if exit.isRunning { kill(pid, sig) }
    }

    func stop() {
        if exit.isRunning {
            kill(pid, SIGKILL)
            exit.wait(timeout: 5)
        }
        try? FileManager.default.removeItem(at: dataDir)
    }

    /// A loopback port free now (bound to port 0, read, closed).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else { throw HarnessError("bind: errno \(errno)") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
