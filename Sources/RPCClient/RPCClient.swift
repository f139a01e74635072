import RPCSchema
import RPCTransport

/// A connection to rpcd that makes typed calls.
///
/// ```swift
/// let client = try await RPCClient.connect(host: "127.0.0.1", port: 7878)
/// let user = try await client.call(GetUser(userId: "u1"))   // a User
/// let all = try await client.call(ListUsers())             // [User]
/// ```
///
/// The param type names the method and the result type (`RPCCall`), so every method in
/// `RPCSchema` is callable without code here. Ids come from `options.idGenerator`; replies are
/// matched to calls by id, so any number of calls may be in flight at once (pipelining) from any
/// number of tasks. Errors are `RPCClientError`. When the connection drops, every call in flight
/// fails at once with `.connectionClosed`; nothing waits forever.
public final class RPCClient: Sendable {
    private let core: ClientCore
    private let encoder = JSONValueEncoder()
    private let decoder = JSONValueDecoder()

    /// Handlers for requests the daemon sends (and counter-requests no call waits for).
    public var handlers: RequestHandlers { core.handlers }
    public var options: RPCClientOptions { core.options }
    /// `HOST:PORT` of the daemon.
    public var address: String { "\(core.address)" }

    private init(core: ClientCore) { self.core = core }

    deinit { core.close() }

    /// Connects to rpcd at `host` (an IPv4 or IPv6 literal, or `localhost`) and `port`.
    public static func connect(host: String, port: Int, options: RPCClientOptions = RPCClientOptions()) async throws -> RPCClient {
        let text = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]:\(port)" : "\(host):\(port)"
        return try await connect(to: text, options: options)
    }

    /// Connects to rpcd at `HOST:PORT` (`127.0.0.1:7878`, `[::1]:7878`, `localhost:7878`).
    public static func connect(to address: String, options: RPCClientOptions = RPCClientOptions()) async throws -> RPCClient {
        guard let parsed = SocketAddress(parsing: address) else {
            throw RPCClientError.connectFailed(
                address: address, reason: "not HOST:PORT with an IP address or localhost as HOST (names are not resolved)")
        }
        let core: ClientCore
        do {
            core = try ClientCore(address: parsed, options: options)
        } catch {
            throw RPCClientError.connectFailed(address: address, reason: "could not create the client's event loop: \(error)")
        }
        let result = await withCheckedContinuation { continuation in
            core.connect { continuation.resume(returning: $0) }
        }
        let client = RPCClient(core: core)  // from here on, deinit closes it
        try result.get()
        return client
    }

    /// Calls `call.method` with `call` as its param and returns its typed result.
    ///
    /// Throws `RPCClientError`: `.server` when the daemon answers `error.error`, else a
    /// connection, timeout or decoding case. `timeout` defaults to `options.defaultTimeout`.
    public func call<C: RPCCall>(_ call: C, timeout: Duration? = nil) async throws -> C.Output {
        let results = await exchange([encode(call)], timeout: timeout)
        return try results[0].flatMap(Self.output(C.self)).get()
    }

    /// Sends `method` with a raw JSON param and returns the counter-request that answers it: a
    /// `…Result` or an `error.error` (not thrown). Throws `RPCClientError` for everything else.
    public func send(_ method: RPCMethod, param: JSONValue?, timeout: Duration? = nil) async throws -> Request {
        let id = core.options.idGenerator.next()
        var bytes: [UInt8] = []
        RequestCodec.encode(id: id, method: method, param: param, form: .canonical, into: &bytes)
        let results = await exchange([.success(OutgoingCall(id: id, method: method, bytes: bytes))], timeout: timeout)
        return try results[0].get()
    }

    /// Sends every call in one write and returns their results in the same order: one failure does
    /// not fail the others. For calls of one type; for mixed types use the variadic `batch`.
    public func batch<C: RPCCall>(_ calls: [C], timeout: Duration? = nil) async -> [Result<C.Output, RPCClientError>] {
        let results = await exchange(calls.map(encode), timeout: timeout)
        return results.map { $0.flatMap(Self.output(C.self)) }
    }

    /// Sends calls of any types in one write (JSONRPCKit's batch) and returns a tuple of their
    /// results, in order: `let (a, b) = await client.batch(GetUser(userId: "u1"), ListBuildings())`
    /// gives a `Result<User, RPCClientError>` and a `Result<[Building], RPCClientError>`.
    public func batch<each C: RPCCall>(_ calls: repeat each C, timeout: Duration? = nil) async -> (repeat Result<(each C).Output, RPCClientError>) {
        var outgoing: [Result<OutgoingCall, RPCClientError>] = []
        for call in repeat each calls { outgoing.append(encode(call)) }
        let results = await exchange(outgoing, timeout: timeout)
        let cursor = Cursor()
        return (repeat cursor.next(each calls, results))
    }

    /// Fails every call in flight with `.connectionClosed` and closes the connection. Later calls
    /// fail at once. Also done when the client is released.
    public func close() { core.close() }

    // MARK: - Internals

    private func encode<C: RPCCall>(_ call: C) -> Result<OutgoingCall, RPCClientError> {
        let param: JSONValue
        do {
            param = try encoder.encode(call)
        } catch {
            return .failure(.invalidCall(method: C.method, reason: "its param did not encode: \(error)"))
        }
        let id = core.options.idGenerator.next()
        var bytes: [UInt8] = []
        RequestCodec.encode(id: id, method: C.method, param: param, form: .canonical, into: &bytes)
        return .success(OutgoingCall(id: id, method: C.method, bytes: bytes))
    }

    /// Sends the calls that encoded (in one write) and waits for all of them.
    private func exchange(_ calls: [Result<OutgoingCall, RPCClientError>], timeout: Duration?) async -> [Result<Request, RPCClientError>] {
        let ready = calls.compactMap { try? $0.get() }
        var replies: [Result<Request, RPCClientError>] = []
        if !ready.isEmpty {
            let timeout = timeout ?? core.options.defaultTimeout
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
                let value = try decoder.decode(C.Reply.self, from: reply.param ?? .null)
                return .success(C.output(from: value))
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
