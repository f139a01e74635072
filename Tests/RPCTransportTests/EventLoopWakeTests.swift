import Dispatch
import Foundation
import Testing
@testable import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

/// A loop's wake: what another thread hands the loop (an fsync's replies) runs soon, once for
/// many wakes, and without waiting for every connection the loop found ready before it.
extension ConnectionTests {
    /// What ran on the loop, in order.
    final class Order: @unchecked Sendable {
        // @unchecked: `events` is guarded by `lock`.
        private let lock = NSLock()
        private var events: [String] = []

        func note(_ event: String) { lock.withLock { events.append(event) } }
        var all: [String] { lock.withLock { events } }
    }

    /// Notes each line it receives; with `wakes`, raises its loop's wake on each.
    final class Noting: ConnectionDelegate, @unchecked Sendable {
        // @unchecked: immutable.
        let name: String
        let order: Order
        let wakes: Bool

        init(_ name: String, _ order: Order, wakes: Bool = false) {
            self.name = name
            self.order = order
            self.wakes = wakes
        }

        func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
            order.note(name)
            if wakes { connection.loop.wake() }
        }
        func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {}
        func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {}
    }

    /// Polls `condition` for up to 5 s; whether it held.
    func within5s(_ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(5)
        while !condition() {
            guard Date() < deadline else { return false }
            usleep(1_000)
        }
        return true
    }

    @Test("1,000 wakes raised while the loop is busy run its handler once; a wake after that runs it again")
    func wakesWhileBusyRunTheHandlerOnce() throws {
        let loop = try EventLoop(label: "test")
        let order = Order()
        try loop.onWake { order.note("wake") }
        let busy = DispatchSemaphore(value: 0)
        loop.queue.async { busy.wait() }
        for _ in 0..<1000 { loop.wake() }
        busy.signal()
        try #require(within5s { order.all.count >= 1 }, "no handler run within 5 s")
        usleep(100_000)  // time for more runs, if any were coming
        loop.queue.sync {}
        // One pipe byte per wake, read 32 at a time, ran it ~32 times.
        #expect(order.all.count == 1, "\(order.all.count) runs")
        loop.wake()
        try #require(within5s { order.all.count == 2 }, "no second handler run within 5 s")
    }

    @Test("a wake raised while a turn serves 12 ready connections runs before the last of them, not after all")
    func aWakeRunsBetweenConnections() throws {
        let loop = try EventLoop(label: "test")
        let order = Order()
        try loop.onWake { order.note("wake") }
        var peers: [Int32] = []
        var connections: [Connection] = []
        defer {
            for peer in peers { close(peer) }
            loop.queue.sync { for connection in connections { connection.close(.finished) } }
        }
        for i in 0..<12 {
            let (server, peer) = try pair()
            // The connection holds its delegate until it closes.
            let connection = Connection(
                fd: server, id: UInt64(i + 1), peer: nil, loop: loop, limits: .init(), delegate: Noting("line \(i)", order, wakes: i == 0))
            connection.start()
            peers.append(peer)
            connections.append(connection)
        }
        loop.queue.sync {}  // every connection registered
        // All twelve ready, in this order, before the turn begins; the first line raises the wake,
        // whose pipe becomes ready after all of them.
        let busy = DispatchSemaphore(value: 0)
        loop.queue.async { busy.wait() }
        for peer in peers { write(peer, "x\n") }
        busy.signal()
        try #require(within5s { order.all.count == 13 }, "no 12 lines and a wake within 5 s: \(order.all)")
        let events = order.all
        #expect(events.first == "line 0", "\(events)")
        let wake = try #require(events.firstIndex(of: "wake"))
        #expect(wake < 12, "the wake ran after every ready connection: \(events)")
    }
}

extension ConnectionTests {
    /// Counts the lines it receives.
    final class Counting: ConnectionDelegate, @unchecked Sendable {
        // @unchecked: `lines` is touched only on the loop's queue, and read after `queue.sync`.
        var lines = 0
        func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) { lines += 1 }
        func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {}
        func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {}
    }

    /// Starts a connection on `loop` with `delegate`, writes `count` lines to it `gap` µs apart,
    /// runs `then` (which checks what the delegate saw) and closes the connection.
    func writeLines(
        _ count: Int, everyMicroseconds gap: UInt32, to loop: EventLoop, _ delegate: some ConnectionDelegate, then: () throws -> Void
    ) throws {
        let (server, peer) = try pair()
        let connection = Connection(fd: server, id: 1, peer: nil, loop: loop, limits: .init(), delegate: delegate)
        defer {
            close(peer)
            loop.queue.sync { connection.close(.finished) }
        }
        connection.start()
        loop.queue.sync {}
        for _ in 0..<count {
            write(peer, "x\n")
            usleep(gap)
        }
        try then()
    }

    @Test("a busy poll spaces its epoll_wait calls: at most one per 2 µs of polling, not one after another")
    func busyPollSpacesItsSystemCalls() throws {
        let loop = try EventLoop(label: "test")
        loop.lingers = true
        loop.busyPollNanoseconds = 1_000_000  // each linger polls up to 1 ms: every turn waits most of it
        let counting = Counting()
        // One line every 3 ms: each turn serves it, then polls for the next until its 1 ms is up.
        try writeLines(40, everyMicroseconds: 3_000, to: loop, counting) {
            try #require(within5s { loop.queue.sync { counting.lines } == 40 }, "40 lines not read within 5 s")
        }
        let (polls, polled) = loop.queue.sync { (loop.emptyPolls, loop.polledNanoseconds) }
        // Back to back, an empty epoll_wait takes well under 2 µs: ~1,000 polls a ms, not ~500.
        // Spaced, a linger polls at most once per 2 µs and once more at its end; a turn lingers
        // after its line, and again after each line a linger found: at most 80 lingers.
        try #require(polled > 5_000_000, "the loop polled for only \(polled) ns; expected ~1 ms after most of 40 lines")
        let most = Int(polled / EventLoop.pollSpacingNanoseconds) + 80
        #expect(polls <= most, "\(polls) empty polls in \(polled) ns of polling: more than one per \(EventLoop.pollSpacingNanoseconds) ns")
        #expect(polls > 40, "\(polls) empty polls in \(polled) ns of polling")
    }
}
