import Testing

@Suite("user methods")
struct UserMethodTests {
    @Test("createUser, getUser, duplicate id is conflict")
    func createAndGet() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(
                try c.request(#"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}"#)
                    == #"{"id":"1","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}"#)
            #expect(
                try c.request(#"{"id":"2","method":"user.getUser","param":{"userId":"u1"}}"#)
                    == #"{"id":"2","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}"#)
            expectError(
                try c.request(#"{"id":"3","method":"user.createUser","param":{"id":"u1","name":"Bob","email":"bob@example.com"}}"#),
                code: "conflict", id: "3")
            // The failed create changed nothing.
            #expect(
                try c.request(Wire.getUser("4", "u1")) == Wire.result("4", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
            // Another connection sees the same state.
            let other = try LineClient(port: daemon.port)
            #expect(
                try other.request(Wire.getUser("5", "u1")) == Wire.result("5", "user.getUser", Wire.user("u1", "Ada", "ada@example.com")))
        }
    }

    @Test("createUser validation: empty name, email without @, missing field are invalidParams")
    func createValidation() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            expectError(try c.request(Wire.createUser("1", "u1", "", "a@example.com")), code: "invalidParams", id: "1")
            expectError(try c.request(Wire.createUser("2", "u1", "Ada", "ada.example.com")), code: "invalidParams", id: "2")
            expectError(
                try c.request(#"{"id":"3","method":"user.createUser","param":{"id":"u1","name":"Ada"}}"#),
                code: "invalidParams", id: "3")
            expectError(
                try c.request(#"{"id":"4","method":"user.createUser","param":{"name":"Ada","email":"a@b"}}"#),
                code: "invalidParams", id: "4")
            // Unknown param fields are invalidParams (README: a typo is not silently ignored).
            expectError(
                try c.request(#"{"id":"4b","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@b","nmae":"x"}}"#),
                code: "invalidParams", id: "4b")
            // None of them created anything.
            expectError(try c.request(Wire.getUser("5", "u1")), code: "notFound", id: "5")
            #expect(try c.request(#"{"id":"6","method":"user.listUsers"}"#) == #"{"id":"6","method":"user.listUsersResult","param":{"users":[]}}"#)
        }
    }

    @Test("updateUser: name, email, both; unknown id notFound; empty name and bad email invalidParams")
    func update() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(Wire.createUser("0", "u1", "Ada", "ada@example.com")) == Wire.createUserResult("0", "u1", "Ada", "ada@example.com"))
            #expect(
                try c.request(#"{"id":"1","method":"user.updateUser","param":{"userId":"u1","newName":"Ada L"}}"#)
                    == Wire.result("1", "user.updateUser", Wire.user("u1", "Ada L", "ada@example.com")))
            #expect(
                try c.request(#"{"id":"2","method":"user.updateUser","param":{"userId":"u1","newEmail":"al@example.org"}}"#)
                    == Wire.result("2", "user.updateUser", Wire.user("u1", "Ada L", "al@example.org")))
            #expect(
                try c.request(#"{"id":"3","method":"user.updateUser","param":{"userId":"u1","newName":"Countess","newEmail":"c@example.org"}}"#)
                    == Wire.result("3", "user.updateUser", Wire.user("u1", "Countess", "c@example.org")))
            expectError(
                try c.request(#"{"id":"4","method":"user.updateUser","param":{"userId":"nobody","newName":"X"}}"#),
                code: "notFound", id: "4")
            expectError(
                try c.request(#"{"id":"5","method":"user.updateUser","param":{"userId":"u1","newName":""}}"#),
                code: "invalidParams", id: "5")
            expectError(
                try c.request(#"{"id":"6","method":"user.updateUser","param":{"userId":"u1","newEmail":"no-at-sign"}}"#),
                code: "invalidParams", id: "6")
            expectError(
                try c.request(#"{"id":"7","method":"user.updateUser","param":{"newName":"X"}}"#),
                code: "invalidParams", id: "7")
            // Rejected updates changed nothing.
            #expect(try c.request(Wire.getUser("8", "u1")) == Wire.result("8", "user.getUser", Wire.user("u1", "Countess", "c@example.org")))
        }
    }

    @Test("deleteUser replies {\"deleted\":id}; afterwards get/update/delete are notFound")
    func delete() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            _ = try c.request(Wire.createUser("0", "u1", "Ada", "ada@example.com"))
            _ = try c.request(Wire.createUser("0", "u2", "Bob", "bob@example.com"))
            #expect(
                try c.request(#"{"id":"1","method":"user.deleteUser","param":{"userId":"u1"}}"#)
                    == #"{"id":"1","method":"user.deleteUserResult","param":{"deleted":"u1"}}"#)
            expectError(try c.request(Wire.getUser("2", "u1")), code: "notFound", id: "2")
            expectError(
                try c.request(#"{"id":"3","method":"user.deleteUser","param":{"userId":"u1"}}"#), code: "notFound", id: "3")
            expectError(
                try c.request(#"{"id":"4","method":"user.updateUser","param":{"userId":"u1","newName":"X"}}"#),
                code: "notFound", id: "4")
            expectError(try c.request(Wire.getUser("5", "nobody")), code: "notFound", id: "5")
            // The other user is untouched, and the id can be reused.
            #expect(try c.request(Wire.getUser("6", "u2")) == Wire.result("6", "user.getUser", Wire.user("u2", "Bob", "bob@example.com")))
            #expect(try c.request(Wire.createUser("7", "u1", "Ada2", "a2@example.com")) == Wire.createUserResult("7", "u1", "Ada2", "a2@example.com"))
        }
    }

    @Test("listUsers: sorted by id, limit/after paging, next only when more remain, param optional")
    func list() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            #expect(try c.request(#"{"id":"e","method":"user.listUsers"}"#) == #"{"id":"e","method":"user.listUsersResult","param":{"users":[]}}"#)
            for n in [3, 5, 1, 4, 2] {
                _ = try c.request(Wire.createUser("c\(n)", "u\(n)", "N\(n)", "n\(n)@example.com"))
            }
            let all = (1...5).map { Wire.user("u\($0)", "N\($0)", "n\($0)@example.com") }.joined(separator: ",")

            // No param, empty param: all users, sorted, no next.
            #expect(try c.request(#"{"id":"1","method":"user.listUsers"}"#) == #"{"id":"1","method":"user.listUsersResult","param":{"users":[\#(all)]}}"#)
            #expect(try c.request(#"{"id":"2","method":"user.listUsers","param":{}}"#) == #"{"id":"2","method":"user.listUsersResult","param":{"users":[\#(all)]}}"#)

            func page(_ param: String) throws -> Reply {
                let reply = try Reply(try c.request(#"{"id":"p","method":"user.listUsers","param":\#(param)}"#))
                #expect(reply.method == "user.listUsersResult", "\(reply.line)")
                #expect(reply.id == "p")
                return reply
            }
            var r = try page(#"{"limit":2}"#)
            #expect(r.listIDs("users") == ["u1", "u2"] && r.next == "u2", "\(r.line)")
            r = try page(#"{"after":"u2","limit":2}"#)
            #expect(r.listIDs("users") == ["u3", "u4"] && r.next == "u4", "\(r.line)")
            r = try page(#"{"after":"u4","limit":2}"#)
            #expect(r.listIDs("users") == ["u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"after":"u4","limit":1}"#)  // exactly the rest: nothing remains, so no next
            #expect(r.listIDs("users") == ["u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"limit":5}"#)
            #expect(r.listIDs("users") == ["u1", "u2", "u3", "u4", "u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"limit":100}"#)
            #expect(r.listIDs("users") == ["u1", "u2", "u3", "u4", "u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"after":"u2"}"#)
            #expect(r.listIDs("users") == ["u3", "u4", "u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"after":"u25"}"#)  // `after` need not exist: strictly greater ids
            #expect(r.listIDs("users") == ["u3", "u4", "u5"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"after":"u5"}"#)
            #expect(r.listIDs("users") == [] && !r.hasNext, "\(r.line)")
            // The record shape inside lists.
            #expect(
                try c.request(#"{"id":"q","method":"user.listUsers","param":{"limit":1}}"#).contains(Wire.user("u1", "N1", "n1@example.com")))

            // Walking the pages with `next` visits every user once.
            var seen: [String] = []
            var after: String?
            for _ in 0..<10 {
                let param = after.map { #"{"after":"\#($0)","limit":2}"# } ?? #"{"limit":2}"#
                let reply = try page(param)
                seen += reply.listIDs("users") ?? []
                guard let next = reply.next else { break }
                after = next
            }
            #expect(seen == ["u1", "u2", "u3", "u4", "u5"])
        }
    }
}
