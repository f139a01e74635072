import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// The client with extreme timeouts and byte-exact request ids (issue 10, items 1 and 10).
@Suite("RPCClient edges", .ownExecutor)
struct ClientEdgeTests {
    @Test("timeouts and backoff of Int64.max seconds: calls still complete")
    func hugeTimeouts() async throws {
        try await withDaemonAsync { daemon in
            let options = RPCClientOptions(
                defaultTimeout: .seconds(Int64.max), connectTimeout: .seconds(Int64.max),
                reconnect: ReconnectPolicy(initialDelay: .seconds(Int64.max), maxDelay: .seconds(Int64.max), multiplier: .nan))
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: options)
            defer { client.close() }
            #expect(try await client.call(ListUsers(limit: Int.max)).isEmpty)
            #expect(try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(Int64.max)).id == "u1")
        }
    }

    @Test("request ids that are canonically equivalent are two calls in flight, each matched to its own reply")
    func canonicallyEquivalentRequestIDs() async throws {
        try await withDaemonAsync { daemon in
            let ids = ["caf\u{E9}", "cafe\u{301}", "\u{212A}", "K"]
            let next = Locked(0)
            let generator = RPCIDGenerator { next.withLock { n in defer { n += 1 }; return ids[n % ids.count] } }
            let client = try await RPCClient.connect(
                host: "127.0.0.1", port: daemon.port, options: RPCClientOptions(idGenerator: generator))
            defer { client.close() }
            let results = await client.batch([GetUser(userId: "a"), GetUser(userId: "b"), GetUser(userId: "c"), GetUser(userId: "d")])
            for (result, user) in zip(results, ["a", "b", "c", "d"]) {
                guard case .failure(.server(let code, let message, _, _)) = result else {
                    Issue.record("expected notFound for \(user), got \(result)")
                    continue
                }
                // Each call got the reply to its own request, not its canonically equal twin's.
                #expect(code == .notFound && message.contains("\"\(user)\""), "\(user): \(message)")
            }
        }
    }
}
