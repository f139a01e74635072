import Foundation
import Testing

@Suite("frame limit")
struct FrameLimitTests {
    static let limit = 1 << 20  // default max_frame_bytes
    static let listEmpty = #"{"id":"ok","method":"user.listUsers"}"#
    static let listEmptyReply = #"{"id":"ok","method":"user.listUsersResult","param":{"users":[]}}"#

    /// A valid getUser request padded with spaces inside the JSON to exactly `length` bytes.
    static func paddedRequest(id: String, length: Int) -> [UInt8] {
        let head = Array(#"{"id":"\#(id)","method":"user.getUser","param":{"userId":"nobody"}"#.utf8)
        return head + [UInt8](repeating: 0x20, count: length - head.count - 1) + [0x7D]
    }

    /// Sends `count` bytes of `byte` in 64 KiB writes.
    static func sendFiller(_ c: LineClient, count: Int, byte: UInt8 = 0x78) throws {
        let chunk = [UInt8](repeating: byte, count: 1 << 16)
        var left = count
        while left > 0 {
            let n = min(left, chunk.count)
            try c.sendBytes(n == chunk.count ? chunk : Array(chunk[..<n]))
            left -= n
        }
    }

    @Test("a 2 MiB line gets exactly one frameTooLarge with id \"\", the next request is served, RSS stays flat")
    func twoMiBLine() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Self.listEmpty) == Self.listEmptyReply)
            let rssBefore = try #require(daemon.rssKiB())
            let peakBefore = try #require(daemon.peakRSSKiB())

            try Self.sendFiller(c, count: 2 << 20)
            usleep(200_000)  // no newline for a while
            try c.send("\n" + Self.listEmpty + "\n")
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            #expect(try c.readLine() == Self.listEmptyReply, "exactly one error, then the next request is served")

            let rssAfter = try #require(daemon.rssKiB())
            let peakAfter = try #require(daemon.peakRSSKiB())
            #expect(rssAfter - rssBefore <= 8 * 1024, "RSS grew \(rssAfter - rssBefore) KiB")
            #expect(peakAfter - peakBefore <= 8 * 1024, "peak RSS grew \(peakAfter - peakBefore) KiB")
            #expect(c.isSilent(for: 0.2))
        }
    }

    @Test("a 24 MiB line without newline is not buffered: peak RSS grows by less than 8 MiB")
    func unboundedLineIsNotBuffered() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Self.listEmpty) == Self.listEmptyReply)
            let peakBefore = try #require(daemon.peakRSSKiB())
            try Self.sendFiller(c, count: 24 << 20, byte: 0x7B)
            // Let the daemon consume what is still in the socket buffers, still without a newline.
            usleep(500_000)
            let peakDuring = try #require(daemon.peakRSSKiB())
            #expect(peakDuring - peakBefore <= 8 * 1024, "peak RSS grew \(peakDuring - peakBefore) KiB while reading a 24 MiB line")
            try c.send("\r\n" + Self.listEmpty + "\r\n")
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            #expect(try c.readLine() == Self.listEmptyReply)
        }
    }

    @Test("the 1 MiB limit is exact: limit-1, limit and limit+CRLF are served, limit+1 is frameTooLarge")
    func exactLimit() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            // limit - 1 and limit: a real request, answered normally.
            try c.sendBytes(Self.paddedRequest(id: "m1", length: Self.limit - 1) + [10])
            expectError(try c.readLine(), code: "notFound", id: "m1")
            try c.sendBytes(Self.paddedRequest(id: "at", length: Self.limit) + [10])
            expectError(try c.readLine(), code: "notFound", id: "at")
            // limit followed by CRLF: the \r does not count.
            try c.sendBytes(Self.paddedRequest(id: "crlf", length: Self.limit) + [13, 10])
            expectError(try c.readLine(), code: "notFound", id: "crlf")
            // Garbage of exactly the limit is parsed (parseError), not frameTooLarge.
            try c.sendBytes([UInt8](repeating: 0x78, count: Self.limit) + [10])
            expectError(try c.readLine(), code: "parseError", id: "")
            // limit + 1: frameTooLarge, even for otherwise valid JSON; the id is not recovered.
            try c.sendBytes(Self.paddedRequest(id: "p1", length: Self.limit + 1) + [10])
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            try c.sendBytes([UInt8](repeating: 0x78, count: Self.limit + 1) + [13, 10])
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            // Oversized line and the next request in one write.
            try c.sendBytes([UInt8](repeating: 0x78, count: Self.limit + 10) + [10] + Array((Self.listEmpty + "\n").utf8))
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            #expect(try c.readLine() == Self.listEmptyReply)
            #expect(c.isSilent(for: 0.2), "one error per oversized line")
        }
    }

    @Test("--max-frame-bytes N: lines of N-1 and N bytes (LF or CRLF) are served, N+1 is frameTooLarge")
    func configuredLimit() throws {
        let n = 200
        try withDaemon(extraArguments: ["--max-frame-bytes", "\(n)"]) { daemon in
            let c = try LineClient(port: daemon.port)
            try c.sendBytes(Self.paddedRequest(id: "a", length: n - 1) + [10])
            expectError(try c.readLine(), code: "notFound", id: "a")
            try c.sendBytes(Self.paddedRequest(id: "b", length: n) + [10])
            expectError(try c.readLine(), code: "notFound", id: "b")
            try c.sendBytes(Self.paddedRequest(id: "c", length: n) + [13, 10])
            expectError(try c.readLine(), code: "notFound", id: "c")
            try c.sendBytes(Self.paddedRequest(id: "d", length: n + 1) + [10])
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            try c.sendBytes(Self.paddedRequest(id: "e", length: n + 1) + [13, 10])
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            // Oversized line dribbled in one byte at a time, then a good request.
            try c.sendOneByteAtATime(String(repeating: "z", count: n + 50) + "\n" + Self.listEmpty + "\n")
            expectError(try c.readLine(), code: "frameTooLarge", id: "")
            #expect(try c.readLine() == Self.listEmptyReply)
            #expect(c.isSilent(for: 0.2), "one error per oversized line")
        }
    }
}
