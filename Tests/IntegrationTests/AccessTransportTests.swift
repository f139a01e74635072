import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// A line client over a Unix stream socket (LineClient is TCP only): connect, send, read one line.
func unixRequest(_ path: String, _ line: String, timeout: Double = 5) throws -> String? {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
    defer { close(fd) }
    var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
    }
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard rc == 0 else { throw HarnessError("connect \(path): errno \(errno)") }
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var out: [UInt8] = []
    var byte: UInt8 = 0
    while read(fd, &byte, 1) == 1 {
        if byte == 10 { return String(decoding: out, as: UTF8.self) }
        out.append(byte)
    }
    return out.isEmpty ? nil : String(decoding: out, as: UTF8.self)
}

@Suite("listeners: Unix sockets and protected mode")
struct AccessTransportTests {
    static func tempPath(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-\(UUID().uuidString.prefix(8))-\(name)").path
    }

    @Test("--listen unix:PATH serves over a Unix socket with mode 0660, replaces a stale file, removes it on exit")
    func unixSocket() throws {
        let path = Self.tempPath("rpcd.sock")
        // A stale socket file: bound, then its owner gone.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(stale, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(stale)
        #expect(FileManager.default.fileExists(atPath: path))

        let daemon = try DaemonProcess(listen: ["127.0.0.1:0", "unix:\(path)"], expectedListeners: 1)
        #expect(daemon.stderrEventually(contains: "listening on unix:\(path)"), "\(daemon.stderrTail())")
        let reply = try unixRequest(path, #"{"id":"1","method":"system.ping"}"#)
        #expect(reply?.contains("system.pingResult") == true, "\(reply ?? "EOF")")
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o660, "mode \(String(info.st_mode & 0o777, radix: 8))")
        daemon.terminate()
        #expect(daemon.waitForExit(timeout: 10) == 0)
        #expect(!FileManager.default.fileExists(atPath: path), "the socket file is removed on exit: \(daemon.stderrTail())")
    }

    @Test("a socket file another process put in the daemon's place is left there at exit, and the log says so")
    func unixPathReplaced() throws {
        let path = Self.tempPath("rpcd.sock")
        let daemon = try DaemonProcess(listen: ["127.0.0.1:0", "unix:\(path)"], expectedListeners: 1)
        #expect(daemon.stderrEventually(contains: "listening on unix:\(path)"), "\(daemon.stderrTail())")
        unlink(path)
        let other = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(other); unlink(path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, b) in path.utf8.enumerated() { raw[i] = b } }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(other, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        daemon.terminate()
        #expect(daemon.waitForExit(timeout: 10) == 0)
        #expect(FileManager.default.fileExists(atPath: path), "the other process's socket file stays")
        #expect(daemon.stderrEventually(contains: "another process replaced"), "\(daemon.stderrTail())")
    }

    @Test("a live socket or a regular file at the path is never replaced")
    func unixPathInUse() throws {
        let path = Self.tempPath("rpcd.sock")
        let first = try DaemonProcess(listen: ["127.0.0.1:0", "unix:\(path)"], expectedListeners: 1)
        defer {
            first.stop()
            unlink(path)
        }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-u-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        let second = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "unix:\(path)", "--data-dir", dir.path])
        #expect(second.status == 1 && second.stderr.contains("another process is accepting"), "\(second.stderr)")
        #expect(try unixRequest(path, #"{"id":"1","method":"system.ping"}"#)?.contains("pingResult") == true)

        let file = Self.tempPath("not-a-socket")
        try "keep me".write(toFile: file, atomically: true, encoding: .utf8)
        defer { unlink(file) }
        let third = try runProcess(try Binaries.rpcd(), ["serve", "--listen", "unix:\(file)", "--data-dir", dir.path])
        #expect(third.status == 1 && third.stderr.contains("not a socket"), "\(third.stderr)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "keep me")
    }
}

@Suite("protected mode over a real non-loopback network", .serialized)
struct ProtectedModeTests {
    @Test("without an auth file, a peer on another network gets one unauthorized error and is closed; loopback is served")
    func refusesNonLoopbackPeers() throws {
        let (made, reason) = TestNetwork.make()
        guard let network = made else {
            print("protected mode test skipped: \(reason)")
            return
        }
        // The daemon binds the veth address only (and loopback), never an outside interface.
        let daemon = try DaemonProcess(listen: ["\(network.hostAddress):0", "127.0.0.1:0"])
        defer { daemon.stop() }
        let vethPort = try #require(daemon.listeners.first { $0.host == network.hostAddress }).port
        let loopbackPort = try #require(daemon.listeners.first { $0.host == "127.0.0.1" }).port
        #expect(daemon.stderrEventually(contains: "protected mode serves loopback peers only"), "\(daemon.stderrTail())")

        let reply = try network.request(host: network.hostAddress, port: vethPort, #"{"id":"1","method":"user.listUsers"}"#)
        let lines = reply.split(separator: "\n")
        #expect(lines.count == 1, "exactly one line, then close: \(reply)")
        #expect(reply.contains(#""code":"unauthorized""#) && reply.contains("auth_file") && reply.contains("protected_mode = no"), "\(reply)")
        #expect(daemon.stderrEventually(contains: "refused \(network.peerAddress)"), "\(daemon.stderrTail())")

        let local = try LineClient(port: loopbackPort)
        #expect(try local.request(#"{"id":"2","method":"user.listUsers"}"#).contains("listUsersResult"))
    }
}

@Suite("access control: Unix users and protected mode off", .serialized)
struct UnixRoleTests {
    @Test("unix_roles grants a role by uid with no token; another uid gets unauthorized")
    func rolesByUID() throws {
        guard getuid() == 0, let nc = Binaries.onPath("nc"), let setpriv = Binaries.onPath("setpriv") else {
            print("unix_roles test skipped: needs root (to run a client as another uid), nc and setpriv")
            return
        }
        let path = AccessTransportTests.tempPath("roles.sock")
        let daemon = try DaemonProcess(listen: ["127.0.0.1:0", "unix:\(path)"], extraArguments: ["--unix-roles", "root:read"], expectedListeners: 1)
        defer {
            daemon.stop()
            unlink(path)
        }
        #expect(daemon.stderrEventually(contains: "listening on unix:\(path)"))
        // Root (uid 0) reads without a token, and may not write.
        let read = try unixRequest(path, #"{"id":"1","method":"user.listUsers"}"#)
        #expect(read?.contains("listUsersResult") == true, "\(read ?? "EOF")")
        let write = try unixRequest(path, #"{"id":"2","method":"user.createUser","param":{"id":"x","name":"X","email":"x@x"}}"#)
        #expect(write?.contains(#""code":"forbidden""#) == true, "\(write ?? "EOF")")
        // uid 65534 has no role: only ping and auth. (The socket is 0660 root's; open it for the test.)
        chmod(path, 0o666)
        let other = try runProcess(
            URL(fileURLWithPath: setpriv), ["--reuid=65534", "--regid=65534", "--clear-groups", nc, "-N", "-U", path],
            stdin: #"{"id":"3","method":"user.listUsers"}"# + "\n" + #"{"id":"4","method":"system.ping"}"# + "\n", timeout: 10)
        #expect(other.stdout.contains(#""code":"unauthorized""#) && other.stdout.contains("pingResult"), "\(other.stdout) \(other.stderr)")
    }

    @Test("protected_mode = no serves a non-loopback peer; with an auth file it must authenticate first")
    func protectedModeOffAndTokens() throws {
        let (made, reason) = TestNetwork.make()
        guard let network = made else {
            print("protected mode test skipped: \(reason)")
            return
        }
        let open = try DaemonProcess(listen: ["\(network.hostAddress):0"], extraArguments: ["--protected-mode", "no"])
        let served = try network.request(host: network.hostAddress, port: open.port, #"{"id":"1","method":"user.listUsers"}"#)
        #expect(served.contains("listUsersResult"), "\(served)")
        #expect(open.stderrEventually(contains: "protected_mode = no"), "\(open.stderrTail())")
        open.stop()

        let principals = try TestPrincipals()
        defer { principals.cleanUp() }
        let guarded = try DaemonProcess(listen: ["\(network.hostAddress):0"], extraArguments: ["--auth-file", principals.file])
        defer { guarded.stop() }
        let lines = [#"{"id":"1","method":"user.listUsers"}"#, principals.authLine("read", id: "2"), #"{"id":"3","method":"user.listUsers"}"#]
        let reply = try network.request(host: network.hostAddress, port: guarded.port, lines.joined(separator: "\n"))
        let got = reply.split(separator: "\n")
        #expect(got.count == 3, "\(reply)")
        if got.count == 3 {
            #expect(got[0].contains("unauthorized") && got[1].contains("authResult") && got[2].contains("listUsersResult"), "\(reply)")
        }
    }
}
