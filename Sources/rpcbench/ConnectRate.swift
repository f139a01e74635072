import Foundation
import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

/// `--connect-rate S`: for S seconds, one connection after another: connect (and, with `--tls`,
/// handshake), one request, its reply, close. Prints connections per second for rpcd and, with
/// `--compare redis`, for Redis (PING) the same way.
func runConnectRate(seconds: Double, binary: String) throws -> Never {
    let daemon = try SpawnedDaemon(binary: binary, dataDir: freshDataDir(), extraArguments: [])
    let rpcdRate = try connectRate(port: options.tls ? daemon.tlsPort : daemon.port, request: #"{"id":"1","method":"system.ping"}"# + "\n", seconds: seconds)
    daemon.kill()
    Cleanup.removeDirectory(daemon.dataDir)
    let mode = options.tls ? "TLS handshake, " : ""
    print("rpcd        connect, \(mode)system.ping, close: \(rpcdRate.rate) connections/s, p50 \(rpcdRate.p50) µs, \(rpcdRate.errors) errors")
    print("RESULT target=rpcd connect_rate=\(rpcdRate.rate) p50_us=\(rpcdRate.p50) tls=\(options.tls) errors=\(rpcdRate.errors)")
    var errors = rpcdRate.errors
    if options.compare.contains(.redis) {
        guard let redisBinary = RedisServer.locate() else { fail("--compare redis needs redis-server on PATH") }
        let redis = try RedisServer(binary: redisBinary, durable: false)
        let redisRate = try connectRate(port: options.tls ? redis.tlsPort : redis.port, request: "PING\r\n", seconds: seconds)
        redis.stop()
        print("redis       connect, \(mode)PING, close: \(redisRate.rate) connections/s, p50 \(redisRate.p50) µs, \(redisRate.errors) errors")
        print("RESULT target=redis connect_rate=\(redisRate.rate) p50_us=\(redisRate.p50) tls=\(options.tls) errors=\(redisRate.errors)")
        let ratio = redisRate.rate > 0 ? String(format: "%.2f", Double(rpcdRate.rate) / Double(redisRate.rate)) : "n/a"
        print("RATIO rpcd/redis = \(ratio) (\(rpcdRate.rate) / \(redisRate.rate) connections/s)")
        errors += redisRate.errors
    }
    exit(errors == 0 ? 0 : 1)
}

/// Connections per second, each with one request and its one reply line, for `seconds`.
private func connectRate(port: Int, request: String, seconds: Double) throws -> (rate: Int, p50: Int, errors: Int) {
    var histogram = Histogram()
    var done = 0
    var errors = 0
    var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    let bytes = Array(request.utf8)
    let stop = nowNanoseconds() + UInt64(seconds * 1e9)
    while nowNanoseconds() < stop {
        let began = nowNanoseconds()
        do {
            let fd = try openConnection(host: "127.0.0.1", port: port)
            defer { close(fd) }
            if options.tls {
                let session = try BenchTLS.shared.handshake(fd)
                _ = bytes.withUnsafeBytes { session.write($0) }
                try waitForLine(fd, buffer: &buffer, session: session)
            } else {
                _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                try waitForLine(fd, buffer: &buffer, session: nil)
            }
            done += 1
            histogram.record(Int((nowNanoseconds() - began) / 1000))
        } catch {
            errors += 1
        }
    }
    return (Int(Double(done) / seconds), histogram.percentile(0.5), errors)
}

/// Sends what TLS holds, then reads until a whole line arrived.
private func waitForLine(_ fd: Int32, buffer: inout [UInt8], session: TLSSession?) throws {
    if let session { _ = try session.pendingOutput.flush { bytes throws(Errno) in try Syscall.send(fd, bytes) } }
    let deadline = nowNanoseconds() + 5_000_000_000
    while nowNanoseconds() < deadline {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        _ = poll(&poller, 1, 100)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        if n == 0 { throw UsageError("closed before the reply") }
        if n < 0 {
            if errno == EAGAIN || errno == EINTR { continue }
            throw UsageError(String(cString: strerror(errno)))
        }
        guard let session else {
            if buffer[0..<n].contains(UInt8(ascii: "\n")) { return }
            continue
        }
        buffer.withUnsafeBytes { session.receive(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        while case .data(let count) = buffer.withUnsafeMutableBytes({ session.read(into: $0) }) {
            if buffer[0..<count].contains(UInt8(ascii: "\n")) { return }
        }
    }
    throw UsageError("no reply within 5 s")
}
