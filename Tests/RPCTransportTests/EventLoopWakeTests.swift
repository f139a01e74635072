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

    /// Polls `condition` for up to 5 s.
    func waitFor(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(5)
        while !condition() {
            guard Date() < deadline else { throw TransportTestError("no \(what) within 5 s") }
            usleep(1_000)
        }
    }

    struct TransportTestError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
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
        try waitFor("handler run") { order.all.count >= 1 }
        usleep(100_000)  // time for more runs, if any were coming
        loop.queue.sync {}
        // One pipe byte per wake, read 32 at a time, ran it ~32 times.
        #expect(order.all.count == 1, "\(order.all.count) runs")
        loop.wake()
        try waitFor("second handler run") { order.all.count == 2 }
    }

    @Test("a wake raised while a turn serves 12 ready connections runs before the last of them, not after all")
    func aWakeRunsBetweenConnections() throws {
        let loop = try EventLoop(label: "test")
        let order = Order()
        try loop.onWake { order.note("wake") }
        var peers: [Int32] = []
        var connections: [Connection] = []
        var delegates: [Noting] = []
        defer {
            for peer in peers { close(peer) }
            loop.queue.sync { for connection in connections { connection.close(.finished) } }
        }
        for i in 0..<12 {
            let (server, peer) = try pair()
            let delegate = Noting("line \(i)", order, wakes: i == 0)
            let connection = Connection(fd: server, id: UInt64(i + 1), peer: nil, loop: loop, limits: .init(), delegate: delegate)
            connection.start()
            peers.append(peer)
            connections.append(connection)
            delegates.append(delegate)
        }
        loop.queue.sync {}  // every connection registered
        // All twelve ready, in this order, before the turn begins; the first line raises the wake,
        // whose pipe becomes ready after all of them.
        let busy = DispatchSemaphore(value: 0)
        loop.queue.async { busy.wait() }
        for peer in peers { write(peer, "x\n") }
        busy.signal()
        try waitFor("12 lines and a wake") { order.all.count == 13 }
        let events = order.all
        #expect(events.first == "line 0", "\(events)")
        let wake = try #require(events.firstIndex(of: "wake"))
        #expect(wake < 12, "the wake ran after every ready connection: \(events)")
        _ = delegates
    }
}
