import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A `redis-server` started for `--compare redis`: on a free loopback port, in a temporary directory of
/// its own (its log, and its append-only file when durable), ready once it answers PING. `stop()` kills
/// it and removes the directory; `Cleanup` does both on any other way out.
final class RedisServer {
    let process: Process
    let port: Int
    /// `--tls-port` with `--tls` (0 without).
    let tlsPort: Int
    let dir: String

    /// `redis-server` on PATH, or nil.
    static func locate() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(dir)/redis-server") {
            return "\(dir)/redis-server"
        }
        return nil
    }

    /// Starts Redis without persistence, or, when `durable`, with every write in its AOF fsynced
    /// before the reply (`appendfsync always`).
    init(binary: String, durable: Bool) throws {
        dir = Cleanup.makeTemporaryDirectory(tag: "redis")
        let log = dir + "/redis.log"
        var lastFailure = ""
        // A free port can be taken between probing it and Redis binding it: try another.
        for _ in 0..<3 {
            let port = try freeLoopbackPort()
            let tlsPort = options.tls ? try freeLoopbackPort() : 0
            var tlsArguments: [String] = []
            if options.tls {
                let tls = BenchTLS.shared
                tlsArguments = [
                    "--tls-port", "\(tlsPort)", "--tls-cert-file", tls.certificateFile, "--tls-key-file", tls.keyFile,
                    "--tls-ca-cert-file", tls.caFile, "--tls-auth-clients", "no",
                ]
            }
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = [
                "--port", "\(port)", "--bind", "127.0.0.1", "--save", "", "--dir", dir, "--logfile", log,
                "--daemonize", "no",
            ] + (durable ? ["--appendonly", "yes", "--appendfsync", "always"] : ["--appendonly", "no"]) + tlsArguments
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            _ = FileManager.default.createFile(atPath: dir + "/redis.stderr", contents: nil)
            process.standardError = FileHandle(forWritingAtPath: dir + "/redis.stderr") ?? FileHandle.nullDevice
            try process.run()
            Cleanup.track(process)
            if Self.waitForPong(port: port, process: process, seconds: 10) {
                self.process = process
                self.port = port
                self.tlsPort = tlsPort
                return
            }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            let output = [log, dir + "/redis.stderr"].compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }.joined()
            lastFailure = output.split(separator: "\n").last.map(String.init) ?? "no output"
            guard output.contains("Address already in use") else { break }
        }
        Cleanup.removeDirectory(dir)
        throw UsageError("redis-server did not answer PING: \(lastFailure)")
    }

    /// CPU seconds Redis used so far (all its threads).
    func cpuSeconds() -> Double { ProcessStats.cpuSeconds(pid: process.processIdentifier) }

    func rssKiB() -> Int { ProcessStats.rssKiB(pid: process.processIdentifier) }

    /// Kills Redis and removes its directory.
    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        Cleanup.removeDirectory(dir)
    }

    /// Sends `PING` until `+PONG` comes back, for up to `seconds`; false if Redis exited or never answered.
    private static func waitForPong(port: Int, process: Process, seconds: Double) -> Bool {
        let deadline = nowNanoseconds() + UInt64(seconds * 1e9)
        while nowNanoseconds() < deadline && process.isRunning {
            if let fd = try? openConnection(host: "127.0.0.1", port: port) {
                defer { close(fd) }
                var reply = [UInt8]()
                if send(fd, "PING\r\n", 6, Int32(MSG_NOSIGNAL)) == 6 {
                    var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                    var buffer = [UInt8](repeating: 0, count: 64)
                    while !reply.contains(UInt8(ascii: "\n")) && poll(&poller, 1, 1000) > 0 {
                        let n = read(fd, &buffer, buffer.count)
                        guard n > 0 else { break }
                        reply += buffer[0..<n]
                    }
                }
                if reply.starts(with: "+PONG".utf8) { return true }
            }
            usleep(10_000)
        }
        return false
    }
}

/// A loopback port nothing listens on right now (bound to port 0, read back, closed).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw UsageError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw UsageError("bind 127.0.0.1:0: \(String(cString: strerror(errno)))") }
    return Int(UInt16(bigEndian: address.sin_port))
}
