import RPCSchema

/// What a program needs from rpcd, as a struct of closures (isowords' `ApiClient`): the program
/// takes an `RPCService`; production passes `.live(client)`, tests pass `.unimplemented` with the
/// few methods they expect overridden, and run without a daemon.
///
/// ```swift
/// var rpc = RPCService.unimplemented
/// rpc.override(GetUser.self) { call in User(id: call.userId, name: "Ada", email: "ada@example.com") }
/// let user = try await rpc.call(GetUser(userId: "u1"))    // the override's User
/// _ = try await rpc.call(ListUsers())                      // throws RPCClientError.unimplemented
/// ```
public struct RPCService: Sendable {
    /// Performs one call; returns its `Output` (type-erased). Every other member goes through it.
    public var perform: @Sendable (_ call: any RPCCall, _ timeout: CallTimeout) async throws -> any Sendable

    public init(perform: @escaping @Sendable (_ call: any RPCCall, _ timeout: CallTimeout) async throws -> any Sendable) {
        self.perform = perform
    }

    /// The typed call, as on `RPCClient` (a mutation gets a key from the client's options).
    public func call<C: RPCCall>(_ call: C, timeout: CallTimeout = .default) async throws -> C.Output {
        let output = try await perform(call, timeout)
        guard let typed = output as? C.Output else {
            throw RPCClientError.badReply(method: C.method, id: "", reason: "the service returned a \(type(of: output)), not a \(C.Output.self)")
        }
        return typed
    }

    /// `call(_:timeout:)` with `timeout: .after(timeout)`.
    public func call<C: RPCCall>(_ call: C, timeout: Duration) async throws -> C.Output {
        try await self.call(call, timeout: .after(timeout))
    }

    /// Calls go to the daemon through `client`.
    public static func live(_ client: RPCClient) -> RPCService {
        RPCService { call, timeout in try await client.call(call, timeout: timeout) }
    }

    /// Every call throws `RPCClientError.unimplemented(method:)`: the base of a test double.
    public static let unimplemented = RPCService { call, _ in
        throw RPCClientError.unimplemented(method: type(of: call).method)
    }

    /// From now on, calls of type `C` are answered by `handler`; other calls as before.
    public mutating func override<C: RPCCall>(_ type: C.Type, with handler: @escaping @Sendable (C) async throws -> C.Output) {
        let previous = perform
        perform = { call, timeout in
            if let call = call as? C { return try await handler(call) }
            return try await previous(call, timeout)
        }
    }

    /// From now on, every call of type `C` returns `output`.
    public mutating func override<C: RPCCall>(_ type: C.Type, returning output: C.Output) {
        override(type) { _ in output }
    }

    /// From now on, every call of type `C` throws `error` (e.g. `RPCClientError.server(...)`).
    public mutating func override<C: RPCCall>(_ type: C.Type, throwing error: any Error) {
        override(type) { (_: C) throws -> C.Output in throw error }
    }

    /// A copy with calls of type `C` answered by `handler`.
    public func overriding<C: RPCCall>(_ type: C.Type, with handler: @escaping @Sendable (C) async throws -> C.Output) -> RPCService {
        var copy = self
        copy.override(type, with: handler)
        return copy
    }
}
