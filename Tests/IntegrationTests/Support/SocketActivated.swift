import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `systemd-socket-activate -l 127.0.0.1:PORT… rpcd serve ARGUMENTS`: the sockets listen from the
/// start, and the first connection starts rpcd on them. Killed on `stop()`.
final class SocketActivated {
    let process = Process()
    let stderr: PipeDrain

    init(activate: String, ports: [Int], arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: activate)
        process.arguments = ports.flatMap { ["-l", "127.0.0.1:\($0)"] } + [try Binaries.rpcd().path, "serve"] + arguments
        let errPipe = Pipe()
        process.standardError = errPipe
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        try? errPipe.fileHandleForWriting.close()
        stderr = PipeDrain(errPipe)
    }

    deinit { stop() }

    /// A connection to `port`, retried for up to 10 s; nil if none was made.
    func connect(port: Int) -> LineClient? {
        var client: LineClient?
        let deadline = Date().addingTimeInterval(10)
        while client == nil && Date() < deadline {
            client = try? LineClient(port: port)
            if client == nil { usleep(50_000) }
        }
        return client
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
