import RPCClient  // the client: connect, call, batch, RPCService
import RPCSchema  // the wire types: GetUser, User, RPCErrorCode, …

#if canImport(Glibc)
import Glibc  // exit
#endif

// The daemon's address: the first argument, or rpcd's default.
let address = CommandLine.arguments.dropFirst().first ?? "127.0.0.1:7878"

do {
    let client = try await RPCClient.connect(to: address)

    // The param type names the method and the result type: no JSON, sockets or ids.
    // An error.error counter-request is thrown as RPCClientError, with its code and message:
    // if "u1" exists already (a second run), read it instead of creating it.
    let ada: User
    do {
        ada = try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
    } catch let error as RPCClientError where error.code == .conflict {
        ada = try await client.call(GetUser(userId: "u1"))
    }
    let users: [User] = try await client.call(ListUsers())
    print("have \(ada.name); \(users.count) user(s)")

    do {
        _ = try await client.call(GetUser(userId: "nobody"))
    } catch let error as RPCClientError where error.code == .notFound {
        print("not found: \(error.errorMessage)")
    }

    // Several calls in one write; one Result each, in order.
    let (hall, missing) = await client.batch(
        AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]),
        GetBuilding(buildingId: "b9"))
    switch hall {
    case .success(let building): print("added \(building.name)")
    case .failure(let error): print("b1: \(error.errorMessage)")  // `conflict` on a second run
    }
    if case .failure(let error) = missing { print("b9: \(error.errorMessage)") }

    client.close()
} catch {
    // Connection failures, timeouts and unexpected errors: one line, exit status 1.
    print("rpc-example: \(error)")
    exit(1)
}
