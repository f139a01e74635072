import Testing

/// Every numeric edge of a list's `limit` over the wire (issue 10, item 1): one line must never
/// crash the daemon. Limits from 1 to Int.max are served (above the record count means all);
/// anything else is invalidParams.
@Suite("list limits")
struct ListLimitTests {
    static let methods = [("user.listUsers", "users"), ("building.listBuildings", "buildings")]

    private func seed(_ c: LineClient) throws {
        for n in 0..<3 {
            #expect(try c.request(Wire.createUser("c\(n)", "u\(n)", "N", "n@x")).contains("createUserResult"))
            #expect(try c.request(Wire.addBuilding("b\(n)", "u\(n)", "B", "A", [])).contains("addBuildingResult"))
        }
    }

    @Test("limits near Int.max after an id: the rest of the list, no overflow", arguments: methods)
    func hugeLimits(_ method: String, _ key: String) throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try seed(c)
            for (after, limit, ids) in [
                ("u1", "9223372036854775807", ["u2"]), ("u0", "9223372036854775807", ["u1", "u2"]),
                ("u2", "9223372036854775806", ["u2"].dropLast()), ("u1", "9223372036854775806", ["u2"]),
                ("u0", "9223372036854775805", ["u1", "u2"]), ("", "9223372036854775807", ["u0", "u1", "u2"]),
            ] {
                let line = try c.request(Wire.request("l", method, #"{"after":"\#(after)","limit":\#(limit)}"#))
                let reply = try Reply(line)
                #expect(!reply.isError && reply.listIDs(key) == Array(ids) && !reply.hasNext, "after \(after) limit \(limit): \(line)")
            }
            // Without after, and a limit that pages.
            let all = try Reply(c.request(Wire.request("a", method, #"{"limit":9223372036854775807}"#)))
            #expect(all.listIDs(key) == ["u0", "u1", "u2"] && !all.hasNext, "\(all.line)")
            let page = try Reply(c.request(Wire.request("p", method, #"{"after":"u0","limit":1}"#)))
            #expect(page.listIDs(key) == ["u1"] && page.next == "u1", "\(page.line)")
            #expect(try c.request(#"{"id":"z","method":"system.ping"}"#).contains("pingResult"))
        }
    }

    @Test("limits below 1, not whole, or outside Int: invalidParams, and the daemon keeps serving", arguments: methods)
    func badLimits(_ method: String, _ key: String) throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try seed(c)
            let bad = [
                "0", "-1", "-0", "-9223372036854775808", "-9223372036854775807", "9223372036854775808",
                "-9223372036854775809", "18446744073709551616", "1e300", "-1e300", "1e309", "1.5", "1e2", "1.0",
                "0.5", #""5""#, "true", "[1]", "{}",
            ]
            for (n, limit) in bad.enumerated() {
                for after in [nil, "u1"] {
                    let param = after.map { #"{"after":"\#($0)","limit":\#(limit)}"# } ?? #"{"limit":\#(limit)}"#
                    let reply = expectError(try c.request(Wire.request("b\(n)", method, param)), code: "invalidParams", id: "b\(n)")
                    #expect(reply?.errorMessage?.contains("limit") == true, "limit \(limit): \(reply?.line ?? "")")
                }
            }
            // null is the same as no limit.
            let all = try Reply(c.request(Wire.request("n", method, #"{"after":"u0","limit":null}"#)))
            #expect(all.listIDs(key) == ["u1", "u2"], "\(all.line)")
            #expect(try c.request(#"{"id":"z","method":"system.ping"}"#).contains("pingResult"))
        }
    }
}
