import Testing

@Suite("seed form")
struct SeedFormTests {
    @Test("seed-form createUser gets the golden seed-form reply")
    func goldenCreate() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(
                try c.request(#"{"id":"1","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
                    == #"{"id":"1","method":{"user":{"_0":"createUserResult"}},"param":{"user":{"createUserResult":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
        }
    }

    @Test("a seed-first connection gets seed-form replies for every method, errors and later canonical requests")
    func seedFirstConnection() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(
                try c.request(#"{"id":"1","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
                    == #"{"id":"1","method":{"user":{"_0":"createUserResult"}},"param":{"user":{"createUserResult":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
            #expect(
                try c.request(#"{"id":"2","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"3"}}}}"#)
                    == #"{"id":"2","method":{"user":{"_0":"getUserResult"}},"param":{"user":{"getUserResult":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
            #expect(
                try c.request(#"{"id":"3","method":{"user":{"_0":"updateUser"}},"param":{"user":{"updateUser":{"userId":"3","newName":"Emi"}}}}"#)
                    == #"{"id":"3","method":{"user":{"_0":"updateUserResult"}},"param":{"user":{"updateUserResult":{"id":"3","name":"Emi","email":"emi@example.com"}}}}"#)
            #expect(
                try c.request(#"{"id":"4","method":{"user":{"_0":"listUsers"}},"param":{"user":{"listUsers":{}}}}"#)
                    == #"{"id":"4","method":{"user":{"_0":"listUsersResult"}},"param":{"user":{"listUsersResult":{"users":[{"id":"3","name":"Emi","email":"emi@example.com"}]}}}}"#)
            #expect(
                try c.request(#"{"id":"5","method":{"building":{"_0":"addBuilding"}},"param":{"building":{"addBuilding":{"id":"b","name":"HQ","address":"1 Main St","residents":["3"]}}}}"#)
                    == #"{"id":"5","method":{"building":{"_0":"addBuildingResult"}},"param":{"building":{"addBuildingResult":{"id":"b","name":"HQ","address":"1 Main St","residents":["3"]}}}}"#)

            // Errors in seed form: method {"error":{"_0":"error"}}, param {"error":{"error":{...}}}.
            let notFound = try c.request(#"{"id":"6","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"nobody"}}}}"#)
            expectError(notFound, code: "notFound", id: "6", seedForm: true)
            let reply = try Reply(notFound)
            #expect((reply.object["method"] as? [String: [String: String]]) == ["error": ["_0": "error"]], "\(notFound)")
            #expect(((reply.object["param"] as? [String: Any])?["error"] as? [String: Any])?["error"] is [String: Any], "\(notFound)")
            #expect(notFound.hasPrefix(#"{"id":"6","method":{"error":{"_0":"error"}},"param":{"error":{"error":{"#), "\(notFound)")

            // Later canonical requests on this connection still get seed-form replies.
            #expect(
                try c.request(#"{"id":"7","method":"user.deleteUser","param":{"userId":"3"}}"#)
                    == #"{"id":"7","method":{"user":{"_0":"deleteUserResult"}},"param":{"user":{"deleteUserResult":{"deleted":"3"}}}}"#)
            expectError(try c.request(#"{"id":"8","method":"user.getUser","param":{"userId":"3"}}"#), code: "notFound", id: "8", seedForm: true)
            expectError(try c.request(#"{"id":"9","method":"user.nope"}"#), code: "methodNotFound", id: "9", seedForm: true)
            expectError(try c.request(#"{"oops"#), code: "parseError", seedForm: true)
        }
    }

    @Test("a canonical-first connection gets canonical replies even for seed-form requests")
    func canonicalFirstConnection() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Wire.createUser("1", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
            #expect(
                try c.request(#"{"id":"2","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#)
                    == #"{"id":"2","method":"user.createUserResult","param":{"id":"3","name":"emi","email":"emi@example.com"}}"#)
            #expect(
                try c.request(#"{"id":"3","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"u1"}}}}"#)
                    == Wire.result("3", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
            expectError(
                try c.request(#"{"id":"4","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"zz"}}}}"#),
                code: "notFound", id: "4", seedForm: false)
        }
    }

    @Test("the form is per connection: seed and canonical connections side by side")
    func formIsPerConnection() throws {
        try withDaemon { daemon in
            let seed = try LineClient(port: daemon.port)
            let canonical = try LineClient(port: daemon.port)
            _ = try seed.request(#"{"id":"s","method":{"user":{"_0":"listUsers"}},"param":{"user":{"listUsers":{}}}}"#)
            _ = try canonical.request(#"{"id":"c","method":"user.listUsers"}"#)
            #expect(
                try seed.request(Wire.createUser("1", "u1", "Ada", "ada@example.com"))
                    == #"{"id":"1","method":{"user":{"_0":"createUserResult"}},"param":{"user":{"createUserResult":{"id":"u1","name":"Ada","email":"ada@example.com"}}}}"#)
            #expect(
                try canonical.request(#"{"id":"2","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"u1"}}}}"#)
                    == Wire.result("2", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
        }
    }
}
