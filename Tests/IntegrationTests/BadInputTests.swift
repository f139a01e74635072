import Foundation
import Testing

/// One malformed line, the code it must get back, and the id the reply must carry (nil: not checked).
struct BadInput: Sendable, CustomTestStringConvertible {
    let name: String
    let bytes: [UInt8]
    let code: String
    let id: String?

    init(_ name: String, _ line: String, _ code: String, id: String?) {
        self.init(name, Array(line.utf8), code, id: id)
    }

    init(_ name: String, _ bytes: [UInt8], _ code: String, id: String?) {
        self.name = name
        self.bytes = bytes
        self.code = code
        self.id = id
    }

    var testDescription: String { name }

    static let all: [BadInput] = [
        BadInput("invalid JSON", #"{"id":"1","method":"user.listUsers""#, "parseError", id: nil),
        BadInput("garbage", "hello there", "parseError", id: ""),
        BadInput("truncated object", "{", "parseError", id: ""),
        BadInput("array line", "[1,2]", "invalidRequest", id: ""),
        BadInput("string line", #""x""#, "invalidRequest", id: ""),
        BadInput("number line", "42", "invalidRequest", id: ""),
        BadInput("null line", "null", "invalidRequest", id: ""),
        BadInput("missing id", #"{"method":"user.listUsers"}"#, "invalidRequest", id: ""),
        BadInput("numeric id", #"{"id":5,"method":"user.listUsers"}"#, "invalidRequest", id: ""),
        BadInput("null id", #"{"id":null,"method":"user.listUsers"}"#, "invalidRequest", id: ""),
        BadInput("object id", #"{"id":{"a":"b"},"method":"user.listUsers"}"#, "invalidRequest", id: ""),
        BadInput("missing method", #"{"id":"m1","param":{}}"#, "invalidRequest", id: "m1"),
        BadInput("unknown entity", #"{"id":"e1","method":"nope.x"}"#, "methodNotFound", id: "e1"),
        BadInput("unknown method", #"{"id":"e2","method":"user.nope","param":{}}"#, "methodNotFound", id: "e2"),
        BadInput("limit is a string", #"{"id":"t1","method":"user.listUsers","param":{"limit":"x"}}"#, "invalidParams", id: "t1"),
        BadInput("name is a number", #"{"id":"t2","method":"user.createUser","param":{"id":"a","name":5,"email":"a@b"}}"#, "invalidParams", id: "t2"),
        BadInput("param is a string", #"{"id":"t3","method":"user.createUser","param":"x"}"#, "invalidParams", id: "t3"),
        BadInput("param is an array", #"{"id":"t4","method":"user.getUser","param":["u1"]}"#, "invalidParams", id: "t4"),
        BadInput("residents not strings", #"{"id":"t5","method":"building.addBuilding","param":{"id":"b","name":"B","address":"A","residents":[1]}}"#, "invalidParams", id: "t5"),
        BadInput("required param missing", #"{"id":"t6","method":"user.getUser"}"#, "invalidParams", id: "t6"),
        BadInput(
            "invalid UTF-8 in a string",
            Array(#"{"id":"u1","method":"user.getUser","param":{"userId":""#.utf8) + [0xFF, 0xFE] + Array(#""}}"#.utf8),
            "parseError", id: nil),
        BadInput(
            "invalid UTF-8 in the id",
            Array(#"{"id":""#.utf8) + [0xC3, 0x28] + Array(#"","method":"user.listUsers"}"#.utf8),
            "parseError", id: nil),
        BadInput(
            "NUL byte inside a string",
            Array(#"{"id":"n1","method":"user.getUser","param":{"userId":"a"#.utf8) + [0] + Array(#"b"}}"#.utf8),
            "parseError", id: nil),
        BadInput("NUL byte between tokens", Array(#"{"id":"n2","method":"user.listUsers""#.utf8) + [0, 0x7D], "parseError", id: nil),
        BadInput("lone NUL", [0], "parseError", id: ""),
    ]
}

@Suite("bad input")
struct BadInputTests {
    @Test("each bad line gets error.error with its code, and the connection stays usable", arguments: BadInput.all)
    func badLine(_ input: BadInput) throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.sendBytes(input.bytes + [10])
            expectError(try c.readLine(), code: input.code, id: input.id)
            // Still usable, and nothing extra was sent for the bad line.
            #expect(try c.request(#"{"id":"after","method":"user.listUsers"}"#) == #"{"id":"after","method":"user.listUsersResult","param":{"users":[]}}"#)
        }
    }

    @Test("all bad lines pipelined on one connection: one error each, in order, then a good request")
    func allBadLinesPipelined() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            var batch: [UInt8] = []
            for input in BadInput.all { batch += input.bytes + Array("\r\n".utf8) }
            batch += Array(#"{"id":"after","method":"user.listUsers"}"#.utf8) + [10]
            try c.sendBytes(batch)
            for input in BadInput.all {
                let line = try c.readLine()
                #expect(line != #"{"id":"after","method":"user.listUsersResult","param":{"users":[]}}"#, "no reply for \(input.name)")
                expectError(line, code: input.code, id: input.id)
            }
            #expect(try c.readLine() == #"{"id":"after","method":"user.listUsersResult","param":{"users":[]}}"#)
        }
    }

    @Test("fuzzed lines: every line gets exactly one valid JSON reply and the daemon survives")
    func fuzz() throws {
        try withDaemon { daemon in
            var rng = SplitMix64(seed: 0x5EED_CAFE)
            let bases = [
                Wire.createUser("f1", "fu", "Fuzz", "f@example.com"),
                Wire.getUser("f2", "fu"),
                #"{"id":"f3","method":"user.listUsers","param":{"after":"a","limit":3}}"#,
                Wire.addBuilding("f4", "fb", "B", "A", ["fu"]),
                #"{"id":"f5","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"fu"}}}}"#,
                #"{"id":"f6","method":"building.updateBuilding","param":{"buildingId":"fb","newResidents":[]}}"#,
            ].map { Array($0.utf8) }
            var lines: [[UInt8]] = []
            for _ in 0..<300 {  // random bytes, never a blank line
                let length = Int(rng.next() % 200) + 1
                var line: [UInt8] = [0x7B]
                for _ in 0..<length { line.append(rng.byte(excluding: [10, 13])) }
                lines.append(line)
            }
            for _ in 0..<600 {  // valid requests with 1-3 bytes changed
                var line = bases[Int(rng.next() % UInt64(bases.count))]
                for _ in 0..<(Int(rng.next() % 3) + 1) {
                    line[Int(rng.next() % UInt64(line.count))] = rng.byte(excluding: [10, 13])
                }
                lines.append(line)
            }
            let c = try LineClient(port: daemon.port)
            var batch: [UInt8] = []
            for line in lines { batch += line + [10] }
            batch += Array(#"{"id":"sentinel","method":"user.listUsers","param":{"limit":1}}"#.utf8) + [10]
            try c.sendBytes(batch)
            var replies = 0
            var invalid: [String] = []
            while true {
                let line = try c.expectLine()
                guard let reply = try? Reply(line), reply.id != nil, reply.method != nil else {
                    invalid.append(line)
                    replies += 1
                    continue
                }
                if reply.id == "sentinel" && reply.method == "user.listUsersResult" { break }
                replies += 1
            }
            #expect(replies == lines.count, "one reply per fuzzed line")
            #expect(invalid.isEmpty, "replies that are not JSON with id and method: \(invalid.prefix(3))")
        }
    }
}

/// A small deterministic PRNG, so fuzz failures reproduce.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func byte(excluding: Set<UInt8>) -> UInt8 {
        while true {
            let b = UInt8(truncatingIfNeeded: next())
            if !excluding.contains(b) { return b }
        }
    }
}
