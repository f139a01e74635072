import Dispatch
import RPCSchema
import RPCTransport
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One request line ready to go: its id, its method, and its bytes (with the `\n`).
struct OutgoingCall: Sendable {
    var id: String
    var method: RPCMethod
    var bytes: [UInt8]
}

/// The client's connection and its calls in flight: a state machine owned by one serial queue.
///
/// Pending calls live in a dictionary by id (sourcekit-lsp `outstandingRequests`). An entry is
/// removed before its completion runs, and only the queue removes entries, so every call completes
/// exactly once: by its reply, its timeout, its cancellation, or the connection closing.
final class ClientCore: ConnectionDelegate, @unchecked Sendable {
    // @unchecked: every `var` below is touched only on `loop.queue` (dispatchPrecondition-checked).

    enum State {
        /// Not connected: never yet, or the connection dropped (`reason` says how).
        case idle(reason: String)
        case connecting
        case connected(Connection)
        /// `close()` was called; nothing is sent any more.
        case closed
    }

    private struct Pending {
        let method: RPCMethod
        let complete: (Result<Request, RPCClientError>) -> Void
        var timer: DispatchWorkItem?
    }

    let address: SocketAddress
    let options: RPCClientOptions
    let handlers: RequestHandlers
    private let loop: EventLoop
    private var queue: DispatchQueue { loop.queue }

    private var state: State = .idle(reason: "not connected yet")
    /// By id as exact UTF-8 bytes: a reply matches its call only byte for byte.
    private var pending: [ExactID: Pending] = [:]
    /// Lines waiting for a connection (while reconnecting), with the ids they carry.
    private var outbox: [(ids: [String], bytes: [UInt8])] = []
    private var flushScheduled = false
    private var connectionCount: UInt64 = 0
    private var authCount = 0

    init(address: SocketAddress, options: RPCClientOptions) throws(Errno) {
        self.address = address
        self.options = options
        self.handlers = RequestHandlers()
        self.loop = try EventLoop(label: "rpc.client", readBufferBytes: 64 * 1024)
    }

    // MARK: - Connecting

    /// The first connect: one try within `connectTimeout`.
    func connect(completion: @escaping @Sendable (Result<Void, RPCClientError>) -> Void) {
        queue.async { [self] in
            state = .connecting
            Connector.connect(to: address, queue: queue, timeout: .nanoseconds(options.connectTimeout.nanoseconds)) { [self] result in
                switch result {
                case .success(let fd):
                    attach(fd)
                    completion(.success(()))
                case .failure(let errno):
                    let reason = Self.describe(errno)
                    if case .connecting = state { state = .idle(reason: reason) }
                    completion(.failure(.connectFailed(address: "\(address)", reason: reason)))
                }
            }
        }
    }

    private func reconnect(attempt: Int, policy: ReconnectPolicy) {
        dispatchPrecondition(condition: .onQueue(queue))
        state = .connecting
        Connector.connect(to: address, queue: queue, timeout: .nanoseconds(options.connectTimeout.nanoseconds)) { [self] result in
            switch result {
            case .success(let fd):
                attach(fd)
            case .failure(let errno):
                guard case .connecting = state else { return }
                let reason = Self.describe(errno)
                if attempt + 1 < policy.maxAttempts {
                    let delay = policy.delay(beforeAttempt: attempt + 1)
                    queue.asyncAfter(deadline: .now() + .nanoseconds(delay.nanoseconds)) { [self] in
                        guard case .connecting = state else { return }
                        reconnect(attempt: attempt + 1, policy: policy)
                    }
                } else {
                    let why = "\(reason) (after \(policy.maxAttempts) tries)"
                    state = .idle(reason: why)
                    outbox = []
                    failAll(.connectFailed(address: "\(address)", reason: why))
                }
            }
        }
    }

    private func attach(_ fd: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .connecting = state else {
            Syscall.close(fd)  // closed while connecting
            return
        }
        connectionCount += 1
        let limits = Connection.Limits(maxFrameBytes: options.maxFrameBytes, maxOutputBytes: options.maxOutputBytes)
        // A reset after the daemon's last words (an `overloaded` error, say) still delivers them.
        let connection = Connection(
            fd: fd, id: connectionCount, peer: address, loop: loop, limits: limits, onReset: .deliver, delegate: self)
        state = .connected(connection)
        // start() enqueues the registration; the flush below is enqueued after it.
        connection.start()
        authenticate(on: connection)
        for chunk in outbox where chunk.ids.contains(where: { pending[ExactID($0)] != nil }) {
            connection.send(chunk.bytes)
        }
        outbox = []
        scheduleFlush()
    }

    /// Sends `system.auth` first on a new connection when the options carry credentials. Its
    /// failure is not a call's: each call made meanwhile gets the daemon's `unauthorized` answer,
    /// which says what to do.
    private func authenticate(on connection: Connection) {
        guard case .token(let name, let secret)? = options.credentials else { return }
        authCount += 1
        let id = "rpc.auth.\(authCount)"
        var line: [UInt8] = []
        let param = JSONValue.object(JSONObject([("name", .string(name)), ("token", .string(secret))]))
        RequestCodec.encode(id: id, method: SystemAuth.method, param: param, form: .canonical, into: &line)
        pending[ExactID(id)] = Pending(method: SystemAuth.method, complete: { _ in })
        connection.send(line)
    }

    // MARK: - Calls

    /// Sends `calls` in one write; `completion` gets one result per call, in order, once all are in.
    func submit(_ calls: [OutgoingCall], timeout: Duration?, completion: @escaping @Sendable ([Result<Request, RPCClientError>]) -> Void) {
        queue.async { [self] in
            let collector = Collector(count: calls.count, completion: completion)
            var ids: [String] = []
            var bytes: [UInt8] = []
            for (index, call) in calls.enumerated() {
                if let failure = refusal(call) {
                    collector.set(index, .failure(failure))
                    continue
                }
                var entry = Pending(method: call.method, complete: { collector.set(index, $0) })
                if let timeout {
                    // Weak: a cancelled item stays queued until its deadline; it must not keep the client alive.
                    let item = DispatchWorkItem { [weak self] in
                        self?.complete(call.id, .failure(.timedOut(method: call.method, id: call.id, after: timeout)))
                    }
                    queue.asyncAfter(deadline: .now() + .nanoseconds(timeout.nanoseconds), execute: item)
                    entry.timer = item
                }
                pending[ExactID(call.id)] = entry
                ids.append(call.id)
                bytes.append(contentsOf: call.bytes)
            }
            guard !ids.isEmpty else { return }
            switch state {
            case .connected(let connection):
                connection.send(bytes)
                scheduleFlush()
            case .connecting:
                outbox.append((ids, bytes))
            case .idle:
                guard let policy = options.reconnect else { return }  // refusal() failed them already
                outbox.append((ids, bytes))
                reconnect(attempt: 0, policy: policy)
            case .closed:
                break  // refusal() failed them already
            }
        }
    }

    /// Why a call cannot be accepted now, if it cannot.
    private func refusal(_ call: OutgoingCall) -> RPCClientError? {
        switch state {
        case .closed:
            return .connectionClosed(address: "\(address)", method: call.method, id: call.id, reason: "the client was closed")
        case .idle(let reason) where options.reconnect == nil:
            return .connectionClosed(address: "\(address)", method: call.method, id: call.id, reason: reason)
        default:
            if pending[ExactID(call.id)] != nil {
                return .invalidCall(method: call.method, reason: "id \"\(call.id)\" is already in flight; the id generator must not repeat ids")
            }
            return nil
        }
    }

    /// Fails the calls with these ids (task cancellation). Call from anywhere.
    func cancel(_ calls: [(id: String, method: RPCMethod)]) {
        queue.async { [self] in
            for call in calls { complete(call.id, .failure(.cancelled(method: call.method, id: call.id))) }
        }
    }

    private func complete(_ id: String, _ result: Result<Request, RPCClientError>) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let entry = pending.removeValue(forKey: ExactID(id)) else { return }
        entry.timer?.cancel()
        entry.complete(result)
    }

    private func failAll(_ error: RPCClientError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let all = pending
        pending = [:]
        for (key, entry) in all {
            let id = key.string
            entry.timer?.cancel()
            switch error {
            case .connectionClosed(let address, _, _, let reason):
                entry.complete(.failure(.connectionClosed(address: address, method: entry.method, id: id, reason: reason)))
            default:
                entry.complete(.failure(error))
            }
        }
    }

    /// One flush per turn of the queue, after every call submitted meanwhile: pipelined calls
    /// leave in as few writes as the socket takes.
    private func scheduleFlush() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !flushScheduled else { return }
        flushScheduled = true
        queue.async { [self] in
            flushScheduled = false
            if case .connected(let connection) = state { connection.flush() }
        }
    }

    // MARK: - Closing

    /// Fails every pending call and closes the connection. Idempotent; call from anywhere.
    func close() {
        queue.async { [self] in
            let previous = state
            state = .closed
            outbox = []
            failAll(.connectionClosed(address: "\(address)", method: nil, id: nil, reason: "the client was closed"))
            if case .connected(let connection) = previous {
                connection.close(.closedByServer("closed by the client"))
            }
        }
    }

    // MARK: - ConnectionDelegate (on the queue)

    func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
        switch RequestCodec.decode(line) {
        case .counterRequest(let reply):
            guard let entry = pending[ExactID(reply.id)] else {
                handlers.deliver(reply)  // not ours (or too late): a handler may want it
                return
            }
            if reply.method == .error || reply.method == entry.method.result {
                complete(reply.id, .success(reply))
            } else {
                complete(reply.id, .failure(.badReply(method: entry.method, id: reply.id, reason: "answered by \(reply.method), expected \(entry.method.result) or error.error")))
            }
        case .request(let request):
            handlers.deliver(request)
        case .invalid:
            break  // not a request; never answered
        }
    }

    func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {
        // Dropped: its id cannot be known; the call it answered fails by its timeout.
    }

    func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {
        guard case .connected(let current) = state, current === connection else { return }
        let why: String
        switch reason {
        case .finished: why = "the daemon closed the connection"
        case .error(let message): why = message
        case .outputOverflow(let bytes): why = "the daemon stopped reading (\(bytes) bytes of requests pending)"
        case .closedByServer(let message), .shed(let message): why = message
        }
        state = .idle(reason: why)
        failAll(.connectionClosed(address: "\(address)", method: nil, id: nil, reason: why))
    }

    static func describe(_ error: Errno) -> String {
        error.code == ETIMEDOUT ? "connect timed out" : "\(error)"
    }
}

/// Collects the results of one submission; completes once, when the last one is in. Queue-owned.
private final class Collector: @unchecked Sendable {
    // @unchecked: used only on the client's queue (through `ClientCore`).
    private var results: [Result<Request, RPCClientError>?]
    private var remaining: Int
    private var completion: (@Sendable ([Result<Request, RPCClientError>]) -> Void)?

    init(count: Int, completion: @escaping @Sendable ([Result<Request, RPCClientError>]) -> Void) {
        results = Array(repeating: nil, count: count)
        remaining = count
        self.completion = completion
        if count == 0 { finish() }
    }

    func set(_ index: Int, _ result: Result<Request, RPCClientError>) {
        guard results[index] == nil else { return }  // a call completes once; a second result is ignored
        results[index] = result
        remaining -= 1
        if remaining == 0 { finish() }
    }

    private func finish() {
        guard let completion else { return }
        self.completion = nil
        completion(results.map { $0 ?? .failure(.invalidCall(method: .error, reason: "no result (client bug)")) })
    }
}
