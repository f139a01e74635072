import Testing
@testable import RPCSchema

private func decode(_ text: String) -> DecodedLine {
    Array(text.utf8).withUnsafeBytes { RequestCodec.decode($0) }
}

private func encoded(_ body: (inout [UInt8]) -> Void) -> String {
    var out: [UInt8] = []
    body(&out)
    return String(decoding: out, as: UTF8.self)
}

@Suite struct RequestCodecTests {
    @Test func canonicalForm() throws {
        guard case .request(let request) = decode(#"{"id":"7","method":"user.getUser","param":{"userId":"u1"}}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.id == "7")
        #expect(request.method == RPCMethod("user", "getUser"))
        #expect(request.form == .canonical)
        #expect(request.param == .object(JSONObject([(key: "userId", value: .string("u1"))])))
    }

    @Test func seedForm() throws {
        let line = #"{"id":"1","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"3","name":"emi","email":"emi@example.com"}}}}"#
        guard case .request(let request) = decode(line) else {
            Issue.record("not a request")
            return
        }
        #expect(request.method == RPCMethod("user", "createUser"))
        #expect(request.form == .seed)
        #expect(request.param?.objectValue?["name"] == .string("emi"))
    }

    @Test func seedFormParamMustMatchTheMethod() {
        let line = #"{"id":"1","method":{"user":{"_0":"createUser"}},"param":{"user":{"getUser":{}}}}"#
        guard case .invalid(let id, let error, let form) = decode(line) else {
            Issue.record("accepted a mismatched seed param")
            return
        }
        #expect(id == "1")
        #expect(error.code == .invalidParams)
        #expect(form == .seed)
    }

    @Test func paramMayBeOmitted() {
        guard case .request(let request) = decode(#"{"id":"1","method":"user.listUsers"}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.param == nil)
    }

    @Test func counterRequestsAreRecognisedEvenWithoutAnId() {
        for line in [
            #"{"id":"1","method":"user.getUserResult","param":{}}"#,
            #"{"method":"error.error","param":{"errorMessage":"x","code":"internal"}}"#,
            #"{"id":5,"method":{"user":{"_0":"createUserResult"}}}"#,
        ] {
            guard case .counterRequest = decode(line) else {
                Issue.record("\(line) not seen as a counter-request")
                continue
            }
        }
    }

    @Test(arguments: [
        (#"not json"#, "", RPCErrorCode.parseError),
        (#"[1,2]"#, "", .invalidRequest),
        (#""x""#, "", .invalidRequest),
        (#"{"method":"user.getUser"}"#, "", .invalidRequest),
        (#"{"id":5,"method":"user.getUser"}"#, "", .invalidRequest),
        (#"{"id":"9"}"#, "9", .invalidRequest),
        (#"{"id":"9","method":5}"#, "9", .invalidRequest),
        (#"{"id":"9","method":"getUser"}"#, "9", .methodNotFound),
    ])
    func invalidLines(line: String, id: String, code: RPCErrorCode) {
        guard case .invalid(let gotID, let error, _) = decode(line) else {
            Issue.record("\(line) was accepted")
            return
        }
        #expect(gotID == id)
        #expect(error.code == code)
        #expect(!error.errorMessage.isEmpty && !error.errorMessage.contains("\n"))
    }

    @Test func invalidUTF8AndNULAreParseErrors() {
        for bytes in [[UInt8]("{\"id\":\"".utf8) + [0xFF] + Array("\"}".utf8), Array("{\"id\":\"a\u{0}\"}".utf8), [0]] {
            let result = bytes.withUnsafeBytes { RequestCodec.decode($0) }
            guard case .invalid(_, let error, _) = result else {
                Issue.record("accepted \(bytes)")
                continue
            }
            #expect(error.code == .parseError)
        }
    }

    @Test func encodesCanonicalReplies() {
        let text = encoded {
            RequestCodec.encode(
                id: "1", method: RPCMethod("user", "getUserResult"),
                param: .object(JSONObject([(key: "id", value: "u1")])), form: .canonical, into: &$0)
        }
        #expect(text == #"{"id":"1","method":"user.getUserResult","param":{"id":"u1"}}"# + "\n")
    }

    @Test func encodesSeedReplies() {
        let text = encoded {
            RequestCodec.encode(
                id: "1", method: RPCMethod("user", "createUserResult"),
                param: .object(JSONObject([(key: "id", value: "3")])), form: .seed, into: &$0)
        }
        #expect(text == #"{"id":"1","method":{"user":{"_0":"createUserResult"}},"param":{"user":{"createUserResult":{"id":"3"}}}}"# + "\n")
    }

    @Test func encodesErrorsInBothForms() {
        let error = RPCError.notFound("no user \"x\"")
        #expect(encoded { RequestCodec.encodeError(id: "2", error, form: .canonical, into: &$0) }
            == #"{"id":"2","method":"error.error","param":{"errorMessage":"no user \"x\"","code":"notFound"}}"# + "\n")
        #expect(encoded { RequestCodec.encodeError(id: "2", error, form: .seed, into: &$0) }
            == #"{"id":"2","method":{"error":{"_0":"error"}},"param":{"error":{"error":{"errorMessage":"no user \"x\"","code":"notFound"}}}}"# + "\n")
    }

    @Test func seedFormIsWhatJSONEncoderWritesForTheSeedTypes() throws {
        // The seed's RequestSchema: a synthesized enum method and a custom entity-wrapped param.
        enum UserMethod: String, Codable { case createUser }
        enum Method: Codable { case user(UserMethod) }
        let value = try JSONValueEncoder().encode(Method.user(.createUser))
        #expect(JSONWriter.string(value) == #"{"user":{"_0":"createUser"}}"#)
    }

    @Test func fieldsAreReadOffTheParamTypes() {
        #expect(UpdateUser.fields == [
            RPCField(name: "userId", type: "string", optional: false),
            RPCField(name: "newName", type: "string", optional: true),
            RPCField(name: "newEmail", type: "string", optional: true),
        ])
        #expect(AddBuilding.fields.map(\.type) == ["string", "string", "string", "[string]"])
        #expect(ListUsers.fields == [
            RPCField(name: "after", type: "string", optional: true),
            RPCField(name: "limit", type: "integer", optional: true),
        ])
    }
}

@Suite struct SeedMethodSpellingTests {
    @Test("a seed-form method whose entity or name holds a dot is invalid (it has no canonical spelling)")
    func dotsInSeedNames() {
        for line in [#"{"id":"1","method":{"user.x":{"_0":"getUser"}}}"#, #"{"id":"1","method":{"user":{"_0":"get.User"}}}"#] {
            let bytes = Array(line.utf8)
            let decoded = bytes.withUnsafeBytes { RequestCodec.decode($0) }
            guard case .invalid(let id, let error, _) = decoded else {
                Issue.record("decoded \(line) as \(decoded)")
                continue
            }
            #expect(id == "1" && error.code == .invalidRequest)
        }
    }
}

@Suite struct MethodParsingBytesTests {
    @Test("a combining mark right after the dot stays in the method name (found by the decoder fuzzer)")
    func combiningMarkAfterDot() throws {
        let method = try #require(RPCMethod(parsing: "user.\u{0301}getUser"))
        #expect(Array(method.entity.utf8) == Array("user".utf8))
        #expect(Array(method.name.utf8) == Array("\u{0301}getUser".utf8))
        #expect(Array(method.description.utf8) == Array("user.\u{0301}getUser".utf8))
    }
}
