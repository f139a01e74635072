import Testing
import RPCSchema
@testable import RPCEntities

/// Drives the dispatcher with request lines and returns the reply lines (no sockets).
private final class Harness {
    let dispatcher = Dispatcher()
    var session = Dispatcher.Session()

    func send(_ line: String) -> String? {
        var out: [UInt8] = []
        let disposition = Array(line.utf8).withUnsafeBytes { dispatcher.handle(line: $0, session: &session, into: &out) }
        if disposition == .none { return nil }
        return String(decoding: out.dropLast(), as: UTF8.self)
    }

    func code(_ line: String) -> String? {
        guard let reply = send(line), reply.contains(#""method":"error.error""#),
            let range = reply.range(of: #""code":""#)
        else { return nil }
        return String(reply[range.upperBound...].prefix { $0 != "\"" })
    }
}

@Suite struct DispatcherTests {
    @Test func userLifecycle() {
        let h = Harness()
        #expect(h.send(#"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#)
            == #"{"id":"1","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"#)
        #expect(h.code(#"{"id":"2","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#) == "conflict")
        #expect(h.send(#"{"id":"3","method":"user.updateUser","param":{"userId":"u1","newName":"Bo"}}"#)
            == #"{"id":"3","method":"user.updateUserResult","param":{"id":"u1","name":"Bo","email":"a@x"}}"#)
        #expect(h.code(#"{"id":"4","method":"user.updateUser","param":{"userId":"u1","newName":""}}"#) == "invalidParams")
        #expect(h.code(#"{"id":"5","method":"user.updateUser","param":{"userId":"u1","newEmail":"nope"}}"#) == "invalidParams")
        // The @ is looked for anywhere in the address, in long and non-ASCII ones too.
        #expect(h.code(#"{"id":"5b","method":"user.createUser","param":{"id":"u2","name":"Al","email":"al.at.example.com.no.at.sign"}}"#) == "invalidParams")
        #expect(h.code(#"{"id":"5c","method":"user.createUser","param":{"id":"u3","name":"Al","email":"äöü-a-long-local-part-past-sixteen-bytes@x"}}"#) == nil)
        #expect(h.send(#"{"id":"6","method":"user.deleteUser","param":{"userId":"u1"}}"#)
            == #"{"id":"6","method":"user.deleteUserResult","param":{"deleted":"u1"}}"#)
        #expect(h.code(#"{"id":"7","method":"user.getUser","param":{"userId":"u1"}}"#) == "notFound")
        #expect(h.code(#"{"id":"8","method":"user.deleteUser","param":{"userId":"u1"}}"#) == "notFound")
    }

    @Test func paging() {
        let h = Harness()
        for id in ["c", "a", "d", "b"] {
            _ = h.send(#"{"id":"x","method":"user.createUser","param":{"id":"\#(id)","name":"n","email":"e@x"}}"#)
        }
        let page1 = h.send(#"{"id":"1","method":"user.listUsers","param":{"limit":2}}"#) ?? ""
        #expect(page1.contains(#"[{"id":"a""#) && page1.contains(#""next":"b""#))
        let page2 = h.send(#"{"id":"2","method":"user.listUsers","param":{"after":"b","limit":2}}"#) ?? ""
        #expect(page2.contains(#"[{"id":"c""#) && !page2.contains("next"))
        let all = h.send(#"{"id":"3","method":"user.listUsers"}"#) ?? ""
        #expect(all.components(separatedBy: #""name""#).count == 5 && !all.contains("next"))
        #expect(h.code(#"{"id":"4","method":"user.listUsers","param":{"limit":0}}"#) == "invalidParams")
    }

    @Test func buildingsAndResidents() {
        let h = Harness()
        _ = h.send(#"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#)
        #expect(h.code(#"{"id":"2","method":"building.addBuilding","param":{"id":"b1","name":"H","address":"A","residents":["u2"]}}"#) == "invalidParams")
        #expect(h.send(#"{"id":"3","method":"building.addBuilding","param":{"id":"b1","name":"H","address":"A","residents":["u1"]}}"#)
            == #"{"id":"3","method":"building.addBuildingResult","param":{"id":"b1","name":"H","address":"A","residents":["u1"]}}"#)
        #expect(h.code(#"{"id":"4","method":"building.addBuilding","param":{"id":"b1","name":"H","address":"A","residents":[]}}"#) == "conflict")
        #expect(h.code(#"{"id":"5","method":"building.updateBuilding","param":{"buildingId":"b1","newName":""}}"#) == "invalidParams")
        _ = h.send(#"{"id":"6","method":"user.deleteUser","param":{"userId":"u1"}}"#)
        #expect(h.send(#"{"id":"7","method":"building.getBuilding","param":{"buildingId":"b1"}}"#)
            == #"{"id":"7","method":"building.getBuildingResult","param":{"id":"b1","name":"H","address":"A","residents":[]}}"#)
        #expect(h.send(#"{"id":"8","method":"building.deleteBuilding","param":{"buildingId":"b1"}}"#)
            == #"{"id":"8","method":"building.deleteBuildingResult","param":{"deleted":"b1"}}"#)
        #expect(h.code(#"{"id":"9","method":"building.getBuilding","param":{"buildingId":"b1"}}"#) == "notFound")
    }

    @Test func paramErrorsNameTheField() {
        let h = Harness()
        let reply = h.send(#"{"id":"1","method":"user.listUsers","param":{"limit":"x"}}"#) ?? ""
        #expect(reply.contains("invalidParams") && reply.contains("limit"))
        let unknown = h.send(#"{"id":"2","method":"user.updateUser","param":{"userId":"u","newname":"x"}}"#) ?? ""
        #expect(unknown.contains("invalidParams") && unknown.contains("newname"))
        #expect(h.code(#"{"id":"3","method":"user.getUser","param":[]}"#) == "invalidParams")
        #expect(h.code(#"{"id":"4","method":"user.getUser"}"#) == "invalidParams")
        #expect(h.code(#"{"id":"5","method":"user.nope"}"#) == "methodNotFound")
        #expect(h.code(#"{"id":"6","method":"nope.nope"}"#) == "methodNotFound")
    }

    @Test func repliesUseTheFormOfTheFirstRequest() {
        let h = Harness()
        let seed = h.send(#"{"id":"1","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"x"}}}}"#) ?? ""
        #expect(seed == #"{"id":"1","method":{"error":{"_0":"error"}},"param":{"error":{"error":{"errorMessage":"no user \"x\"; user.listUsers shows the existing ids","code":"notFound"}}}}"#)
        let later = h.send(#"{"id":"2","method":"user.listUsers"}"#) ?? ""
        #expect(later == #"{"id":"2","method":{"user":{"_0":"listUsersResult"}},"param":{"user":{"listUsersResult":{"users":[]}}}}"#)
    }

    /// A reply's method is copied from the bytes its table entry wrote once; the id around it is
    /// escaped as ever, on the short path (on the stack) and the long one (over 256 bytes).
    @Test func repliesEscapeTheIdAroundTheirMethodsWrittenBytes() throws {
        let h = Harness()
        _ = h.send(#"{"id":"0","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#)
        let long = String(repeating: "i", count: 300)
        for id in [#"q\"uote"#, #"back\\slash"#, #"tab\t"#, "äöü", long, long + #"\""#] {
            let reply = try #require(h.send(#"{"id":""# + id + #"","method":"user.getUser","param":{"userId":"u1"}}"#))
            #expect(reply == #"{"id":""# + id + #"","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"#)
            let error = try #require(h.send(#"{"id":""# + id + #"","method":"user.getUser","param":{"userId":"nobody"}}"#))
            #expect(error.hasPrefix(#"{"id":""# + id + #"","method":"error.error","param":"#))
        }
    }

    /// A line whose param is an object of plain strings is decoded from its bytes (no `JSONValue`);
    /// every line gets the reply, and leaves the state, that the parsed request gets.
    @Test func plainParamsAnswerAsParsedOnes() throws {
        let lines = [
            #"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#,
            #"{"id":"2","method":"user.createUser","param":{"email":"b@x","name":"Bo","id":"u2"}}"#,
            #"{"id":"3","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}}"#,
            #"{"id":"4","method":"user.createUser","param":{"id":"u3","name":"Cy"}}"#,
            #"{"id":"5","method":"user.createUser","param":{"id":"u3","name":"Cy","email":"c@x","age":"9"}}"#,
            #"{"id":"6","method":"user.createUser","param":{"id":"u3","name":"","email":"c@x"}}"#,
            #"{"id":"7","method":"user.createUser","param":{"id":"u4","name":"Di","email":"d@x"},"key":"k1"}"#,
            #"{"id":"8","method":"user.createUser","param":{"id":"u4","name":"Di","email":"d@x"},"key":"k1"}"#,
            #"{"id":"9","method":"user.getUser","param":{"userId":"u2"}}"#,
            #"{"id":"10","method":"user.getUser","param":{"userid":"u2"}}"#,
            #"{"id":"11","method":"user.getUser","param":{}}"#,
            #"{"id":"12","method":"user.getUser","param":{"userId":"u2","x":"y"}}"#,
            #"{"id":"13","method":"user.updateUser","param":{"userId":"u2","newName":"Bea"}}"#,
            #"{"id":"14","method":"user.listUsers","param":{"after":"u1"}}"#,
            #"{"id":"15","method":"user.listUsers","param":{"limit":"2"}}"#,
            #"{"id":"16","method":"building.addBuilding","param":{"id":"b1","name":"H","address":"A"}}"#,
            #"{"id":"17","method":"building.getBuilding","param":{"buildingId":"b1"}}"#,
            #"{"id":"18","method":"user.deleteUser","param":{"userId":"u1"}}"#,
            #"{"id":"19","method":"user.nope","param":{"userId":"u1"}}"#,
            #"{"id":"20","method":"system.ping","param":{}}"#,
            #"{"id":"21","method":"user.getUser","param":{"userId":"u2"},"key":"k2"}"#,
            #"{"id":"22","method":"user.listUsers","param":{}}"#,
        ]
        let plain = Harness()
        let parsed = Harness()
        var plainCount = 0
        for line in lines {
            let bytes = Array(line.utf8)
            bytes.withUnsafeBytes { raw in
                let scanned = RequestCodec.scan(raw)
                let plainKey = scanned.left.plainKey
                if case .request(let request) = scanned.decoded, scanned.left.plainParam != nil {
                    plainCount += 1
                    #expect(request.param == nil, "\(line)")
                    // A plain key stays in the line too.
                    #expect(request.key == nil, "\(line)")
                    let key = line.range(of: #""key":""#).map { line[$0.upperBound...].prefix { $0 != "\"" } }.map(String.init)
                    #expect(plainKey.map { String(decoding: $0, as: UTF8.self) } == key, "\(line)")
                }
            }
            guard case .request(let request) = RequestCodec.decode(try JSONParser.parse(bytes)) else {
                Issue.record("not a request: \(line)")
                continue
            }
            var out: [UInt8] = []
            _ = parsed.dispatcher.serve(request, session: &parsed.session, into: &out)
            #expect(plain.send(line) == String(decoding: out.dropLast(), as: UTF8.self), "\(line)")
        }
        #expect(plainCount == lines.count, "every param above is plain")
    }

    @Test func counterRequestsAreNotAnswered() {
        let h = Harness()
        #expect(h.send(#"{"id":"1","method":"user.getUserResult","param":{}}"#) == nil)
        #expect(h.send(#"{"id":"1","method":"error.error","param":{"errorMessage":"x","code":"internal"}}"#) == nil)
    }
}

/// A log with `left` sequence numbers left, counting how often it is asked.
private final class CountingLog: MutationLog, @unchecked Sendable {
    // @unchecked: used from one test's thread.
    var left: Int
    var asked = 0
    var askedForTurn = 0
    var recorded: [UInt64] = []
    init(left: Int) { self.left = left }

    func refusal() -> String? {
        asked += 1
        return left > 0 ? nil : "used up"
    }
    func refusal(records count: Int) -> String? {
        askedForTurn += 1
        return left >= count ? nil : "fewer than \(count) left"
    }
    func record(_ body: JournalRecord.Body) -> UInt64? {
        left -= 1
        recorded.append(UInt64(recorded.count + 1))
        return UInt64(recorded.count)
    }
    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) { done(nil) }
}

@Suite struct DispatcherTurnTests {
    /// Stages creates u0..u(n-1) (and a get between them) and runs them as one turn.
    private func runTurn(_ log: CountingLog, creates: Int) -> [Dispatcher.Served] {
        let dispatcher = Dispatcher(log: log)
        var session = Dispatcher.Session()
        var calls: [Dispatcher.Call] = []
        var staged: [UInt8] = []
        for i in 0..<creates {
            let line = #"{"id":"\#(i)","method":"user.createUser","param":{"id":"u\#(i)","name":"N","email":"n@x"}}"#
            let request: Request
            guard case .request(let decoded) = Array(line.utf8).withUnsafeBytes({ RequestCodec.decode($0) }) else {
                Issue.record("not a request")
                return []
            }
            request = decoded
            guard case .call = dispatcher.stage(request, session: &session, into: &staged, calls: &calls) else {
                Issue.record("not staged: \(line)")
                return []
            }
            if i == 0 {
                let get = Request(id: "g", method: GetUser.method, param: ["userId": "u0"])
                guard case .call = dispatcher.stage(get, session: &session, into: &staged, calls: &calls) else {
                    Issue.record("get not staged")
                    return []
                }
            }
        }
        var out: [UInt8] = []
        var outcomes: [(served: Dispatcher.Served, end: Int)] = []
        dispatcher.run(calls[...], into: &out, outcomes: &outcomes)
        return outcomes.map(\.served)
    }

    @Test("a turn asks the log once for all its mutations, not before each")
    func oneQuestionPerTurn() {
        let log = CountingLog(left: 100)
        let served = runTurn(log, creates: 5)
        #expect(served.count == 6 && served.allSatisfy { !$0.failed })
        #expect(log.askedForTurn == 1)
        #expect(log.asked == 0)
        #expect(log.recorded.count == 5)
    }

    @Test("a turn the log cannot take whole asks before each mutation: those it has numbers for are applied, the rest refused")
    func refusedTurnAsksEach() {
        let log = CountingLog(left: 3)
        let served = runTurn(log, creates: 5)
        // create u0, get u0, creates u1..u4: three creates fit.
        #expect(served.map(\.failed) == [false, false, false, false, true, true])
        #expect(log.askedForTurn == 1)
        #expect(log.asked == 5)
        #expect(log.recorded.count == 3)
    }
}
