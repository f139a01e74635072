import Testing
@testable import RPCSchema

/// The records that write themselves must write exactly what their `Encodable` conformance does
/// (the client decodes them with `Decodable`).
@Suite struct JSONWritableTests {
    func direct(_ value: some JSONWritable) -> String {
        var out: [UInt8] = []
        value.writeJSON(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    func viaEncodable(_ value: some Encodable) throws -> String {
        JSONWriter.string(try JSONValueEncoder().encode(value))
    }

    let tricky = "q\"uo\\te\n\t\u{1}é😀/"

    @Test func user() throws {
        for user in [User(id: "u1", name: "Ada", email: "a@x"), User(id: tricky, name: tricky, email: tricky)] {
            #expect(direct(user) == (try viaEncodable(user)))
        }
    }

    /// A user is gathered on the stack and appended at once unless a field needs an escape or the
    /// object passes the gathering's 256 bytes: each way, byte for byte what `Encodable` writes,
    /// after whatever the buffer held.
    @Test("users gathered or not: one field with an escape, non-ASCII, empty fields, lengths around 256 bytes")
    func userGatheredOrNot() throws {
        var users = [
            User(id: "", name: "", email: ""), User(id: "é😀", name: "名前", email: "a/b@x"),
            User(id: "u\"", name: "Ada", email: "a@x"), User(id: "u1", name: "A\u{7F}\u{1F}", email: "a@x"),
            User(id: "u1", name: "Ada", email: "a\\@x"),
        ]
        let frame = #"{"id":"u1","name":"Ada","email":""}"#.utf8.count  // 35 bytes around the email
        for length in [200, 220, 256 - frame - 1, 256 - frame, 256 - frame + 1, 300] {
            users.append(User(id: "u1", name: "Ada", email: String(repeating: "e", count: length)))
        }
        for user in users {
            var out = Array("kept".utf8)
            user.writeJSON(into: &out)
            #expect(String(decoding: out, as: UTF8.self) == "kept" + (try viaEncodable(user)), "\(user)")
        }
    }

    /// `JSONWriter.write` gathers values that fit and need no escape, and writes the rest piece
    /// by piece: the same text either way.
    @Test("JSON values gathered or not: nesting, every kind, escapes at any depth, sizes around 256 bytes")
    func valuesGatheredOrNot() throws {
        let texts = [
            #"{}"#, #"[]"#, #""""#, #"null"#, #"-0.5e+3"#,
            #"{"id":"u1","name":"Ada","email":"a@x"}"#,
            #"{"a":[true,false,null,1,"x",{"b":[[]]}],"c":{}}"#,
            #"{"a":[1,2,{"deep":"q\"uote"}]}"#, #"{"k\\ey":1}"#, #"["é😀","\u0001"]"#,
            #"{"s":""# + String(repeating: "s", count: 242) + #""}"#,  // 250 bytes
            #"{"s":""# + String(repeating: "s", count: 248) + #""}"#,  // 256
            #"{"s":""# + String(repeating: "s", count: 249) + #""}"#,  // 257
            "[" + Array(repeating: #"{"id":"u1","n":12.5}"#, count: 40).joined(separator: ",") + "]",
        ]
        for text in texts {
            let value = try JSONParser.parse(Array(text.utf8))
            var out = Array("kept".utf8)
            JSONWriter.write(value, into: &out)
            #expect(String(decoding: out, as: UTF8.self) == "kept" + text, "\(text.prefix(60))")
        }
    }

    @Test("gathering appends everything or nothing: an escape or a 257th byte leaves the buffer as it was")
    func gatheringIsAllOrNothing() {
        var out = Array("x".utf8)
        #expect(JSONWriter.gathered(into: &out) { $0.literal("ab"); $0.plain("cd"); $0.byte(UInt8(ascii: "e")) })
        #expect(out == Array("xabcde".utf8))
        #expect(!JSONWriter.gathered(into: &out) { $0.literal("ab"); $0.plain("c\"d") })
        #expect(!JSONWriter.gathered(into: &out) { $0.plain("c\nd") })
        #expect(!JSONWriter.gathered(into: &out) { $0.plain(String(repeating: "z", count: 256)); $0.byte(0x41) })
        #expect(!JSONWriter.gathered(into: &out) { $0.plain(String(repeating: "z", count: 257)) })
        #expect(out == Array("xabcde".utf8))
        #expect(JSONWriter.gathered(into: &out) { $0.plain(String(repeating: "z", count: 255)); $0.byte(0x41) })
        #expect(out == Array("xabcde".utf8) + Array(repeating: UInt8(ascii: "z"), count: 255) + [0x41])
    }

    @Test func building() throws {
        for building in [
            Building(id: "b1", name: "H", address: "A", residents: []),
            Building(id: tricky, name: "H", address: tricky, residents: ["u1", tricky]),
        ] {
            #expect(direct(building) == (try viaEncodable(building)))
        }
    }

    @Test func pagesAndDeleted() throws {
        let users = [User(id: "a", name: "A", email: "a@x"), User(id: "b", name: "B", email: "b@x")]
        for page in [UserPage(users: []), UserPage(users: users, next: "b")] {
            #expect(direct(page) == (try viaEncodable(page)))
        }
        let buildings = [Building(id: "b", name: "B", address: "", residents: ["a"])]
        for page in [BuildingPage(buildings: []), BuildingPage(buildings: buildings, next: "b")] {
            #expect(direct(page) == (try viaEncodable(page)))
        }
        #expect(direct(Deleted(deleted: tricky)) == (try viaEncodable(Deleted(deleted: tricky))))
    }

    @Test func paramWriterErrorsReplaceTheLine() {
        var out = Array("before\n".utf8)
        let error = RequestCodec.encode(id: "7", method: RPCMethod("user", "getUserResult"), form: .canonical, into: &out) { out in
            out += Array("{\"partial".utf8)
            return .internal("boom")
        }
        #expect(error?.code == .internal)
        #expect(String(decoding: out, as: UTF8.self)
            == "before\n" + #"{"id":"7","method":"error.error","param":{"errorMessage":"boom","code":"internal"}}"# + "\n")
    }
}
