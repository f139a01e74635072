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
}
