import Testing

/// Ids are exact UTF-8 bytes over the wire (issue 10, item 10): `caf\u00e9` (é) and `cafe\u0301`
/// (e + combining acute) are the same text to Swift's `String ==`, but two users here; lists are in
/// byte order. Replies are compared as bytes, never as Swift strings.
@Suite("exact ids")
struct ExactIDTests {
    /// The ids as JSON escapes (what is sent) and as raw UTF-8 (what the daemon writes back).
    static let composed = (json: #"caf\u00e9"#, raw: "caf\u{E9}")
    static let decomposed = (json: #"cafe\u0301"#, raw: "cafe\u{301}")
    static let kelvin = (json: #"\u212a"#, raw: "\u{212A}")

    private func expectBytes(_ line: String, _ expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let same = line.utf8.elementsEqual(expected.utf8)  // not `==`: that is canonical equivalence
        #expect(same, "got \(line), expected \(expected)", sourceLocation: sourceLocation)
    }

    @Test("canonically equivalent ids are two users; get returns each; list is in byte order")
    func twoUsers() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            expectBytes(try c.request(Wire.createUser("1", Self.composed.json, "Composed", "c@x")),
                Wire.createUserResult("1", Self.composed.raw, "Composed", "c@x"))
            expectBytes(try c.request(Wire.createUser("2", Self.decomposed.json, "Decomposed", "d@x")),
                Wire.createUserResult("2", Self.decomposed.raw, "Decomposed", "d@x"))
            expectBytes(try c.request(Wire.createUser("3", "K", "Letter", "k@x")), Wire.createUserResult("3", "K", "Letter", "k@x"))
            expectBytes(try c.request(Wire.createUser("4", Self.kelvin.json, "Kelvin", "kelvin@x")),
                Wire.createUserResult("4", Self.kelvin.raw, "Kelvin", "kelvin@x"))
            // A second create with the same bytes is still a conflict.
            expectError(try c.request(Wire.createUser("5", Self.decomposed.json, "Again", "a@x")), code: "conflict", id: "5")

            expectBytes(try c.request(Wire.getUser("6", Self.composed.json)),
                Wire.result("6", "user.getUser", Wire.user(Self.composed.raw, "Composed", "c@x")))
            expectBytes(try c.request(Wire.getUser("7", Self.decomposed.json)),
                Wire.result("7", "user.getUser", Wire.user(Self.decomposed.raw, "Decomposed", "d@x")))
            expectBytes(try c.request(Wire.getUser("8", Self.kelvin.json)),
                Wire.result("8", "user.getUser", Wire.user(Self.kelvin.raw, "Kelvin", "kelvin@x")))

            // Byte order: "K" (4B) < "cafe\u0301" (65 CC 81) < "caf\u00e9" (C3 A9) < Kelvin (E2 84 AA).
            let users = [
                Wire.user("K", "Letter", "k@x"), Wire.user(Self.decomposed.raw, "Decomposed", "d@x"),
                Wire.user(Self.composed.raw, "Composed", "c@x"), Wire.user(Self.kelvin.raw, "Kelvin", "kelvin@x"),
            ]
            expectBytes(try c.request(Wire.request("9", "user.listUsers")),
                Wire.result("9", "user.listUsers", #"{"users":[\#(users.joined(separator: ","))]}"#))
            expectBytes(try c.request(Wire.request("10", "user.listUsers", #"{"after":"\#(Self.decomposed.json)","limit":1}"#)),
                Wire.result("10", "user.listUsers", #"{"users":[\#(users[2])],"next":"\#(Self.composed.raw)"}"#))

            // Deleting one leaves the other.
            expectBytes(try c.request(Wire.request("11", "user.deleteUser", #"{"userId":"\#(Self.composed.json)"}"#)),
                Wire.result("11", "user.deleteUser", #"{"deleted":"\#(Self.composed.raw)"}"#))
            expectError(try c.request(Wire.getUser("12", Self.composed.json)), code: "notFound", id: "12")
            expectBytes(try c.request(Wire.getUser("13", Self.decomposed.json)),
                Wire.result("13", "user.getUser", Wire.user(Self.decomposed.raw, "Decomposed", "d@x")))
        }
    }

    @Test("residents: both spellings are kept, and deleting one user removes only that one")
    func residents() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            _ = try c.request(Wire.createUser("1", Self.composed.json, "C", "c@x"))
            _ = try c.request(Wire.createUser("2", Self.decomposed.json, "D", "d@x"))
            let both = [Self.composed.raw, Self.decomposed.raw]
            expectBytes(
                try c.request(Wire.request("3", "building.addBuilding",
                    #"{"id":"b","name":"H","address":"A","residents":["\#(Self.composed.json)","\#(Self.decomposed.json)","\#(Self.composed.json)"]}"#)),
                Wire.result("3", "building.addBuilding", Wire.building("b", "H", "A", both)))
            _ = try c.request(Wire.request("4", "user.deleteUser", #"{"userId":"\#(Self.decomposed.json)"}"#))
            expectBytes(try c.request(Wire.request("5", "building.getBuilding", #"{"buildingId":"b"}"#)),
                Wire.result("5", "building.getBuilding", Wire.building("b", "H", "A", [Self.composed.raw])))
        }
    }
}
