import Dispatch
import RPCSchema
internal import RPCTransport
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One request line ready to go: its id, its method, its idempotency key, and its bytes (with the `\n`).
struct OutgoingCall: Sendable {
    var id: String
    var method: RPCMethod
    var key: String?
    /// Safe to send again after it was sent: a read, or a call with a key.
    var resendable: Bool
    var bytes: [UInt8]
}

/// The client's connection and its calls in flight: a state machine owned by one serial queue.
///
/// Pending calls live in `PendingCalls` by id. An entry is removed before its completion runs,
/// and only the queue removes entries, so every call completes exactly once: by its reply, its
/// timeout, its cancellation, the client closing, or its connection being lost for good.
///
/// A call is handed to the connection when there is one; else it waits, and every waiting call is
/// sent on the next connection, in the order the calls were made. When a connection is lost, the
/// calls handed to it go back to waiting (never written; or resendable under a `RetryPolicy`) or
/// fail (`PendingCalls.connectionLost`). While calls wait and a reconnect policy allows, the client
/// connects again.
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

    let address: SocketAddress
    let options: RPCClientOptions
    let handlers: RequestHandlers
    private let loop: EventLoop
    private var queue: DispatchQueue { loop.queue }

    private var state: State = .idle(reason: "not connected yet")
    private var pending = PendingCalls()
    private var flushScheduled = false
    /// Numbers connections; `PendingCall.handedTo` names one by it.
    private var connectionCount: UInt64 = 0
    /// Bytes handed to the current connection so far: where the next line will end.
    private var handedBytes: UInt64 = 0
    private var authCount = 0
    /// The daemon's answer to this connection's failed `system.auth` (nil: none failed): the
    /// `unauthorized` replies that follow it are that failure's, and say so.
    private var authFailure: String?
    /// The first `connect`'s completion, until it connected or gave up.
    private var connectWaiter: (@Sendable (Result<Void, RPCClientError>) -> Void)?
    /// When the first `connect` gives up (`connectTimeout` after it began).
    private var connectDeadline: DispatchTime?
    /// Takes the requests the daemon sends, in order, on the queue (a change feed); `.pause` stops
    /// reading until `resumeFeed()`.
    private var feed: (@Sendable (Request, UnsafeRawBufferPointer) -> FeedFlow)?
    /// Offered each line first while a feed is set: the flow when it took the line, undecoded;
    /// nil sends the line the usual way.
    private var feedLines: (@Sendable (UnsafeRawBufferPointer) -> FeedFlow?)?
    /// Told, on the queue, when the lines of a read were all handed to the feed.
    private var feedRead: (@Sendable () -> Void)?
    /// Told why, each time a connection is lost.
    private var onLost: (@Sendable (String) -> Void)?

    /// TLS to the daemon, or nil for plain TCP.
    private let tls: TLSContext?

    init(address: SocketAddress, options: RPCClientOptions, tls: TLSContext? = nil) throws(Errno) {
        self.address = address
        self.options = options
        self.tls = tls
        self.handlers = RequestHandlers()
        self.loop = try EventLoop(label: "rpc.client", readBufferBytes: 64 * 1024, ownThread: options.readsOnOwnThread)
    }

    // MARK: - Connecting

    /// The first connect: one try within `connectTimeout`, or, with a reconnect policy, tries as it
    /// allows until `connectTimeout` has passed.
    func connect(completion: @escaping @Sendable (Result<Void, RPCClientError>) -> Void) {
        queue.async { [self] in
            guard case .idle = state else {
                return completion(.failure(.connectFailed(address: "\(address)", reason: "connect was called twice (client bug)")))
            }
            connectWaiter = completion
            connectDeadline = .now() + .nanoseconds(options.connectTimeout.nanoseconds)
            tryConnect(attempt: 0)
        }
    }

    /// Gives up the first connect (its task was cancelled). Call from anywhere.
    func cancelConnect() {
        queue.async { [self] in
            guard let waiter = connectWaiter else { return }
            connectWaiter = nil
            state = .idle(reason: "connect was cancelled")
            waiter(.failure(.connectFailed(address: "\(address)", reason: "cancelled while connecting")))
        }
    }

    /// One connect try; on failure, the next one after the policy's delay, while anyone waits.
    private func tryConnect(attempt: Int) {
        dispatchPrecondition(condition: .onQueue(queue))
        state = .connecting
        var tryTimeout = options.connectTimeout.nanoseconds
        if let deadline = connectDeadline {
            let now = DispatchTime.now().uptimeNanoseconds
            let left = deadline.uptimeNanoseconds > now ? deadline.uptimeNanoseconds - now : 0
            tryTimeout = min(tryTimeout, Int(clamping: max(left, 1_000_000)))
        }
        Connector.connect(to: address, queue: queue, timeout: .nanoseconds(tryTimeout)) { [self] result in
            switch result {
            case .success(let fd):
                attach(fd)
            case .failure(let errno):
                guard case .connecting = state else { return }
                connectFailed(attempt: attempt, reason: Self.describe(errno))
            }
        }
    }

    private func connectFailed(attempt: Int, reason: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard connectWaiter != nil || pending.anyWaiting else {
            state = .idle(reason: reason)  // nobody waits any more (timed out, cancelled)
            return
        }
        if let policy = options.reconnectPolicy, attempt + 1 < policy.maxAttempts {
            let delay = policy.delay(beforeAttempt: attempt + 1)
            let at = DispatchTime.now() + .nanoseconds(delay.nanoseconds)
            if connectDeadline.map({ at < $0 }) ?? true {
                queue.asyncAfter(deadline: at) { [self] in
                    guard case .connecting = state else { return }
                    guard connectWaiter != nil || pending.anyWaiting else {
                        state = .idle(reason: reason)
                        return
                    }
                    tryConnect(attempt: attempt + 1)
                }
                return
            }
        }
        let tries = attempt + 1
        let why: String
        if connectDeadline != nil && tries > 1 {
            why = "\(reason) (after \(tries) tries in \(options.connectTimeout.secondsText) s)"
        } else {
            why = tries > 1 ? "\(reason) (after \(tries) tries)" : reason
        }
        state = .idle(reason: why)
        if let waiter = connectWaiter {
            connectWaiter = nil
            connectDeadline = nil
            waiter(.failure(.connectFailed(address: "\(address)", reason: why)))
        }
        fail(pending.removeWaiting(), reason: "could not reconnect: \(why)")
    }

    private func attach(_ fd: Int32) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .connecting = state else {
            Syscall.close(fd)  // closed, or the connect cancelled, while connecting
            return
        }
        connectionCount += 1
        handedBytes = 0
        let limits = Connection.Limits(maxFrameBytes: options.maxFrameBytes, maxOutputBytes: options.maxOutputBytes)
        var session: TLSSession?
        if let tls {
            do {
                session = try tls.session(serverName: options.tls?.serverName ?? address.host)
            } catch {
                Syscall.close(fd)
                state = .idle(reason: "\(error)")
                if let waiter = connectWaiter {
                    connectWaiter = nil
                    connectDeadline = nil
                    waiter(.failure(.connectFailed(address: "\(address)", reason: "\(error)")))
                }
                fail(pending.removeWaiting(), reason: "\(error)")
                return
            }
        }
        // A reset after the daemon's last words (an `overloaded` error, say) still delivers them.
        let connection = Connection(
            fd: fd, id: connectionCount, peer: address, loop: loop, limits: limits, onReset: .deliver, tls: session, delegate: self)
        state = .connected(connection)
        // start() enqueues the registration; the flush below is enqueued after it.
        connection.start()
        // Over TLS the first connect succeeds once the daemon's certificate verified
        // (`connectionDidEstablishTLS`); calls and the token wait in the connection till then,
        // and a daemon that never finishes the handshake is given up after `connectTimeout`.
        if session != nil {
            let limit = options.connectTimeout
            queue.asyncAfter(deadline: connectDeadline ?? .now() + .nanoseconds(limit.nanoseconds)) { [self] in
                guard case .connected(let current) = state, current === connection, connection.isNegotiatingTLS else { return }
                connection.close(.error("TLS handshake not finished within \(limit.secondsText) s"))
            }
        }
        if session == nil, let waiter = connectWaiter {
            connectWaiter = nil
            connectDeadline = nil
            waiter(.success(()))
        }
        authenticate(on: connection)
        hand(pending.waiting(), to: connection)
        scheduleFlush()
    }

    /// Sends `system.auth` first on a new connection when the options carry credentials. Its
    /// failure is not a call's: each call made meanwhile gets the daemon's `unauthorized` answer,
    /// which says what to do.
    private func authenticate(on connection: Connection) {
        authFailure = nil
        defer { if options.allowStaleReads { allowStaleReads(on: connection) } }
        guard case .token(let name, let secret)? = options.credentials else { return }
        authCount += 1
        let id = "rpc.auth.\(authCount)"
        var line: [UInt8] = []
        let param = JSONValue.object(JSONObject([("name", .string(name)), ("token", .string(secret))]))
        RequestCodec.encode(id: id, method: SystemAuth.method, param: param, form: .canonical, into: &line)
        pending.insert(PendingCall(id: id, method: SystemAuth.method, isAuth: true, complete: { _ in }))
        hand([id], lines: [line], to: connection)
    }

    /// Sends `system.staleReads {"allow": true}` (after `system.auth`, which it needs); its answer
    /// is not a call's (a daemon without the method answers methodNotFound, and serves reads anyway).
    private func allowStaleReads(on connection: Connection) {
        authCount += 1
        let id = "rpc.stale.\(authCount)"
        var line: [UInt8] = []
        RequestCodec.encode(id: id, method: SystemStaleReads.method, param: .object(JSONObject([("allow", .bool(true))])), form: .canonical, into: &line)
        pending.insert(PendingCall(id: id, method: SystemStaleReads.method, complete: { _ in }))
        hand([id], lines: [line], to: connection)
    }

    /// Hands the lines of these pending calls to `connection` in one write.
    private func hand(_ ids: [String], to connection: Connection) {
        hand(ids, lines: ids.map { pending[$0]?.line ?? [] }, to: connection)
    }

    private func hand(_ ids: [String], lines: [[UInt8]], to connection: Connection) {
        dispatchPrecondition(condition: .onQueue(queue))
        // A send just before may have closed it: then these wait for the next connection.
        guard !ids.isEmpty, case .connected(let current) = state, current === connection else { return }
        var bytes: [UInt8] = []
        for (id, line) in zip(ids, lines) {
            bytes.append(contentsOf: line)
            handedBytes += UInt64(line.count)
            pending.handed(id, to: connectionCount, end: handedBytes)
        }
        // Recorded first: a send that overflows closes the connection before it returns, and the
        // calls it held must already count as handed (and not written).
        connection.send(bytes)
        // A paused feed must not hide the replies: read on until they are in (see `feed`).
        if feed != nil { connection.resumeReading() }
    }

    // MARK: - Calls

    /// Sends `calls` in one write; `completion` gets one result per call, in order, once all are in.
    func submit(_ calls: [OutgoingCall], timeout: Duration?, completion: @escaping @Sendable ([Result<Request, RPCClientError>]) -> Void) {
        queue.async { [self] in
            let collector = Collector(count: calls.count, completion: completion)
            var ids: [String] = []
            for (index, call) in calls.enumerated() {
                if let failure = refusal(call) {
                    collector.set(index, .failure(failure))
                    continue
                }
                var entry = PendingCall(
                    id: call.id, method: call.method, key: call.key, line: call.bytes, resendable: call.resendable,
                    complete: { collector.set(index, $0) })
                if let timeout {
                    // Weak: a cancelled item stays queued until its deadline; it must not keep the client alive.
                    let item = DispatchWorkItem { [weak self] in self?.timeOut(call.id, after: timeout) }
                    queue.asyncAfter(deadline: .now() + .nanoseconds(timeout.nanoseconds), execute: item)
                    entry.timer = item
                }
                pending.insert(entry)
                ids.append(call.id)
            }
            guard !ids.isEmpty else { return }
            switch state {
            case .connected(let connection):
                hand(ids, to: connection)
                scheduleFlush()
            case .connecting:
                break  // sent on connect
            case .idle:
                tryConnect(attempt: 0)  // refusal() let them in: there is a reconnect policy
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
        case .idle(let reason) where options.reconnectPolicy == nil:
            // The connection went after its system.auth failed: that failure is why.
            if let failed = authenticationFailed(call.method, id: call.id) { return failed }
            return .notSent(address: "\(address)", method: call.method, id: call.id, reason: "not connected: \(reason)")
        default:
            if pending[call.id] != nil {
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

    /// The call's timeout ran out: `.timedOut` if it was handed to the connection (written, or
    /// about to be: bytes handed over cannot be taken back), else `.notSent` or, for a call
    /// written before and waiting to be sent again, `.outcomeUnknown`.
    private func timeOut(_ id: String, after timeout: Duration) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let call = pending[id] else { return }
        if call.handedTo != nil {  // only ever to the current connection
            return complete(id, .failure(.timedOut(method: call.method, id: id, after: timeout)))
        }
        let written = call.sends > 0
        let within = "within its timeout of \(timeout.secondsText) s"
        if written {
            complete(id, .failure(.outcomeUnknown(
                address: "\(address)", method: call.method, id: id, key: call.key,
                reason: "its connection was lost and it could not be sent again \(within)")))
        } else {
            complete(id, .failure(.notSent(
                address: "\(address)", method: call.method, id: id, reason: "no connection took it \(within) (\(stateText))")))
        }
    }

    private var stateText: String {
        switch state {
        case .idle(let reason): return reason
        case .connecting: return "still connecting"
        case .connected: return "connected, not handed over yet"
        case .closed: return "closed"
        }
    }

    private func complete(_ id: String, _ result: Result<Request, RPCClientError>) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard let entry = pending.remove(id) else { return }
        entry.timer?.cancel()
        entry.complete(result)
    }

    /// Completes calls removed from `pending` with the error their fate calls for.
    private func fail(_ calls: [(call: PendingCall, fate: PendingCalls.Fate)], reason: String) {
        dispatchPrecondition(condition: .onQueue(queue))
        for (call, fate) in calls {
            call.timer?.cancel()
            // Lost after the connection's system.auth failed (the daemon closes such connections):
            // that failure is the reason, and nothing was applied.
            if let failed = authenticationFailed(call.method, id: call.id) {
                call.complete(.failure(failed))
                continue
            }
            switch fate {
            case .notSent:
                call.complete(.failure(.notSent(address: "\(address)", method: call.method, id: call.id, reason: reason)))
            case .outcomeUnknown:
                call.complete(.failure(.outcomeUnknown(
                    address: "\(address)", method: call.method, id: call.id, key: call.key, reason: reason)))
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

    // MARK: - Feeds

    /// Sets the feed handler and the loss handler (see `RPCClient.onFeed`). Call from anywhere.
    func setFeed(
        _ handler: (@Sendable (Request, UnsafeRawBufferPointer) -> FeedFlow)?, lines: (@Sendable (UnsafeRawBufferPointer) -> FeedFlow?)? = nil,
        afterRead: (@Sendable () -> Void)? = nil, onLost: (@Sendable (String) -> Void)?
    ) {
        queue.async { [self] in
            feed = handler
            feedLines = lines
            feedRead = afterRead
            self.onLost = onLost
        }
    }

    /// Reads again after a feed handler said `.pause`. Call from anywhere.
    func resumeFeed() {
        queue.async { [self] in
            if case .connected(let connection) = state { connection.resumeReading() }
        }
    }

    /// `sendUnanswered`, written now: only from the client's queue (a feed's handler), where it
    /// saves the hop to the queue and the wake of a thread for it.
    func sendUnansweredNow(_ line: [UInt8]) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard case .connected(let connection) = state else { return }
        handedBytes += UInt64(line.count)
        connection.send(line)
        connection.flush()
    }

    /// Sends one line that expects no answer (a counter-request), after every call handed
    /// before it. Dropped when not connected. Call from anywhere.
    func sendUnanswered(_ line: [UInt8]) {
        queue.async { [self] in
            guard case .connected(let connection) = state else { return }
            handedBytes += UInt64(line.count)
            connection.send(line)
            scheduleFlush()
        }
    }

    // MARK: - Closing

    /// `close()`, after writing what the socket takes now of the lines handed to the connection:
    /// a change feed's last acknowledgements reach the leader. Call from anywhere.
    func closeAfterFlush() {
        queue.async { [self] in
            if case .connected(let connection) = state { connection.flush() }
            close()
        }
    }

    /// Fails every pending call with `.connectionClosed` and closes the connection. Idempotent;
    /// call from anywhere.
    func close() {
        queue.async { [self] in
            let previous = state
            state = .closed
            if let waiter = connectWaiter {
                connectWaiter = nil
                waiter(.failure(.connectFailed(address: "\(address)", reason: "the client was closed while connecting")))
            }
            for call in pending.removeAll() {
                call.timer?.cancel()
                call.complete(.failure(.connectionClosed(address: "\(address)", method: call.method, id: call.id, reason: "the client was closed")))
            }
            if case .connected(let connection) = previous {
                connection.close(.closedByServer("closed by the client"))
            }
        }
    }

    // MARK: - ConnectionDelegate (on the queue)

    func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
        if feed != nil, let feedLines, let flow = feedLines(line) {
            if flow == .pause && pending.isEmpty { connection.pauseReading() }
            return
        }
        switch RequestCodec.decode(line) {
        case .counterRequest(let reply):
            guard let entry = pending[reply.id] else {
                handlers.deliver(reply)  // not ours (or too late): a handler may want it
                return
            }
            if entry.isAuth {
                authFailure = reply.method == .error ? Self.errorMessage(reply) ?? "no message" : nil
                complete(reply.id, .success(reply))
            } else if reply.method == .error, Self.errorCode(reply) == .unauthorized, let failed = authenticationFailed(entry.method, id: reply.id) {
                complete(reply.id, .failure(failed))
            } else if reply.method == .error || reply.method == entry.method.result {
                complete(reply.id, .success(reply))
            } else {
                complete(reply.id, .failure(.badReply(method: entry.method, id: reply.id, reason: "answered by \(reply.method), expected \(entry.method.result) or error.error")))
            }
        case .request(let request):
            guard let feed else { return handlers.deliver(request) }
            // Not while a call waits for its reply (it may be what the feed's consumer awaits);
            // the next line says `.pause` again.
            if feed(request, line) == .pause && pending.isEmpty { connection.pauseReading() }
        case .invalid:
            break  // not a request; never answered
        }
    }

    /// `.authenticationFailed` for a call, when this connection's `system.auth` failed.
    private func authenticationFailed(_ method: RPCMethod, id: String) -> RPCClientError? {
        guard let authFailure, case .token(let name, _)? = options.credentials else { return nil }
        return .authenticationFailed(name: name, errorMessage: authFailure, method: method, id: id)
    }

    private static func errorMessage(_ reply: Request) -> String? {
        if case .object(let param)? = reply.param, case .string(let message)? = param["errorMessage"] { return message }
        return nil
    }

    private static func errorCode(_ reply: Request) -> RPCErrorCode? {
        if case .object(let param)? = reply.param, case .string(let code)? = param["code"] { return RPCErrorCode(rawValue: code) }
        return nil
    }

    func connectionDidServeRead(_ connection: Connection) {
        if feed != nil { feedRead?() }
    }

    func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {
        // Dropped: its id cannot be known; the call it answered fails by its timeout.
    }

    func connectionDidEstablishTLS(_ connection: Connection) {
        guard case .connected(let current) = state, current === connection, let waiter = connectWaiter else { return }
        connectWaiter = nil
        connectDeadline = nil
        waiter(.success(()))
    }

    func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {
        guard case .connected(let current) = state, current === connection else { return }
        var why: String
        switch reason {
        case .finished: why = "the daemon closed the connection"
        case .peerReset(let message), .error(let message): why = message
        case .outputOverflow(let bytes): why = "the daemon stopped reading (\(bytes) bytes of requests pending)"
        case .closedByServer(let message), .shed(let message): why = message
        }
        // A handshake the daemon refused over this client's certificate (TLS 1.3 tells the client
        // after its Finished, so calls may be encrypted already): the daemon read none of them.
        let refusedHandshake = why.hasPrefix("TLS handshake failed") && Self.certificateAlerts.contains { why.contains($0) }
        if connection.isNegotiatingTLS {
            if !why.hasPrefix("TLS") { why = "TLS handshake failed: \(why)" }
            if why.contains("certificate required") {
                why += "; the daemon asks for a client certificate (RPCTLSOptions.certificateFile and keyFile; rpcd call --cert and --key-file)"
            } else if !why.contains("certificate verify failed") && !why.contains(" alert ") {
                why += "; is \(address) a TLS listener (tls:HOST:PORT)?"
            }
            if let waiter = connectWaiter {
                connectWaiter = nil
                connectDeadline = nil
                state = .idle(reason: why)
                waiter(.failure(.connectFailed(address: "tls:\(address)", reason: why)))
            }
        }
        state = .idle(reason: why)
        onLost?(why)
        let policy = options.reconnectPolicy
        let lost = pending.connectionLost(
            connectionCount, written: refusedHandshake ? 0 : connection.bytesOut, retry: options.retry, canReconnect: policy != nil)
        fail(lost, reason: "the connection was lost: \(why)")
        if pending.anyWaiting { tryConnect(attempt: 0) }
    }

    /// Alerts a daemon sends while it checks a client certificate, before it reads any request.
    static let certificateAlerts = [
        "alert certificate required", "alert bad certificate", "alert unknown ca", "alert certificate expired",
        "alert certificate unknown", "alert certificate revoked", "alert unsupported certificate", "alert access denied",
    ]

    static func describe(_ error: Errno) -> String {
        error.code == ETIMEDOUT ? "connect timed out" : "\(error)"
    }
}
