import Testing

@Suite("counter-requests sent to the daemon")
struct CounterRequestTests {
    static let counterRequests = [
        #"{"id":"9","method":"user.getUserResult","param":{}}"#,
        #"{"id":"9","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}"#,
        #"{"id":"9","method":"building.listBuildingsResult","param":{"buildings":[]}}"#,
        #"{"id":"9","method":"error.error","param":{"errorMessage":"x","code":"internal"}}"#,
        #"{"id":"9","method":"error.error"}"#,
        #"{"method":"user.fooResult"}"#,
        #"{"id":7,"method":"user.barResult","param":"junk"}"#,
        #"{"id":"9","method":{"user":{"_0":"getUserResult"}},"param":{"user":{"getUserResult":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#,
        #"{"id":"9","method":{"error":{"_0":"error"}},"param":{"error":{"error":{"errorMessage":"x","code":"internal"}}}}"#,
    ]

    @Test("counter-requests get no reply, not even an error; the next request's reply comes next")
    func neverAnswered() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            for line in Self.counterRequests {
                try c.sendLine(line)
                #expect(
                    try c.request(#"{"id":"n","method":"user.listUsers"}"#)
                        == #"{"id":"n","method":"user.listUsersResult","param":{"users":[]}}"#,
                    "after \(line)")
            }
            // All of them pipelined at once, then one request.
            try c.send(Self.counterRequests.joined(separator: "\n") + "\n" + #"{"id":"last","method":"user.listUsers"}"# + "\n")
            #expect(try c.readLine() == #"{"id":"last","method":"user.listUsersResult","param":{"users":[]}}"#)
            #expect(c.isSilent(for: 0.3))
            // A counter-request does not change state (a createUserResult creates nothing).
            expectError(try c.request(Wire.getUser("g", "u1")), code: "notFound", id: "g")
        }
    }
}
