import Testing
@testable import RPCSchema

/// `decode(fastParams:)` only ever agrees with `Codable`: it decodes the plain shapes, and leaves
/// everything else (errors included) to `Codable`.
@Suite struct FastParamsTests {
    /// Params that differ in every way a field can: present, absent, null, of another type, empty,
    /// escaped, a number of each spelling.
    static let params: [String] = [
        #"{}"#,
        #"{"id":"u1","name":"Ada","email":"a@x"}"#,
        #"{"id":"u1","name":"Ada"}"#,
        #"{"id":"u1","name":"Ada","email":null}"#,
        #"{"id":"","name":"","email":""}"#,
        #"{"id":"caf\u00e9 \"q\"","name":"\ud83d\ude00","email":"e"}"#,
        #"{"id":1,"name":"Ada","email":"a@x"}"#,
        #"{"userId":"u1"}"#, #"{"userId":null}"#, #"{"userId":["u1"]}"#, #"{"userId":true}"#,
        #"{"userId":"u1","newName":"B"}"#, #"{"userId":"u1","newName":null,"newEmail":"e"}"#,
        #"{"userId":"u1","newName":7}"#,
        #"{"after":"u1","limit":10}"#, #"{"limit":0}"#, #"{"limit":-1}"#, #"{"limit":1.0}"#, #"{"limit":1e2}"#,
        #"{"limit":99999999999999999999999}"#, #"{"limit":"10"}"#, #"{"after":null,"limit":null}"#, #"{"after":5}"#,
        #"{"id":"b1","name":"T","address":"1 Main","residents":["u1","u2"]}"#,
        #"{"id":"b1","name":"T","address":"1 Main","residents":[]}"#,
        #"{"id":"b1","name":"T","address":"1 Main"}"#,
        #"{"id":"b1","name":"T","address":"1 Main","residents":null}"#,
        #"{"id":"b1","name":"T","address":"1 Main","residents":["u1",2]}"#,
        #"{"id":"b1","name":"T","address":"1 Main","residents":"u1"}"#,
        #"{"buildingId":"b1"}"#, #"{"buildingId":"b1","newResidents":["u3"],"newName":null}"#,
        #"{"buildingId":"b1","newResidents":[null]}"#, #"{"buildingId":"b1","newAddress":{}}"#,
    ]

    static func check<C: RPCCall & Equatable>(_ type: C.Type, plain: Set<String>) throws {
        for text in params {
            guard case .object(let object) = try JSONParser.parse(Array(text.utf8)) else { continue }
            let fast = C.decode(fastParams: object)
            let codable = try? JSONValueDecoder().decode(C.self, from: .object(object))
            if let fast {
                #expect(fast == codable, "\(C.method) \(text)")
                // Nothing the daemon would refuse as an unknown field.
                #expect(object.pairs.allSatisfy { pair in C.fields.contains { $0.name == pair.key } }, "\(C.method) \(text)")
            }
            #expect((fast != nil) == plain.contains(text), "\(C.method) \(text): fast \(fast.map { "\($0)" } ?? "nil")")
        }
    }

    @Test func userCallsAgreeWithCodable() throws {
        try Self.check(CreateUser.self, plain: [
            #"{"id":"u1","name":"Ada","email":"a@x"}"#, #"{"id":"","name":"","email":""}"#,
            #"{"id":"caf\u00e9 \"q\"","name":"\ud83d\ude00","email":"e"}"#,
        ])
        try Self.check(GetUser.self, plain: [#"{"userId":"u1"}"#])
        try Self.check(DeleteUser.self, plain: [#"{"userId":"u1"}"#])
        try Self.check(UpdateUser.self, plain: [
            #"{"userId":"u1"}"#, #"{"userId":"u1","newName":"B"}"#, #"{"userId":"u1","newName":null,"newEmail":"e"}"#,
        ])
        try Self.check(ListUsers.self, plain: Self.lists)
    }

    @Test func buildingCallsAgreeWithCodable() throws {
        try Self.check(AddBuilding.self, plain: [
            #"{"id":"b1","name":"T","address":"1 Main","residents":["u1","u2"]}"#,
            #"{"id":"b1","name":"T","address":"1 Main","residents":[]}"#,
        ])
        try Self.check(GetBuilding.self, plain: [#"{"buildingId":"b1"}"#])
        try Self.check(DeleteBuilding.self, plain: [#"{"buildingId":"b1"}"#])
        try Self.check(UpdateBuilding.self, plain: [#"{"buildingId":"b1"}"#, #"{"buildingId":"b1","newResidents":["u3"],"newName":null}"#])
        try Self.check(ListBuildings.self, plain: Self.lists)
    }

    /// The params a list call takes fast: `after` a string, null or absent, `limit` plain digits,
    /// null or absent, and nothing else.
    static let lists: Set<String> = [#"{}"#, #"{"after":"u1","limit":10}"#, #"{"limit":0}"#, #"{"after":null,"limit":null}"#]

    /// Params of plain strings, and near misses the scanner must leave to the parser.
    static let plainEdges: [String] = [
        #"{"userId":"u1","userId":"u2"}"#, #"{"email":"a@x","name":"Ada","id":"u1"}"#, #"{"userId":"u1","x":"y"}"#,
        #"{"userId":"u 1 ~!"}"#, #"{ "userId":"u1"}"#, #"{"userId":"u1" }"#, #"{"userId" :"u1"}"#, #"{"userId":"a\/b"}"#,
        "{\"userId\":\"\u{E9}\"}", "{\"userId\":\"a\u{7F}\"}", "{\"userId\":\"a\tb\"}",
        #"{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8"}"#,
        #"{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}"#,
        #"{"a":"1","b":"2","a":"3"}"#, #"{"ab":"1","a":"2"}"#, #"{"":""}"#, #"{"":"","":""}"#,
        #"{"userId":"u1",}"#, #"{"userId"}"#, #"{"userId":"u1""#, #"{"userId":"u1"}}"#, #"{,}"#, #"{"#, #"{"userId":"#,
    ]

    /// A plain param (`EnvelopeScanner.plainObject`) is exactly an object of printable-ASCII strings
    /// (no quote, no backslash) as a writer writes it, with at most eight pairs; decoded from its
    /// bytes, each call is what the parsed object gives (no `JSONValue` made). Anything else is
    /// left where it was, for the parser.
    @Test func plainParamsDecodeAsParsedOnes() throws {
        var plainCount = 0
        for text in Self.params + Self.plainEdges {
            // As in a request line: the envelope goes on after the param.
            let bytes = Array(text.utf8) + Array(#","key":"k"}"#.utf8)
            let read = bytes.withUnsafeBytes { try? JSONParser.parseValue(in: $0, at: 0) }
            let parsed = read?.value
            var expected = false
            if case .object(let object)? = parsed, object.count <= PlainObject.maxPairs, let read {
                var written: [UInt8] = []
                JSONWriter.write(.object(object), into: &written)
                let plainText = { (s: String) in s.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") } }
                expected = written == Array(bytes[..<read.end]) && object.pairs.allSatisfy { pair in
                    guard case .string(let value) = pair.value else { return false }
                    return plainText(pair.key) && plainText(value)
                }
            }
            bytes.withUnsafeBytes { raw in
                var scan = EnvelopeScanner(raw)
                let plain = scan.plainObject()
                #expect((plain != nil) == expected, "\(text)")
                guard let plain, case .object(let object)? = parsed else {
                    #expect(scan.position == 0, "\(text): a refused param leaves the position")
                    return
                }
                plainCount += 1
                #expect(scan.position == read?.end && plain.count == object.count, "\(text)")
                #expect(plain.value == parsed, "\(text)")
                #expect(CreateUser.decode(plain: plain) == CreateUser.decode(fastParams: object), "\(text)")
                #expect(GetUser.decode(plain: plain) == GetUser.decode(fastParams: object), "\(text)")
                #expect(UpdateUser.decode(plain: plain) == UpdateUser.decode(fastParams: object), "\(text)")
                #expect(ListUsers.decode(plain: plain) == ListUsers.decode(fastParams: object), "\(text)")
                #expect(AddBuilding.decode(plain: plain) == AddBuilding.decode(fastParams: object), "\(text)")
                #expect(UpdateBuilding.decode(plain: plain) == UpdateBuilding.decode(fastParams: object), "\(text)")
                #expect(DeleteBuilding.decode(plain: plain) == DeleteBuilding.decode(fastParams: object), "\(text)")
            }
        }
        #expect(plainCount >= 12, "the list holds plain params: \(plainCount)")
        #expect(GetUser.decode(plain: try #require(Self.plain(#"{"userId":"u1"}"#))) == GetUser(userId: "u1"))
        #expect(CreateUser.decode(plain: try #require(Self.plain(#"{"email":"a@x","name":"Ada","id":"u1"}"#)))
            == CreateUser(id: "u1", name: "Ada", email: "a@x"))
    }

    /// A plain object over bytes that outlive it (test use only).
    private static func plain(_ text: String) -> PlainObject? {
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: text.utf8.count, alignment: 1)
        bytes.copyBytes(from: text.utf8)  // leaked on purpose: the view must stay valid
        var scan = EnvelopeScanner(UnsafeRawBufferPointer(bytes))
        return scan.plainObject()
    }
}
