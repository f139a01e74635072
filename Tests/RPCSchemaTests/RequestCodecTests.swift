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

/// What a decoded line is, comparable (DecodedLine is not Equatable).
private func describe(_ line: DecodedLine) -> String {
    switch line {
    case .request(let request): return "request \(request)"
    case .counterRequest(let request): return "counterRequest \(request)"
    case .invalid(let id, let error, let form): return "invalid \(id) \(error) \(String(describing: form))"
    }
}

/// The full decode: the line parsed as a JSON value, then its envelope read.
private func fullDecode(_ text: String) -> DecodedLine {
    Array(text.utf8).withUnsafeBytes { bytes in
        guard let value = try? JSONParser.parse(bytes) else { return .invalid(id: "", error: .parseError("-"), form: nil) }
        return RequestCodec.decode(value)
    }
}

@Suite struct RequestCodecWrittenShapeTests {
    @Test("a canonical line in the writers' shape is read without parsing its envelope, and exactly as the full decode reads it", arguments: [
        (#"{"id":"7","method":"user.getUser","param":{"userId":"u1"}}"#, true),
        (#"{"id":"7","method":"user.createUser","param":{"id":"u1","name":"A","email":"a@x"},"key":"k-1"}"#, true),
        (#"{"id":"7","method":"user.getUserResult","param":{"id":"u1"},"key":"k-1"}"#, true),
        (#"{"id":"7","method":"error.error","param":{"code":"x"}}"#, true),
        (#"{"id":"7","method":"user.getUser","param":null}"#, true),
        (#"{"id":"7","method":"user.getUser","param":"text"}"#, true),
        (#"{"id":"","method":"a.b","param":{}}"#, true),
        (#"{"id":"7","method":"user.createUser","param":{},"key":""# + String(repeating: "k", count: 128) + #""}"#, true),
        (#"{"id":"7","method":"user.getUser","param":"# + String(repeating: "[", count: 63) + String(repeating: "]", count: 63) + "}", true),
        (#"{"id":"7","method":"user.getUser","param":{"a":1,"a":2}}"#, true),
        // Anything else goes to the full decode, which decides.
        (#"{"id":"7","method":"user.getUser","param":"# + String(repeating: "[", count: 64) + String(repeating: "]", count: 64) + "}", false),
        (#"{"id":"7","method":"user.createUser","param":{},"key":""# + String(repeating: "k", count: 129) + #""}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"key":""}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"key":null}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"key":7}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"params":{}}"#, false),
        // Journal lines and the change feed: seq and crc after the envelope, both ignored.
        (#"{"id":"r7","method":"user.createUser","param":{"id":"a"},"seq":7,"crc":"77d7e3fc"}"#, true),
        (#"{"id":"r7","method":"user.createUser","param":{"id":"a"},"key":"k1","seq":7,"crc":"77d7e3fc"}"#, true),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":1}"#, true),
        (#"{"id":"7","method":"user.createUser","param":{},"crc":"x"}"#, true),
        (#"{"id":"7","method":"user.createUserResult","param":{},"seq":18446744073709551615}"#, true),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":18446744073709551616}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":-1}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":01}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":"1"}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":1.5}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"crc":"x","seq":1}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":1,"key":"k"}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"crc":"x\"y"}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":1,"seq":2}"#, false),
        (#"{"id":"7","method":"user.createUser","param":{},"seq":}"#, false),
        (#"{"id":"7","method":"user.createUser"}"#, false),
        (#"{"id":"7","method":"usercreateUser","param":{}}"#, false),
        (#"{"id":"7","method":"a.b.c","param":{}}"#, false),
        (#"{"id":"7","method":".b","param":{}}"#, false),
        (#"{"id":"7\"","method":"user.getUser","param":{}}"#, false),
        (#"{"id":"é","method":"user.getUser","param":{}}"#, false),
        (#"{"id":7,"method":"user.getUser","param":{}}"#, false),
        (#"{ "id":"7","method":"user.getUser","param":{}}"#, false),
        (#"{"id":"7","method":"user.getUser","param":{}} "#, false),
        (#"{"id":"7","method":"user.getUser","param":{}}x"#, false),
        (#"{"id":"7","method":"user.getUser","param":{}"#, false),
        (#"{"id":"7","method":"user.getUser","param":{"a":01}}"#, false),
        (#"{"id":"7","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"u1"}}}}"#, false),
        (#"{"method":"user.getUser","id":"7","param":{}}"#, false),
    ])
    func writtenShape(_ text: String, recognised: Bool) {
        let fast = Array(text.utf8).withUnsafeBytes { RequestCodec.decodeWritten($0)?.0 }
        #expect((fast != nil) == recognised, "\(text)")
        let full = describe(fullDecode(text))
        if let fast { #expect(describe(fast) == full, "\(text)") }
        if case .invalid(_, let error, _) = fullDecode(text), error.code == .parseError {
            if case .invalid(_, let chosen, _) = decode(text) { #expect(chosen.code == .parseError, "\(text)") } else { Issue.record("\(text)") }
        } else {
            #expect(describe(decode(text)) == full, "\(text)")
        }
    }
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

    @Test("lines without a param, and ids and method parts that need escapes, in both forms")
    func encodesBareLinesAndEscapes() {
        #expect(encoded { RequestCodec.encode(id: "4", method: RPCMethod("user", "listUsers"), param: nil, form: .canonical, into: &$0) }
            == #"{"id":"4","method":"user.listUsers"}"# + "\n")
        #expect(encoded { RequestCodec.encode(id: "4", method: RPCMethod("user", "listUsers"), param: nil, form: .seed, into: &$0) }
            == #"{"id":"4","method":{"user":{"_0":"listUsers"}}}"# + "\n")
        let odd = RPCMethod("u\"s", "g\\t")
        #expect(encoded { RequestCodec.encode(id: "a\"b\n", method: odd, param: .object(JSONObject()), form: .canonical, into: &$0) }
            == #"{"id":"a\"b\n","method":"u\"s.g\\t","param":{}}"# + "\n")
        #expect(encoded { RequestCodec.encode(id: "a\"b\n", method: odd, param: nil, form: .seed, into: &$0) }
            == #"{"id":"a\"b\n","method":{"u\"s":{"_0":"g\\t"}}}"# + "\n")
        // Line heads are gathered on the stack up to 256 bytes; longer ids are written piece by piece.
        for length in [200, 208, 209, 210, 300] {  // 47 bytes around the id
            let id = String(repeating: "i", count: length)
            #expect(encoded { RequestCodec.encode(id: id, method: RPCMethod("user", "getUserResult"), param: .object(JSONObject()), form: .canonical, into: &$0) }
                == #"{"id":""# + id + #"","method":"user.getUserResult","param":{}}"# + "\n")
        }
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

    @Test("a counter-request is a method whose name ends in the bytes Result, or error.error, exactly")
    func counterRequestsByBytes() {
        let yes = ["user.getUserResult", "x.Result", "error.error", "a.bResult", "caf\u{E9}.nResult"]
        let no = ["user.getUser", "x.result", "x.Resul", "error.errors", "errors.error", "Error.error", "error.Error", "x.Resultx", "x.esult"]
        for text in yes { #expect(RPCMethod(parsing: text)?.isCounterRequest == true, "\(text)") }
        for text in no { #expect(RPCMethod(parsing: text)?.isCounterRequest == false, "\(text)") }
        // For plain names the bytes and the text agree.
        for text in yes + no {
            guard let method = RPCMethod(parsing: text) else { continue }
            #expect(method.isCounterRequest == (method.name.hasSuffix("Result") || method == .error), "\(text)")
        }
    }

    @Test("a known method is taken from the table as the text would parse; any other text is not known")
    func knownMethods() {
        let known = [
            "user.createUser", "user.getUser", "user.listUsers", "building.addBuilding", "building.getBuildingResult",
            "system.ping", "system.auth", "system.describeResult", "replication.subscribe", "error.error", "user.createUserResult",
        ]
        let unknown = [
            "", "u", "user.getuser", "user.getUse", "user.getUserr", "user..getUser", "User.getUser", "user.getUser ",
            "user.nope", "error.errors", "building.getUser", "user.getBuilding", "system.pingResultResult",
        ]
        for text in known {
            let bytes = Array(text.utf8)
            let method = bytes.withUnsafeBytes { RPCMethod.known($0) }
            #expect(method != nil && method == RPCMethod(parsing: text), "\(text)")
            #expect(method?.description == text, "\(text)")
        }
        for text in unknown {
            #expect(Array(text.utf8).withUnsafeBytes { RPCMethod.known($0) } == nil, "\(text)")
        }
        // A line with a method outside the table is read as before.
        guard case .request(let request) = decode(#"{"id":"1","method":"user.nope","param":{}}"#) else {
            Issue.record("not a request")
            return
        }
        #expect(request.method == RPCMethod("user", "nope"))
    }

    @Test("parsed halves, taken without a second UTF-8 check, equal and hash as the same text built any other way")
    func parsedHalvesCompareAsText() throws {
        for (text, entity, name) in [("user.getUser", "user", "getUser"), ("caf\u{E9}.n\u{E9}", "caf\u{E9}", "n\u{E9}"),
                                     ("abcdefghijklmnopqrstuvwxyz.\u{1F600}longer-than-fifteen", "abcdefghijklmnopqrstuvwxyz", "\u{1F600}longer-than-fifteen")] {
            let parsed = try #require(RPCMethod(parsing: text))
            #expect(parsed == RPCMethod(entity, name), "\(text)")
            #expect(parsed.hashValue == RPCMethod(entity, name).hashValue, "\(text)")
            #expect(Set([parsed, RPCMethod(entity, name)]).count == 1, "\(text)")
            // Canonically equivalent text (e + combining acute) is the same String, as before.
            #expect(parsed.entity.count == entity.count, "\(text)")
        }
    }
}
