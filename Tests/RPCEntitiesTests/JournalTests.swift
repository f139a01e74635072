import Foundation
import Dispatch
@testable import RPCEntities
import RPCSchema
import Testing

@Suite("journal records, snapshots and replay (pure)")
struct JournalTests {
    private func line(_ request: Request, seq: UInt64) -> String {
        var out: [UInt8] = []
        JournalRecord.encode(request, seq: seq, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private func create(_ id: String, seq: UInt64) -> String {
        line(Request(id: "r\(seq)", method: CreateUser.method, param: ["id": .string(id), "name": "N", "email": "n@x"]), seq: seq)
    }

    private func replay(_ text: String, into replay: inout JournalReplay) -> Result<JournalReplay.FileOutcome, JournalReplay.Failure> {
        Array(text.utf8).withUnsafeBytes { replay.replayJournal($0) }
    }

    @Test("a record is the canonical request line plus \"seq\" and a trailing \"crc\" over the bytes before it, and decodes back")
    func roundTrip() throws {
        let request = Request(id: "7", method: CreateUser.method, param: ["id": "u1", "name": "Ada", "email": "a@x"])
        let text = line(request, seq: 42)
        let covered = #"{"id":"7","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"seq":42"#
        #expect(CRC32C.checksum(covered.utf8) == 0xB288_7B83)
        #expect(text == covered + #","crc":"b2887b83"}"# + "\n")
        #expect(RequestCodec.envelopeExtensionKeys == ["seq", "crc"])
        let decoded = Array(text.utf8.dropLast()).withUnsafeBytes { JournalRecord.decode($0) }
        let (back, seq) = try decoded.get()
        #expect(back == request && seq == 42)
        // The daemon's own decoder reads it as a plain request (seq and crc are ignored).
        guard case .request(let plain) = Array(text.utf8.dropLast()).withUnsafeBytes({ RequestCodec.decode($0) }) else {
            Issue.record("not a request")
            return
        }
        #expect(plain == request)
    }

    @Test("a record's body, encoded before its number is known, gives the line of the request with the id r<seq>; a feed line gives its body back")
    func bodyOfARecord() {
        let request = Request(id: "anything", method: CreateUser.method, param: ["id": "u1", "name": "Ada", "email": "a@x"], key: "k-1")
        var direct: [UInt8] = []
        JournalRecord.encode(Request(id: "r42", method: request.method, param: request.param, key: "k-1"), seq: 42, into: &direct)
        var viaBody: [UInt8] = []
        JournalRecord.encode(JournalRecord.Body(request), seq: 42, into: &viaBody)
        #expect(viaBody == direct)
        let line = Array(direct.dropLast())
        line.withUnsafeBytes { bytes in
            #expect(JournalRecord.Body(line: bytes, seq: 42)?.bytes == JournalRecord.Body(request).bytes)
            #expect(JournalRecord.Body(line: bytes, seq: 4) == nil, "another record's number")
            #expect(JournalRecord.Body(line: bytes, seq: 420) == nil, "another record's number")
        }
        for index in line.indices {
            var damaged = line
            damaged[index] ^= 0x01
            damaged.withUnsafeBytes { bytes in
                #expect(JournalRecord.Body(line: bytes, seq: 42) == nil, "byte \(index) flipped")
            }
        }
        var unsealed: [UInt8] = []
        RequestCodec.encode(Request(id: "r42", method: request.method, param: request.param), into: &unsealed)
        unsealed.dropLast().withUnsafeBytes { #expect(JournalRecord.Body(line: $0, seq: 42) == nil, "not a journal line") }
    }

    @Test("a request line's method and param are copied into its record only when they are what the writer writes", arguments: [
        // (the request line, whether its method and param are copied)
        (#"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada Lovelace","email":"a@x"}}"#, true),
        (#"{"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"key":"k-1"}"#, true),
        (#"{"id":"1","method":"user.createUser","param":{"id":"é","n":[1,-2.50,3e7,true,null,{}],"o":{"p":[]}}}"#, true),
        (#"{"id":"1","method":"user.createUser","param":{"id":"u1"},"seq":7}"#, true),
        (#"{"id":"1","method":"user.createUser","param":"x"}"#, true),
        (#"{"id":"1","method":"user.createUser","param":{"id": "u1"}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"id":"u1" }}"#, false),
        (#"{"id":"1","method":"user.createUser","param":[1, 2]}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"id":"u\"1"}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"id":"\u0041"}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"id":"\/"}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"id":"a","id":"b"}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":{"o":{"a":1,"b":2,"a":3}}}"#, false),
        (#"{"id":"1","method":"user.createUser","param":null}"#, false),
        (#"{"id":"1","method":{"user":{"_0":"createUser"}},"param":{"user":{"createUser":{"id":"u1"}}}}"#, false),
        (#"{"method":"user.createUser","id":"1","param":{"id":"u1"}}"#, false),
    ])
    func copiedMethodAndParam(_ text: String, copied: Bool) {
        Array(text.utf8).withUnsafeBytes { line in
            let scanned = RequestCodec.scan(line, plainParams: false)
            let written = scanned.left.methodAndParam
            guard case .request(let request) = scanned.decoded else {
                Issue.record("not a request: \(text)")
                return
            }
            #expect((written != nil) == copied, "\(text)")
            guard let written else { return }
            // What the record holds either way: the copy must be exactly what the writer writes.
            let copy = JournalRecord.Body(request, param: request.param, methodAndParam: written)
            #expect(copy.bytes == JournalRecord.Body(request).bytes, "\(text)")
            #expect(copy.digest == JournalRecord.Body(request).digest, "\(text)")
        }
    }

    @Test("a sealed line in the writer's shape is read without parsing its envelope, and exactly as the full parse reads it", arguments: [
        // (the line before its seal, whether the writer's shape is recognised)
        (#"{"id":"r42","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"seq":42"#, true),
        (#"{"id":"s","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"}"#, true),
        (#"{"id":"r7","method":"user.deleteUser","param":{"userId":"u1"},"key":"k-1","seq":7"#, true),
        (#"{"id":"r8","method":"user.createUser","param":null,"seq":8"#, true),
        (#"{"id":"r9","method":"x.y","param":[1,"2",{"a":[]}],"seq":9"#, true),
        (#"{"id":"r10","method":"user.createUser","param":{"id":"\u00e9\"","name":"é","email":"a"},"seq":10"#, true),
        (#"{"id":"r0","method":"user.createUser","param":{},"seq":0"#, true),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":18446744073709551615"#, true),
        (#"{"id":"","method":"","param":{}"#, true),
        // Anything else goes to the full parse, which decides.
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":18446744073709551616"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":007"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":-1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":1.0"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":"#, false),
        (#"{"id":"r\"1","method":"user.createUser","param":{},"seq":1"#, false),
        (#"{"id":"é","method":"user.createUser","param":{},"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"key":"","seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"key":""# + String(repeating: "k", count: 129) + #"","seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"key":7,"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"other":1,"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{},"seq":1,"seq":2"#, false),
        (#"{"id":"r1","method":"user.createUser","seq":1"#, false),
        (#"{"id":"r1","param":{},"method":"user.createUser","seq":1"#, false),
        (#"{"id":"r1", "method":"user.createUser","param":{},"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{} ,"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{"a":1,"a":2},"seq":1"#, true),
        (#"{"id":"r1","method":"user.createUser","param":{"a":01},"seq":1"#, false),
        (#"{"id":"r1","method":"user.createUser","param":{"#, false),
        (#"{"id":"r1","method":"user.createUser","param":"# + String(repeating: "[", count: 63) + String(repeating: "]", count: 63), true),
        (#"{"id":"r1","method":"user.createUser","param":"# + String(repeating: "[", count: 64) + String(repeating: "]", count: 64), false),
    ])
    func writtenShape(_ covered: String, recognised: Bool) throws {
        let text = sealedLine(covered)
        Array(text.utf8).withUnsafeBytes { line in
            #expect(JournalRecord.checksum(of: line) == .valid)
            let fast = JournalRecord.writtenFields(line)
            let full = JournalRecord.parsedFields(line, sealed: true)
            #expect((fast != nil) == recognised, "\(text)")
            if let fast { #expect(full == .success(fast), "\(text)") }
            let chosen = JournalRecord.fields(line)
            #expect(chosen == full, "\(text)")
        }
    }

    @Test("replay applies in order, reports the torn tail, skips what the snapshot covers")
    func replayJournal() throws {
        var state = JournalReplay()
        let text = create("u1", seq: 1) + create("u2", seq: 2) + #"{"id":"x","meth"#
        let outcome = try replay(text, into: &state).get()
        #expect(outcome.applied == 2 && outcome.tornBytes == 15 && outcome.validBytes == text.utf8.count - 15)
        #expect(state.state.users.count == 2 && state.lastSeq == 2)
        // Overlap with what is applied already: skipped, then continues.
        let more = try replay(create("u2", seq: 2) + create("u3", seq: 3), into: &state).get()
        #expect(more.skipped == 1 && more.applied == 1 && state.lastSeq == 3)
    }

    @Test("corrupt lines fail with their line number, a reason and a kind", arguments: [
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"#), "not valid JSON", JournalReplay.Failure.Kind.damaged),
        (#"{"id":"r","method":"user.createUser","param":{"id":"#, "checksum mismatch: the line does not end with a checksum", .damaged),
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"u9","name":"N","email":"n@x"}"#), "no \"seq\"", .damaged),
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"u9","name":"N","email":"n@x"},"seq":2,"x":1"#), "unknown key \"x\"", .damaged),
        (#"{"id":"r","method":"user.createUser","param":{"id":"u9","name":"N","email":"n@x"},"seq":2,"crc":"00000000","x":1}"#, "checksum mismatch", .damaged),
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"u1","name":"N","email":"n@x"},"seq":2"#), "does not apply", .inconsistent),
        (sealedLine(#"{"id":"r","method":"user.getUser","param":{"userId":"u1"},"seq":2"#), "not a mutation", .inconsistent),
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"u9","name":"N","email":"n@x"},"seq":5"#), "sequence number 5 after 1: records 2...4 are missing", .sequence),
        (sealedLine(#"{"id":"r","method":"user.createUser","param":{"id":"u9","name":"N","email":"n@x"},"seq":1"#), "duplicate sequence number 1", .sequence),
    ])
    func corrupt(_ bad: String, _ reason: String, _ kind: JournalReplay.Failure.Kind) {
        var state = JournalReplay()
        let text = create("u1", seq: 1) + bad + "\n" + create("u3", seq: 3)
        guard case .failure(let failure) = replay(text, into: &state) else {
            Issue.record("replayed a corrupt journal")
            return
        }
        #expect(failure.line == 2 && failure.offset == create("u1", seq: 1).utf8.count)
        #expect(failure.reason.contains(reason), "reason: \(failure.reason)")
        #expect(failure.kind == kind, "reason: \(failure.reason)")
    }

    @Test("a record whose param is plain replays from its line exactly as the same record read in full: the same state, the same failures", arguments: [
        // Each record twice: as the writer writes it, and with one character escaped, which the full parse reads as the same value.
        [(#"{"id":"u1","name":"Ann","email":"a@x"}"#, #"{"id":"u1","name":"A\u006en","email":"a@x"}"#, "user.createUser")],
        [(#"{"id":"u1","name":"Ann","email":"a@x"}"#, #"{"id":"u1","name":"An\u006e","email":"a@x"}"#, "user.createUser"),
         (#"{"userId":"u1","newName":"Bea"}"#, #"{"userId":"u\u0031","newName":"Bea"}"#, "user.updateUser"),
         (#"{"userId":"u1"}"#, #"{"userId":"\u00751"}"#, "user.deleteUser")],
        // A second create of the same id: the handler refuses it, on either path.
        [(#"{"id":"u1","name":"Ann","email":"a@x"}"#, #"{"id":"u1","name":"A\u006en","email":"a@x"}"#, "user.createUser"),
         (#"{"id":"u1","name":"Bo","email":"b@x"}"#, #"{"id":"\u00751","name":"Bo","email":"b@x"}"#, "user.createUser")],
        // A param that does not decode (a field missing, one too many): read again in full, which words the error.
        [(#"{"id":"u1","name":"Ann"}"#, #"{"id":"u\u0031","name":"Ann"}"#, "user.createUser")],
        [(#"{"id":"u1","name":"Ann","email":"a@x","age":"3"}"#, #"{"id":"u\u0031","name":"Ann","email":"a@x","age":"3"}"#, "user.createUser")],
        [(#"{"id":"b1","name":"Tower","address":"Main St","residents":[]}"#, #"{"id":"b\u0031","name":"Tower","address":"Main St","residents":[]}"#, "building.addBuilding")],
    ])
    func plainRecordsReplayAsParsedOnes(_ records: [(plain: String, escaped: String, method: String)]) throws {
        for keyed in [false, true] { try plainRecordsReplayAsParsedOnes(records, keyed: keyed) }
    }

    /// With `keyed`, each record carries an idempotency key: the outcome each path remembers
    /// (digest, reply, seq) must be the same too, or a retry after a restart would be refused
    /// (`keyReused`) or answered differently.
    private func plainRecordsReplayAsParsedOnes(_ records: [(plain: String, escaped: String, method: String)], keyed: Bool) throws {
        func journal(_ params: [String]) -> String {
            params.enumerated().map { n, param in
                let key = keyed ? #","key":"k\#(n + 1)""# : ""
                return sealedLine(#"{"id":"r\#(n + 1)","method":"\#(records[n].method)","param":\#(param)\#(key),"seq":\#(n + 1)"#) + "\n"
            }.joined()
        }
        let plain = journal(records.map(\.plain))
        let escaped = journal(records.map(\.escaped))
        // The first journal's lines take the plain path where the param is a plain object; the second's never do.
        for (line, record) in zip(plain.split(separator: "\n"), records) {
            let bytes = Array(line.utf8)
            let taken = bytes.withUnsafeBytes { (try? JournalRecord.replayFields($0).get())?.plain != nil }
            #expect(taken == !record.plain.contains("["), "\(line)")
        }
        for line in escaped.split(separator: "\n") {
            #expect(Array(line.utf8).withUnsafeBytes { (try? JournalRecord.replayFields($0).get())?.plain } == nil, "\(line)")
        }
        var fromPlain = JournalReplay()
        var fromParsed = JournalReplay()
        let a = replay(plain, into: &fromPlain)
        let b = replay(escaped, into: &fromParsed)
        switch (a, b) {
        case (.success(let x), .success(let y)):
            #expect(x.applied == y.applied && x.applied == records.count)
        case (.failure(let x), .failure(let y)):
            #expect(x.reason == y.reason && x.kind == y.kind && x.line == y.line, "plain: \(x.reason); parsed: \(y.reason)")
        default:
            Issue.record("one path failed and the other did not: \(a) / \(b)")
        }
        #expect(fromPlain.state.users.page(after: nil, limit: nil).records == fromParsed.state.users.page(after: nil, limit: nil).records)
        #expect(fromPlain.state.buildings.page(after: nil, limit: nil).records == fromParsed.state.buildings.page(after: nil, limit: nil).records)
        #expect(fromPlain.lastSeq == fromParsed.lastSeq)
        var outcomes: [[String: IdempotencyKeys.Outcome]] = [[:], [:]]
        fromPlain.state.keys.forEachApplied { outcomes[0][$0.string] = $1 }
        fromParsed.state.keys.forEachApplied { outcomes[1][$0.string] = $1 }
        #expect(outcomes[0] == outcomes[1], "keyed: \(keyed)")
        if case .success(let x) = a { #expect(outcomes[0].count == (keyed ? x.applied : 0)) }
    }

    @Test("a snapshot of the state replays to the same state and sequence number")
    func snapshotRoundTrip() throws {
        var source = JournalReplay()
        var journal = (0..<50).map { create("u\($0)", seq: UInt64($0 + 1)) }.joined()
        journal += line(Request(id: "b", method: AddBuilding.method, param: [
            "id": "b1", "name": "Tower", "address": "1 Main", "residents": ["u1", "u2"],
        ]), seq: 51)
        journal += line(Request(id: "d", method: DeleteUser.method, param: ["userId": "u2"]), seq: 52)
        _ = try replay(journal, into: &source).get()

        var bytes = JournalSnapshot.header(seq: source.lastSeq, records: JournalSnapshot.recordCount(source.state))
        JournalSnapshot.encodeRecords(source.state, chunkBytes: 256) { bytes += $0 }
        var copy = JournalReplay()
        let outcome = try bytes.withUnsafeBytes { copy.replaySnapshot($0) }.get()
        #expect(outcome.applied == 50 && copy.lastSeq == 52)
        // What replay reserves room for: the lines of each kind, counted without a parse.
        #expect(bytes.withUnsafeBytes { JournalSnapshot.recordCounts($0) } == (users: 49, buildings: 1))
        let left = source.state
        let right = copy.state
        #expect(left.users.page(after: nil, limit: nil).records == right.users.page(after: nil, limit: nil).records)
        #expect(right.buildings["b1"]?.residents == ["u1"])
        // A snapshot cut short is corrupt, not silently partial.
        var partial = JournalReplay()
        let cut = Array(bytes.prefix(bytes.count - 40))
        #expect(throws: JournalReplay.Failure.self) { try cut.withUnsafeBytes { partial.replaySnapshot($0) }.get() }
    }

    @Test("a restart's snapshot and journals put their ids in order once, at the end; a removal on the way finds its id")
    func restartOrdersOnce() throws {
        var source = JournalReplay()
        _ = try replay((0..<300).map { create("s\((7 * $0) % 300)", seq: UInt64($0 + 1)) }.joined(), into: &source).get()
        var snapshot = JournalSnapshot.header(seq: source.lastSeq, records: JournalSnapshot.recordCount(source.state))
        JournalSnapshot.encodeRecords(source.state, chunkBytes: 256) { snapshot += $0 }
        var journal = (0..<100).map { create("j\((13 * $0) % 100)", seq: UInt64(301 + $0)) }.joined()
        journal += line(Request(id: "d", method: DeleteUser.method, param: ["userId": "s150"]), seq: 401)
        journal += create("a-last", seq: 402)

        var restart = JournalReplay()
        restart.holdOrder()
        _ = try snapshot.withUnsafeBytes { restart.replaySnapshot($0) }.get()
        #expect(restart.state.users.idsAwaitingOrder == 300, "the snapshot's ids were put in order before the journal")
        _ = try replay(journal, into: &restart).get()
        // The removal put the ids before it in order (to find s150); the one after it waits.
        #expect(restart.state.users.idsAwaitingOrder == 1)
        restart.releaseOrder()
        #expect(restart.state.users.idsAwaitingOrder == 0)
        let expected = ((0..<300).filter { $0 != 150 }.map { "s\($0)" } + (0..<100).map { "j\($0)" } + ["a-last"]).sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        #expect(restart.state.users.page(after: nil, limit: nil).records.map(\.id) == expected)

        // Without holding, each file puts its ids in order as it ends.
        var plain = JournalReplay()
        _ = try snapshot.withUnsafeBytes { plain.replaySnapshot($0) }.get()
        #expect(plain.state.users.idsAwaitingOrder == 0 && plain.state.users.count == 300)
    }

    @Test("snapshot lines are written directly, byte for byte the sealed canonical request lines (escapes, non-ASCII, empty residents) and key lines")
    func snapshotLinesAreCanonical() throws {
        var source = JournalReplay()
        // Plain names are gathered into one append a line; escapes, or a line past 256 bytes, are not.
        let names = ["Ada", "quote \" backslash \\ tab \t", "caf\u{E9} \u{1F600}", "x", "ctl \u{01}\u{1F}", String(repeating: "n", count: 240)]
        var journal = names.enumerated().map { index, name in
            line(Request(id: "c", method: CreateUser.method, param: ["id": .string("u\(index)\(name)"), "name": .string(name), "email": "e@x"]), seq: UInt64(index + 1))
        }.joined()
        journal += line(Request(id: "b", method: AddBuilding.method, param: [
            "id": "b1", "name": "T\"ower", "address": "1 \u{E9}", "residents": ["u0Ada", "u3x"],
        ]), seq: UInt64(names.count + 1))
        journal += line(Request(id: "b", method: AddBuilding.method, param: [
            "id": "b2", "name": "Empty", "address": "-", "residents": [],
        ]), seq: UInt64(names.count + 2))
        journal += line(Request(id: "k", method: CreateUser.method, param: ["id": "k1", "name": "K", "email": "k@x"], key: "key \"1\""), seq: UInt64(names.count + 3))
        _ = try replay(journal, into: &source).get()
        var written: [UInt8] = []
        JournalSnapshot.encodeRecords(source.state, chunkBytes: 64) { written += $0 }

        // The reference: each record as RequestCodec encodes the request, sealed.
        var expected: [UInt8] = []
        for user in source.state.users.values {
            let start = expected.count
            RequestCodec.encode(id: "s", method: CreateUser.method, param: .object(JSONObject([
                (key: "id", value: .string(user.id)), (key: "name", value: .string(user.name)), (key: "email", value: .string(user.email)),
            ])), form: .canonical, into: &expected)
            JournalRecord.seal(lineStart: start, into: &expected)
        }
        for building in source.state.buildings.values {
            let start = expected.count
            RequestCodec.encode(id: "s", method: AddBuilding.method, param: .object(JSONObject([
                (key: "id", value: .string(building.id)), (key: "name", value: .string(building.name)),
                (key: "address", value: .string(building.address)), (key: "residents", value: .array(building.residents.map { .string($0) })),
            ])), form: .canonical, into: &expected)
            JournalRecord.seal(lineStart: start, into: &expected)
        }
        let keyLines = String(decoding: written, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix(#"{"rpcdKey":"#) }
        #expect(String(decoding: written, as: UTF8.self).hasPrefix(String(decoding: expected, as: UTF8.self)))
        #expect(written.count == expected.count + keyLines.map { $0.utf8.count + 1 }.reduce(0, +))
        #expect(keyLines.count == 1)
        let keyLine = try #require(keyLines.first)
        let parsed = Array(keyLine.utf8).withUnsafeBytes { JournalSnapshot.parseKeyLine($0) }
        let (key, outcome) = try parsed.get()
        #expect(key == ExactID(#"key "1""#) && outcome.seq == UInt64(names.count + 3))
        #expect(!outcome.legacyDigest && keyLine.contains(#""digest":"v2:\#(String(outcome.digest, radix: 16))""#))
        let edges: [UInt64] = [0, 1, 0xF, 0x10, 0xABC, 0x9AF0_9AF0_0FA9_0FA9, UInt64.max] + (0..<64).flatMap { [1 << $0, (1 << $0) - 1] }
        var generator = SystemRandomNumberGenerator()
        for value in edges + (0..<2000).map({ _ in UInt64.random(in: 0...UInt64.max, using: &generator) >> UInt64.random(in: 0..<64) }) {
            var hex: [UInt8] = []
            JournalSnapshot.appendHex(value, into: &hex)
            #expect(String(decoding: hex, as: UTF8.self) == String(value, radix: 16))
        }
    }

    @Test("a snapshot's key lines come in chunks of about chunkBytes, like its records, and replay to the same keys")
    func snapshotKeyLinesAreChunked() throws {
        var source = JournalReplay()
        let journal = (0..<2000).map { n in
            line(Request(id: "k", method: CreateUser.method, param: ["id": .string("u\(n)"), "name": "K", "email": "k@x"], key: "key-\(n)"), seq: UInt64(n + 1))
        }.joined()
        _ = try replay(journal, into: &source).get()
        var chunks: [[UInt8]] = []
        JournalSnapshot.encodeRecords(source.state, chunkBytes: 4096) { chunks.append($0) }
        let longest = chunks.joined().split(separator: UInt8(ascii: "\n")).map(\.count).max() ?? 0
        #expect(chunks.count > 50)
        #expect(chunks.allSatisfy { $0.count < 4096 + longest + 1 }, "largest chunk \(chunks.map(\.count).max() ?? 0)")
        var bytes = JournalSnapshot.header(seq: source.lastSeq, records: JournalSnapshot.recordCount(source.state))
        bytes += chunks.joined()
        var copy = JournalReplay()
        _ = try bytes.withUnsafeBytes { copy.replaySnapshot($0) }.get()
        #expect(copy.state.keys.count == 2000)
        var keys = copy.state.keys
        #expect(keys.lookup(ExactID("key-1999"), now: DispatchTime.now().uptimeNanoseconds)?.seq == 2000)
    }

    @Test("a snapshot written before v2 digests (bare hex, FNV-1a over the structure) still answers retries of the same request, refuses others, and is written back bare")
    func legacySnapshotDigests() throws {
        var source = JournalReplay()
        let param: JSONValue = ["id": "u1", "name": "Ada", "email": "a@x"]
        _ = try replay(line(Request(id: "c", method: CreateUser.method, param: param, key: "old"), seq: 1), into: &source).get()
        var records: [UInt8] = []
        JournalSnapshot.encodeRecords(source.state) { records += $0 }
        // The key line as a daemon before v2 wrote it: its FNV-1a digest as bare hex, sealed again.
        var lines = records.split(separator: UInt8(ascii: "\n")).map(Array.init)
        let keyIndex = try #require(lines.firstIndex { String(decoding: $0, as: UTF8.self).hasPrefix(#"{"rpcdKey":"old""#) })
        let current = IdempotencyKeys.digestText(IdempotencyKeys.digest(method: CreateUser.method, param: param), legacy: false)
        let legacy = String(IdempotencyKeys.legacyDigest(method: CreateUser.method, param: param), radix: 16)
        var text = String(decoding: lines[keyIndex].dropLast(18), as: UTF8.self)
        #expect(text.contains(#""digest":"\#(current)""#))
        text = text.replacingOccurrences(of: current, with: legacy)
        var resealed = Array(text.utf8)
        JournalRecord.appendSeal(lineStart: 0, into: &resealed)
        lines[keyIndex] = Array(resealed.dropLast())
        var bytes = JournalSnapshot.header(seq: 1, records: JournalSnapshot.recordCount(source.state))
        for line in lines { bytes += line + [UInt8(ascii: "\n")] }
        var restored = JournalReplay()
        _ = try bytes.withUnsafeBytes { restored.replaySnapshot($0) }.get()

        let dispatcher = Dispatcher(state: restored.state)
        func send(_ request: Request) -> String {
            var out: [UInt8] = []
            _ = dispatcher.handle(request, form: .canonical, into: &out)
            return String(decoding: out, as: UTF8.self)
        }
        let retried = send(Request(id: "again", method: CreateUser.method, param: param, key: "old"))
        #expect(retried.hasPrefix(#"{"id":"again","method":"user.createUserResult""#), "\(retried)")
        let reused = send(Request(id: "other", method: CreateUser.method, param: ["id": "u2", "name": "Bo", "email": "b@x"], key: "old"))
        #expect(reused.contains(#""code":"keyReused""#), "\(reused)")
        #expect(dispatcher.withState { $0.users.count } == 1)
        var written: [UInt8] = []
        dispatcher.withState { state in JournalSnapshot.encodeRecords(state) { written += $0 } }
        #expect(String(decoding: written, as: UTF8.self).contains(#""rpcdKey":"old","digest":"\#(legacy)","#))

        // As a daemon gets them: lines, and a journal. The param is then left plain (not parsed)
        // and parsed from the journal body's bytes only to meet the legacy digest.
        let journaled = Dispatcher(state: restored.state, log: DurableNowLog())
        func sendLine(_ line: String) -> String {
            var out: [UInt8] = []
            var session = Dispatcher.Session()
            _ = Array(line.utf8).withUnsafeBytes { journaled.handle(line: $0, session: &session, into: &out) }
            return String(decoding: out, as: UTF8.self)
        }
        let retriedLine = sendLine(#"{"id":"again","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"key":"old"}"#)
        #expect(retriedLine.hasPrefix(#"{"id":"again","method":"user.createUserResult""#), "\(retriedLine)")
        let reusedLine = sendLine(#"{"id":"other","method":"user.createUser","param":{"id":"u2","name":"Bo","email":"b@x"},"key":"old"}"#)
        #expect(reusedLine.contains(#""code":"keyReused""#), "\(reusedLine)")
        #expect(journaled.withState { $0.users.count } == 1)
    }

    @Test("a key left in its request line and the same key escaped (decoded in full) are one key: retries match either way, with or without a journal")
    func plainAndEscapedKeysAreOneKey() throws {
        let log = RecordingLog()
        for dispatcher in [Dispatcher(state: Entities(), log: log), Dispatcher(state: Entities())] {
            func send(_ line: String) -> String {
                var out: [UInt8] = []
                var session = Dispatcher.Session()
                _ = Array(line.utf8).withUnsafeBytes { dispatcher.handle(line: $0, session: &session, into: &out) }
                return String(decoding: out, as: UTF8.self)
            }
            func create(_ id: String, user: String, key: String) -> String {
                send(#"{"id":"\#(id)","method":"user.createUser","param":{"id":"\#(user)","name":"N","email":"e@x"},"key":"\#(key)"}"#)
            }
            // Escaped first (a backslash: decoded in full, the key a string), then plain (left in the line).
            #expect(create("1", user: "u1", key: #"k\u0031"#).hasPrefix(#"{"id":"1","method":"user.createUserResult""#))
            let retried = create("2", user: "u1", key: "k1")
            #expect(retried.hasPrefix(#"{"id":"2","method":"user.createUserResult""#), "\(retried)")
            let reused = create("3", user: "u9", key: "k1")
            #expect(reused.contains(#""code":"keyReused""#) && reused.contains(#"key \"k1\""#), "\(reused)")
            // Plain first, then escaped.
            #expect(create("4", user: "u2", key: "k2").hasPrefix(#"{"id":"4","method":"user.createUserResult""#))
            let escapedRetry = create("5", user: "u2", key: #"k\u0032"#)
            #expect(escapedRetry.hasPrefix(#"{"id":"5","method":"user.createUserResult""#), "\(escapedRetry)")
            // A failed call's outcome, remembered under a plain key, is the retry's too.
            let conflict = create("6", user: "u1", key: "k3")
            #expect(conflict.contains(#""method":"error.error""#), "\(conflict)")
            #expect(create("7", user: "u1", key: "k3").replacingOccurrences(of: #""id":"7""#, with: #""id":"6""#) == conflict)
            #expect(dispatcher.withState { $0.users.count } == 2)
            // The key API finds keys stored from line bytes.
            let now = DispatchTime.now().uptimeNanoseconds
            #expect(dispatcher.withState { $0.keys.count } == 3)
            #expect(dispatcher.withState { $0.keys.lookup(IdempotencyKeys.Key("k2"), now: now) } != nil)
        }
        // The journal bodies of the two creates applied carry their keys, as the line had them.
        #expect(log.bodies.count == 2)
        #expect(log.bodies.map { $0.contains(#""key":"k1""#) } == [true, false])
        #expect(log.bodies.map { $0.contains(#""key":"k2""#) } == [false, true])
    }

    @Test("the newline search finds the first newline at or after any offset, in runs of every length")
    func newlineSearch() {
        var bytes = [UInt8](repeating: UInt8(ascii: "x"), count: 300)
        for at in [0, 1, 7, 8, 9, 15, 16, 17, 63, 100, 299] { bytes[at] = UInt8(ascii: "\n") }
        bytes[50] = 0x0B  // neighbours of a newline in the carry trick
        bytes[51] = 0x09
        bytes[52] = 0x8A
        bytes.withUnsafeBytes { raw in
            for from in 0...raw.count {
                let naive = raw[from...].firstIndex(of: UInt8(ascii: "\n"))
                #expect(JournalReplay.newline(in: raw, from: from) == naive, "from \(from)")
                // The fallback for platforms without memchr, tested here too.
                #expect(JournalReplay.wordwiseNewline(in: raw, from: from) == naive, "from \(from)")
            }
        }
        #expect([UInt8]().withUnsafeBytes { JournalReplay.newline(in: $0, from: 0) } == nil)
        #expect([UInt8]().withUnsafeBytes { JournalReplay.wordwiseNewline(in: $0, from: 0) } == nil)
    }
}

/// A journal that takes every record and has it durable at once.
/// A log that keeps the text of each body it records (durable at once).
private final class RecordingLog: MutationLog, @unchecked Sendable {
    // @unchecked: one test uses it from one thread.
    private(set) var bodies: [String] = []
    func refusal() -> String? { nil }
    func record(_ body: JournalRecord.Body) -> UInt64? {
        bodies.append(String(decoding: body.bytes, as: UTF8.self))
        return nil
    }
    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) { done(nil) }
}

private final class DurableNowLog: MutationLog {
    func refusal() -> String? { nil }
    func record(_ body: JournalRecord.Body) -> UInt64? { nil }
    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) { done(nil) }
}
