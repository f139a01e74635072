import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Wires the transport to the dispatcher: accepts connections, feeds their lines to the
/// dispatcher, sends the counter-requests back in order, and shuts down in stages.
final class Server: ConnectionDelegate, @unchecked Sendable {
    // @unchecked: `connections`, `nextID` and `stopping` are guarded by `lock`; the rest is immutable.
    let dispatcher: Dispatcher
    let log: Logger
    let limits: Connection.Limits
    private let loops: EventLoopGroup
    private let acceptQueue = DispatchQueue(label: "rpcd.accept")
    private let durability: (any MutationLog)?

    private let lock = NSLock()
    private var connections: [UInt64: Connection] = [:]
    private var nextID: UInt64 = 0
    private var stopping = false
    private var listeners: [Listener] = []
    private var onIdleAfterStop: (@Sendable () -> Void)?

    /// Per-connection state kept in `Connection.context`.
    private final class SessionBox {
        var session = Dispatcher.Session()
        var scratch: [UInt8] = []
    }

    init(dispatcher: Dispatcher, durability: (any MutationLog)?, limits: Connection.Limits, loopCount: Int, log: Logger) {
        self.dispatcher = dispatcher
        self.durability = durability
        self.limits = limits
        self.loops = EventLoopGroup(count: loopCount)
        self.log = log
    }

    /// Binds every address (in order) and starts accepting. Logs `listening on HOST:PORT` for each.
    func listen(on addresses: [SocketAddress]) throws(Errno) {
        for address in addresses {
            let listener = try Listener(
                binding: address, queue: acceptQueue,
                onAccept: { [unowned self] fd, peer in self.accepted(fd, peer: peer) },
                onError: { [log] message in log.warning(message) })
            lock.withLock { listeners.append(listener) }
            log.info("listening on \(listener.address)")
            listener.start()
        }
    }

    private func accepted(_ fd: Int32, peer: SocketAddress?) {
        let connection: Connection? = lock.withLock {
            guard !stopping else { return nil }
            nextID += 1
            let connection = Connection(
                fd: fd, id: nextID, peer: peer, loop: loops.nextLoop(), limits: limits, delegate: self)
            connection.context = SessionBox()
            connections[nextID] = connection
            return connection
        }
        guard let connection else {
            Syscall.close(fd)
            return
        }
        log.debug("connection \(connection.id) from \(peer.map { "\($0)" } ?? "?") opened")
        connection.start()
    }

    // MARK: - ConnectionDelegate (on the connection's loop queue)

    func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
        guard let box = connection.context as? SessionBox else { return }
        box.scratch.removeAll(keepingCapacity: true)
        let disposition = dispatcher.handle(line: line, session: &box.session, into: &box.scratch)
        switch disposition {
        case .none:
            break
        case .reply:
            connection.send(box.scratch)
        case .replyAfter(let ticket, let id):
            let slot = connection.reserve()
            let reply = box.scratch
            let form = box.session.form ?? .canonical
            durability?.whenDurable(ticket) { failure in
                connection.queue.async {
                    guard let failure else { return connection.fill(slot, with: reply) }
                    var error: [UInt8] = []
                    RequestCodec.encodeError(
                        id: id, .internal("the change was applied but not saved: \(failure); it may be lost on restart"),
                        form: form, into: &error)
                    connection.fill(slot, with: error)
                }
            }
        }
    }

    func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {
        guard let box = connection.context as? SessionBox else { return }
        let limit = connection.limits.maxFrameBytes
        connection.send { out in
            RequestCodec.encodeError(
                id: "", .frameTooLarge("line of \(length)+ bytes exceeds the \(limit)-byte limit; it was discarded, send smaller requests"),
                form: box.session.form ?? .canonical, into: &out)
        }
        log.warning("connection \(connection.id): discarded a line over \(limit) bytes")
    }

    func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {
        switch reason {
        case .finished, .closedByServer: log.debug("connection \(connection.id) closed: \(reason)")
        case .error: log.debug("connection \(connection.id) closed: \(reason)")
        case .outputOverflow: log.warning("connection \(connection.id) dropped: \(reason)")
        }
        let idle: (@Sendable () -> Void)? = lock.withLock {
            connections[connection.id] = nil
            return stopping && connections.isEmpty ? onIdleAfterStop : nil
        }
        idle?()
    }

    // MARK: - Shutdown

    /// Stops accepting, lets every connection send what it owes and close; calls `done` when all
    /// are closed or after `grace`, whichever comes first.
    func stop(grace: DispatchTimeInterval, done: @escaping @Sendable () -> Void) {
        let once = Once(done)
        let (listeners, open): ([Listener], [Connection]) = lock.withLock {
            stopping = true
            onIdleAfterStop = { once.run() }
            return (self.listeners, Array(connections.values))
        }
        for listener in listeners { listener.close() }
        if open.isEmpty { once.run() }
        for connection in open { connection.finish() }
        DispatchQueue.global().asyncAfter(deadline: .now() + grace) { [self] in
            let stuck = lock.withLock { Array(connections.values) }
            if !stuck.isEmpty { log.warning("closing \(stuck.count) connections that did not finish in time") }
            for connection in stuck {
                connection.queue.async { connection.close(.closedByServer("shutdown")) }
            }
            once.run()
        }
    }

    var connectionCount: Int { lock.withLock { connections.count } }
}

/// Runs a closure at most once, from any thread.
final class Once: @unchecked Sendable {
    // @unchecked: `body` is taken under `lock`.
    private let lock = NSLock()
    private var body: (@Sendable () -> Void)?
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    func run() {
        let body: (@Sendable () -> Void)? = lock.withLock {
            defer { self.body = nil }
            return self.body
        }
        body?()
    }
}
