import Dispatch
import Foundation
import Testing
@testable import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

/// The transport alone, over a socketpair: no daemon, no entities.
@Suite struct ConnectionTests {
    /// Records what the connection reports; echoes each line back upper-cased.
    class Echo: ConnectionDelegate, @unchecked Sendable {
        // @unchecked: touched on the connection's queue, read after `closed` is signalled.
        var lines: [String] = []
        /// The lines and, as "|", each end of a read's lines.
        var events: [String] = []
        var oversize: [Int] = []
        var reason: Connection.CloseReason?
        let closed = DispatchSemaphore(value: 0)

        func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
            let text = String(decoding: line, as: UTF8.self)
            lines.append(text)
            events.append(text)
            connection.send(Array((text.uppercased() + "\n").utf8))
        }
        func connection(_ connection: Connection, didReceiveOversizeLine length: Int) { oversize.append(length) }
        func connectionDidServeRead(_ connection: Connection) { events.append("|") }
        func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {
            self.reason = reason
            closed.signal()
        }
    }

    /// A connected pair: the connection's end (non-blocking) and the test's end (blocking, 5 s timeouts).
    func pair() throws -> (server: Int32, peer: Int32) {
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        try Syscall.setNonBlocking(fds[0])
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fds[1], SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fds[1], SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return (fds[0], fds[1])
    }

    func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Everything the peer can read until EOF (or the 5 s timeout).
    func readAll(_ fd: Int32) -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        return String(decoding: out, as: UTF8.self)
    }

    @Test func linesInRepliesOutThenHalfCloseFinishes() throws {
        let (server, peer) = try pair()
        defer { close(peer) }
        let echo = Echo()
        let connection = Connection(
            fd: server, id: 1, peer: nil, loop: try EventLoop(label: "test"), limits: .init(), delegate: echo)
        connection.start()
        write(peer, "one\r\ntw")
        write(peer, "o\n\nthree\n")
        shutdown(peer, Int32(SHUT_WR))
        #expect(readAll(peer) == "ONE\nTWO\nTHREE\n")
        #expect(echo.closed.wait(timeout: .now() + 5) == .success)
        #expect(echo.lines == ["one", "two", "three"])
        #expect(echo.reason == .finished)
    }

    /// A loop names its connections by slot and generation: once a connection leaves, its token
    /// names no one, even after a new connection takes the same slot (an event already queued for
    /// the old one must not reach the new one).
    @Test func aTokenOfAConnectionThatLeftNamesNoOne() throws {
        let loop = try EventLoop(label: "test")
        let (a, peerA) = try pair()
        let (b, peerB) = try pair()
        defer {
            close(peerA)
            close(peerB)
            close(a)
            close(b)
        }
        let echo = Echo()
        let first = Connection(fd: a, id: 1, peer: nil, loop: loop, limits: .init(), delegate: echo)
        let second = Connection(fd: b, id: 2, peer: nil, loop: loop, limits: .init(), delegate: echo)
        loop.queue.sync {
            guard let old = try? loop.register(a, interest: .read, first) else {
                Issue.record("register a")
                return
            }
            #expect(loop.connection(old) === first)
            loop.deregister(a, token: old)
            #expect(loop.connection(old) == nil)
            guard let new = try? loop.register(b, interest: .read, second) else {
                Issue.record("register b")
                return
            }
            #expect(new & 0xFFFF_FFFF == old & 0xFFFF_FFFF, "the freed slot is taken again")
            #expect(new != old)
            #expect(loop.connection(old) == nil, "the old token names no one")
            #expect(loop.connection(new) === second)
            loop.deregister(a, token: old)  // a second goodbye for the old token changes nothing
            #expect(loop.connection(new) === second)
            #expect(loop.connection(0) == nil && loop.connection(UInt64.max) == nil)
            loop.deregister(b, token: new)
        }
    }

    /// A follower applies the lines of a read together: it is told when a read's lines are all served.
    @Test func theEndOfEachReadFollowsItsLines() throws {
        let (server, peer) = try pair()
        defer { close(peer) }
        let echo = Echo()
        let connection = Connection(
            fd: server, id: 4, peer: nil, loop: try EventLoop(label: "test"), limits: .init(), delegate: echo)
        connection.start()
        write(peer, "a\nb\n")
        var replies = [UInt8](repeating: 0, count: 4)
        #expect(replies.withUnsafeMutableBytes { recv(peer, $0.baseAddress, 4, Int32(MSG_WAITALL)) } == 4)
        write(peer, "c\n")
        shutdown(peer, Int32(SHUT_WR))
        #expect(readAll(peer) == "C\n")
        #expect(echo.closed.wait(timeout: .now() + 5) == .success)
        #expect(echo.events == ["a", "b", "|", "c", "|"])
    }

    @Test func oversizeLineIsReportedAndTheNextServed() throws {
        let (server, peer) = try pair()
        defer { close(peer) }
        let echo = Echo()
        let connection = Connection(
            fd: server, id: 2, peer: nil, loop: try EventLoop(label: "test"),
            limits: .init(maxFrameBytes: 8, maxOutputBytes: 1 << 20), delegate: echo)
        connection.start()
        write(peer, String(repeating: "x", count: 100) + "\nok\n")
        shutdown(peer, Int32(SHUT_WR))
        #expect(readAll(peer) == "OK\n")
        #expect(echo.closed.wait(timeout: .now() + 5) == .success)
        #expect(echo.oversize.count == 1)
        #expect(echo.lines == ["ok"])
    }

    /// What a started connection sends when `body` runs on its loop and the connection then
    /// finishes; waits for the close.
    func sent(_ body: @escaping @Sendable (Connection) -> Void) throws -> String {
        let (server, peer) = try pair()
        defer { close(peer) }
        let echo = Echo()
        let loop = try EventLoop(label: "test")
        let connection = Connection(fd: server, id: 3, peer: nil, loop: loop, limits: .init(), delegate: echo)
        connection.start()
        loop.queue.sync {
            body(connection)
            connection.finish()
        }
        shutdown(peer, Int32(SHUT_WR))
        let text = readAll(peer)
        #expect(echo.closed.wait(timeout: .now() + 5) == .success)
        return text
    }

    @Test func repliesLeaveInReservedOrder() throws {
        let text = try sent { connection in
            let slot = connection.reserve()
            connection.send(Array("second\n".utf8))
            connection.flush()
            connection.fill(slot, with: Array("first\n".utf8))
        }
        #expect(text == "first\nsecond\n")
    }

    /// Slots filled out of order from parts of one buffer (replies released by one fsync share
    /// it): the first held slot goes straight out, later ones wait for it, copied.
    @Test func slotsFilledOutOfOrderFromOneBufferLeaveInReservedOrder() throws {
        let text = try sent { connection in
            let slots = (0..<3).map { _ in connection.reserve() }
            connection.send(Array("fourth\n".utf8))
            let shared = Array("first\nsecond\nthird\n".utf8)
            connection.fill(slots[2], with: shared[13..<19], flush: false)
            connection.fill(slots[1], with: shared[6..<13])
            connection.fill(slots[0], with: shared[0..<6])
        }
        #expect(text == "first\nsecond\nthird\nfourth\n")
    }

    /// An owner that keeps its connection, as a client keeps its until it reconnects.
    final class Keeper: Echo, @unchecked Sendable {
        var connection: Connection?
    }

    /// The connection holds its delegate strongly (a weak reference would give the delegate a side
    /// table and slow every retain of it), so it must let go at close, or an owner that keeps its
    /// connection and the connection keep each other forever: the delegate serves while only the
    /// connection holds it, and is freed once the connection closes.
    @Test func delegateIsHeldUntilCloseThenReleased() throws {
        let (server, peer) = try pair()
        defer { close(peer) }
        let loop = try EventLoop(label: "test")
        weak var released: Keeper?
        let closed: DispatchSemaphore
        do {
            let keeper = Keeper()
            released = keeper
            closed = keeper.closed
            keeper.connection = Connection(fd: server, id: 5, peer: nil, loop: loop, limits: .init(), delegate: keeper)
            keeper.connection?.start()
        }
        write(peer, "still here\n")
        var reply = [UInt8](repeating: 0, count: 64)
        let n = reply.withUnsafeMutableBytes { read(peer, $0.baseAddress, $0.count) }
        #expect(n > 0 && String(decoding: reply[0..<max(n, 0)], as: UTF8.self) == "STILL HERE\n")
        #expect(released != nil)
        shutdown(peer, Int32(SHUT_WR))
        #expect(closed.wait(timeout: .now() + 5) == .success)
        loop.queue.sync {}  // `close` lets go of the delegate right after telling it
        #expect(released == nil)
    }

    @Test func peerThatDoesNotReadIsDroppedPastTheOutputCap() throws {
        let (server, peer) = try pair()
        defer { close(peer) }
        let echo = Echo()
        let connection = Connection(
            fd: server, id: 4, peer: nil, loop: try EventLoop(label: "test"),
            limits: .init(maxFrameBytes: 1 << 20, maxOutputBytes: 64 << 10), delegate: echo)
        connection.start()
        // Requests whose replies the peer never reads: the socket buffer fills, then the cap.
        let line = String(repeating: "y", count: 1000) + "\n"
        // (Once the connection is closed these fail at once with EPIPE; a write never blocks past 5 s.)
        for _ in 0..<2000 { write(peer, line) }
        #expect(echo.closed.wait(timeout: .now() + 5) == .success)
        if case .outputOverflow = echo.reason {} else { Issue.record("closed for \(String(describing: echo.reason))") }
    }
}
