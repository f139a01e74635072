import RPCSchema
internal import RPCTransport

/// A connection to rpcd that makes typed calls.
///
/// ```swift
/// let client = try await RPCClient.connect(host: "127.0.0.1", port: 7878)
/// let user = try await client.call(GetUser(userId: "u1"))   // a User
/// let all = try await client.call(ListUsers())             // [User]
/// for try await page in client.pages(ListUsers(limit: 100)) { print(page.users.count) }
/// ```
///
/// The param type names the method and the result type (`RPCCall`), so every method in
/// `RPCSchema` is callable without code here. Ids come from `options.idGenerator`; replies are
/// matched to calls by id, so any number of calls may be in flight at once (pipelining) from any
/// number of tasks. Every mutation carries an idempotency key (`options.keyGenerator`, or the
/// call's own `key:`); reads carry none. Errors are `RPCClientError`.
///
/// When the connection drops, calls in flight fail at once with `.outcomeUnknown` (they may have
/// been applied), and later calls with `.notSent`; nothing waits forever. With
/// `options.reconnect` the client connects again when a call needs it; with `options.retry` it
/// also sends the calls in flight again (mutations with their keys), so a daemon restart shows
/// only as latency.
public final class RPCClient: Sendable {
    let core: ClientCore
    private let encoder = JSONValueEncoder()

    /// Handlers for requests the daemon sends (and counter-requests no call waits for).
    public var handlers: RequestHandlers { core.handlers }
    public var options: RPCClientOptions { core.options }
    /// `HOST:PORT` (or `unix:PATH`) of the daemon.
    public var address: String { "\(core.address)" }

    private init(core: ClientCore) { self.core = core }

    deinit { core.close() }

    /// Connects to rpcd at `host` (an IPv4 or IPv6 literal, or `localhost`) and `port`.
    public static func connect(host: String, port: Int, options: RPCClientOptions = RPCClientOptions()) async throws -> RPCClient {
        let text = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]:\(port)" : "\(host):\(port)"
        return try await connect(to: text, options: options)
    }

    /// Connects to rpcd at `HOST:PORT` (`127.0.0.1:7878`, `[::1]:7878`, `localhost:7878`),
    /// `tls:HOST:PORT` (TLS, see `RPCClientOptions.tls`) or `unix:PATH`.
    ///
    /// Without a reconnect policy, one try within `options.connectTimeout`. With one (or with a
    /// retry policy), it tries as the policy allows until `connectTimeout` has passed, so a
    /// program that starts before rpcd waits for it. Throws `.connectFailed`; cancelling the task
    /// stops the tries.
    public static func connect(to address: String, options: RPCClientOptions = RPCClientOptions()) async throws -> RPCClient {
        var options = options
        var plain = address
        if address.hasPrefix("tls:") {
            plain = String(address.dropFirst(4))
            if options.tls == nil { options.tls = RPCTLSOptions() }
        }
        guard let parsed = SocketAddress(parsing: plain) else {
            throw RPCClientError.connectFailed(
                address: address, reason: "not HOST:PORT with an IP address or localhost as HOST (names are not resolved), tls:HOST:PORT, nor unix:PATH")
        }
        var tls: TLSContext?
        if let settings = options.tls {
            do {
                tls = try TLSContext.client(
                    TLSConfiguration(
                        certificateFile: settings.certificateFile, privateKeyFile: settings.keyFile, caFile: settings.caFile,
                        verifiesPeer: !settings.insecure))
            } catch {
                throw RPCClientError.connectFailed(address: address, reason: "\(error)")
            }
        }
        let core: ClientCore
        do {
            core = try ClientCore(address: parsed, options: options, tls: tls)
        } catch {
            throw RPCClientError.connectFailed(address: address, reason: "could not create the client's event loop: \(error)")
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                core.connect { continuation.resume(returning: $0) }
            }
        } onCancel: {
            core.cancelConnect()
        }
        let client = RPCClient(core: core)  // from here on, deinit closes it
        try result.get()
        return client
    }

    /// Calls `call.method` with `call` as its param and returns its typed result.
    ///
    /// A mutation carries `key` as its idempotency key, or else one from `options.keyGenerator`
    /// (a key is 1 to 128 UTF-8 bytes; give your own to apply a mutation at most once across
    /// program restarts, e.g. `key: "order-42"`). Throws `RPCClientError`: `.server` when the
    /// daemon answers `error.error`, else a connection, timeout or decoding case.
    public func call<C: RPCCall>(_ call: C, key: String? = nil, timeout: CallTimeout = .default) async throws -> C.Output {
        let results = await exchange([encode(call, key: key)], timeout: timeout)
        return try results[0].flatMap(Self.output(C.self)).get()
    }

    /// `call(_:key:timeout:)` with `timeout: .after(timeout)`.
    public func call<C: RPCCall>(_ call: C, key: String? = nil, timeout: Duration) async throws -> C.Output {
        try await self.call(call, key: key, timeout: .after(timeout))
    }

    /// Sends `method` with a raw JSON param and returns the counter-request that answers it: a
    /// `…Result` or an `error.error` (not thrown). Throws `RPCClientError` for everything else.
    ///
    /// It cannot tell a read from a mutation, so it carries only the `key` given: without one, a
    /// retry policy sends it again only if it was never sent.
    public func send(_ method: RPCMethod, param: JSONValue?, key: String? = nil, timeout: CallTimeout = .default) async throws -> Request {
        let id = core.options.idGenerator.next()
        let outgoing = Self.outgoing(id: id, method: method, param: param, key: key, resendable: key != nil)
        let results = await exchange([outgoing], timeout: timeout)
        return try results[0].get()
    }

    /// `send(_:param:key:timeout:)` with `timeout: .after(timeout)`.
    public func send(_ method: RPCMethod, param: JSONValue?, key: String? = nil, timeout: Duration) async throws -> Request {
        try await send(method, param: param, key: key, timeout: .after(timeout))
    }

    /// Sends every call in one write and returns their results in the same order: one failure does
    /// not fail the others. For calls of one type; for mixed types use the variadic `batch`.
    public func batch<C: RPCCall>(_ calls: [C], timeout: CallTimeout = .default) async -> [Result<C.Output, RPCClientError>] {
        let results = await exchange(calls.map { encode($0, key: nil) }, timeout: timeout)
        return results.map { $0.flatMap(Self.output(C.self)) }
    }

    /// `batch(_:timeout:)` with `timeout: .after(timeout)`.
    public func batch<C: RPCCall>(_ calls: [C], timeout: Duration) async -> [Result<C.Output, RPCClientError>] {
        await batch(calls, timeout: .after(timeout))
    }

    /// Sends calls of any types in one write (JSONRPCKit's batch) and returns a tuple of their
    /// results, in order: `let (a, b) = await client.batch(GetUser(userId: "u1"), ListBuildings())`
    /// gives a `Result<User, RPCClientError>` and a `Result<[Building], RPCClientError>`.
    public func batch<each C: RPCCall>(_ calls: repeat each C, timeout: CallTimeout = .default) async -> (repeat Result<(each C).Output, RPCClientError>) {
        var outgoing: [Result<OutgoingCall, RPCClientError>] = []
        for call in repeat each calls { outgoing.append(encode(call, key: nil)) }
        let results = await exchange(outgoing, timeout: timeout)
        let cursor = Cursor()
        return (repeat cursor.next(each calls, results))
    }

    /// The variadic `batch(_:timeout:)` with `timeout: .after(timeout)`.
    public func batch<each C: RPCCall>(_ calls: repeat each C, timeout: Duration) async -> (repeat Result<(each C).Output, RPCClientError>) {
        await batch(repeat each calls, timeout: .after(timeout))
    }

    /// One page of a list, with its `next`: `try await client.page(ListUsers(limit: 100))` is a
    /// `UserPage` (`users`, and `next` when more remain), where `call` would give only `[User]`.
    public func page<C: RPCListCall>(_ call: C, timeout: CallTimeout = .default) async throws -> C.Reply {
        let results = await exchange([encode(call, key: nil)], timeout: timeout)
        return try results[0].flatMap(Self.reply(C.self)).get()
    }

    /// `page(_:timeout:)` with `timeout: .after(timeout)`.
    public func page<C: RPCListCall>(_ call: C, timeout: Duration) async throws -> C.Reply {
        try await page(call, timeout: .after(timeout))
    }

    /// Every page of a list, one call per page, from `call.after` on, each `call.limit` long:
    /// `for try await page in client.pages(ListUsers(limit: 100)) { … }`. The last page has no
    /// `next`; an empty list is one empty page. Each page's call has its own `timeout`.
    public func pages<C: RPCListCall>(_ call: C, timeout: CallTimeout = .default) -> RPCPages<C> {
        RPCPages(client: self, first: call, timeout: timeout)
    }

    /// `pages(_:timeout:)` with `timeout: .after(timeout)`.
    public func pages<C: RPCListCall>(_ call: C, timeout: Duration) -> RPCPages<C> {
        pages(call, timeout: .after(timeout))
    }

    // MARK: - Feeds (the package's follower; `changes(from:)` for everyone)

    /// The daemon's change feed from `fromSequence` on, as typed changes, acknowledged as the loop
    /// goes (see `RPCChanges` for the rules):
    ///
    /// ```swift
    /// for try await event in client.changes(from: 41) {
    ///     if let user = event.change.as(CreateUser.self) { print(event.sequence, user.id) }   // 42 u1
    /// }
    /// ```
    ///
    /// `fromSequence`: yield the changes after it (nil: those after subscribing). `snapshot`: when
    /// the leader's journal no longer reaches back to `fromSequence`, start with its snapshot
    /// instead of throwing `snapshotRequired`. `bufferLimit`: changes that may wait for the loop
    /// before the client stops reading. Ending the loop closes the client: use one for the feed only.
    public func changes(from fromSequence: Int? = nil, snapshot: Bool = false, bufferLimit: Int = 1024) -> RPCChanges {
        RPCChanges(client: self, fromSequence: fromSequence, snapshot: snapshot, bufferLimit: bufferLimit)
    }

    /// Hands every request the daemon sends (a change feed) to `handler`, one at a time, in order,
    /// on the client's own queue, instead of `handlers`. When it returns `.pause`, the client reads
    /// no more after the lines already read (at most one read's worth more reach the handler)
    /// until `resumeFeed()`: the daemon's sends wait in TCP. (`.pause` is ignored while a call on
    /// this client waits for its reply, which may be behind the feed's lines; the handler says
    /// `.pause` again on its next line.) The handler also gets the line as read (without its
    /// `\n`; valid only during the call). `onLost` is told why whenever the connection is lost.
    /// The handler must not wait for calls on this client. `lines`, when given, is offered each
    /// line first, undecoded, and takes it by returning its flow (nil: the line goes to `handler`
    /// or, as a reply, to its call): a follower applies the feed's records from their bytes.
    /// `afterRead`, when given, is told on the same thread once the lines of a read were all
    /// handed over: a follower applies them together there.
    package func onFeed(
        _ handler: @escaping @Sendable (Request, UnsafeRawBufferPointer) -> FeedFlow, lines: (@Sendable (UnsafeRawBufferPointer) -> FeedFlow?)? = nil,
        afterRead: (@Sendable () -> Void)? = nil, onLost: @escaping @Sendable (String) -> Void
    ) {
        core.setFeed(handler, lines: lines, afterRead: afterRead, onLost: onLost)
    }

    /// Reads again after the feed handler returned `.pause`.
    package func resumeFeed() { core.resumeFeed() }

    /// Sends a counter-request line (with its `\n`): an acknowledgement, never answered.
    package func sendCounterRequest(_ line: [UInt8]) { core.sendUnanswered(line) }

    /// `sendCounterRequest`, written at once: only from a feed handler (the client's queue).
    package func sendCounterRequestNow(_ line: [UInt8]) { core.sendUnansweredNow(line) }

    /// Fails every call in flight with `.connectionClosed` and closes the connection. Later calls
    /// fail at once, also with `.connectionClosed`. Also done when the client is released.
    public func close() { core.close() }

    // MARK: - Internals

    private func encode<C: RPCCall>(_ call: C, key: String?) -> Result<OutgoingCall, RPCClientError> {
        let param: JSONValue
        do {
            param = try encoder.encode(call)
        } catch {
            return .failure(.invalidCall(method: C.method, reason: "its param did not encode: \(error)"))
        }
        let key = key ?? (C.isMutation ? core.options.keyGenerator?.next() : nil)
        let id = core.options.idGenerator.next()
        return Self.outgoing(id: id, method: C.method, param: param, key: key, resendable: !C.isMutation || key != nil)
    }

    private static func outgoing(id: String, method: RPCMethod, param: JSONValue?, key: String?, resendable: Bool) -> Result<OutgoingCall, RPCClientError> {
        if let key, key.isEmpty || key.utf8.count > Request.maxKeyBytes {
            return .failure(.invalidCall(method: method, reason: "its key is \(key.utf8.count) bytes; a key is 1 to \(Request.maxKeyBytes) UTF-8 bytes"))
        }
        var bytes: [UInt8] = []
        RequestCodec.encode(Request(id: id, method: method, param: param, form: .canonical, key: key), into: &bytes)
        return .success(OutgoingCall(id: id, method: method, key: key, resendable: resendable, bytes: bytes))
    }

    /// Sends the calls that encoded (in one write) and waits for all of them.
    private func exchange(_ calls: [Result<OutgoingCall, RPCClientError>], timeout: CallTimeout) async -> [Result<Request, RPCClientError>] {
        let ready = calls.compactMap { try? $0.get() }
        var replies: [Result<Request, RPCClientError>] = []
        if !ready.isEmpty {
            let timeout = timeout.resolved(core.options)
            let tags = ready.map { (id: $0.id, method: $0.method) }
            if Task.isCancelled {
                replies = tags.map { .failure(.cancelled(method: $0.method, id: $0.id)) }
            } else {
                replies = await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        core.submit(ready, timeout: timeout) { continuation.resume(returning: $0) }
                    }
                } onCancel: {
                    core.cancel(tags)
                }
            }
        }
        var next = replies.makeIterator()
        return calls.map { call in
            switch call {
            case .failure(let error): return .failure(error)
            case .success: return next.next() ?? .failure(.invalidCall(method: .error, reason: "no reply recorded (client bug)"))
            }
        }
    }

    /// Reads a counter-request as the result of `C`.
    static func output<C: RPCCall>(_ type: C.Type) -> (Request) -> Result<C.Output, RPCClientError> {
        { request in Self.reply(C.self)(request).map(C.output(from:)) }
    }

    /// Reads a counter-request as the reply of `C` (before `C.output(from:)`).
    static func reply<C: RPCCall>(_ type: C.Type) -> (Request) -> Result<C.Reply, RPCClientError> {
        { reply in
            let decoder = JSONValueDecoder()
            if reply.method == .error {
                let param = reply.param ?? .null
                guard let error = try? decoder.decode(RPCError.self, from: param) else {
                    return .failure(.badReply(method: C.method, id: reply.id, reason: "error.error without errorMessage and code: \(param)"))
                }
                return .failure(.server(code: error.code, errorMessage: error.errorMessage, method: C.method, id: reply.id))
            }
            do {
                return .success(try decoder.decode(C.Reply.self, from: reply.param ?? .null))
            } catch {
                return .failure(.badReply(method: C.method, id: reply.id, reason: "not a \(C.Reply.self): \(error)"))
            }
        }
    }
}

/// Walks the results of a variadic batch in order, one call at a time.
private final class Cursor {
    private var index = 0

    func next<C: RPCCall>(_ call: C, _ results: [Result<Request, RPCClientError>]) -> Result<C.Output, RPCClientError> {
        defer { index += 1 }
        guard index < results.count else { return .failure(.invalidCall(method: C.method, reason: "no result (client bug)")) }
        return results[index].flatMap(RPCClient.output(C.self))
    }
}
