import RPCClient  // the client: connect, call, batch, RPCService
import RPCSchema  // the wire types: GetUser, User, RPCErrorCode, …

// The daemon's address: the first argument, or rpcd's default.
let address = CommandLine.arguments.dropFirst().first ?? "127.0.0.1:7878"
let client = try await RPCClient.connect(to: address)

// The param type names the method and the result type: no JSON, sockets or ids.
let ada: User = try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"))
let users: [User] = try await client.call(ListUsers())
print("created \(ada.name); \(users.count) user(s)")

// An error.error counter-request is thrown as RPCClientError, with its code and message.
do {
    _ = try await client.call(GetUser(userId: "nobody"))
} catch let error as RPCClientError where error.code == .notFound {
    print("not found: \(error.errorMessage)")
}

// Several calls in one write; one Result each, in order.
let (hall, missing) = await client.batch(
    AddBuilding(id: "b1", name: "Hall", address: "1 Main St", residents: ["u1"]),
    GetBuilding(buildingId: "b9"))
print("added \(try hall.get().name)")
if case .failure(let error) = missing { print("b9: \(error.errorMessage)") }

client.close()
