import RPCClient
import RPCSchema
import Testing

/// README's `RPCService` snippet, compiled and run here (IntegrationTests' ReadmeClientTests checks
/// the lines between the markers are README's, modulo indentation).
@Test("README's RPCService snippet compiles and behaves as it says")
func readmeServiceSnippet() async throws {
    // README begin
    var rpc = RPCService.unimplemented
    rpc.override(GetUser.self) { call in User(id: call.userId, name: "Ada", email: "ada@example.com") }
    let user = try await rpc.call(GetUser(userId: "u1"))   // from the override; any other call throws .unimplemented
    // README end
    #expect(user == User(id: "u1", name: "Ada", email: "ada@example.com"))
    await #expect(throws: RPCClientError.unimplemented(method: ListUsers.method)) { try await rpc.call(ListUsers()) }
}
