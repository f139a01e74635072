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
