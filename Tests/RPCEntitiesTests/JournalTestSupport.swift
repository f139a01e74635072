import RPCEntities
import RPCSchema

/// Seals `covered` the way the README says, independently of the encoder: the CRC-32C of the
/// covered bytes as `,"crc":"<8 lowercase hex digits>"}` after them.
func sealedLine(_ covered: String) -> String {
    let digits = String(CRC32C.checksum(covered.utf8), radix: 16)
    return covered + #","crc":""# + String(repeating: "0", count: 8 - digits.count) + digits + #""}"#
}

/// Journal lines as the daemon writes them.
enum JournalText {
    static func line(_ request: Request, seq: UInt64) -> String {
        var out: [UInt8] = []
        JournalRecord.encode(request, seq: seq, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    static func create(_ id: String, seq: UInt64) -> String {
        line(Request(id: "r\(seq)", method: CreateUser.method, param: ["id": .string(id), "name": "N", "email": "n@x"]), seq: seq)
    }

    /// A line as written before checksums: the canonical request plus "seq".
    static func unsealedCreate(_ id: String, seq: UInt64) -> String {
        #"{"id":"r\#(seq)","method":"user.createUser","param":{"id":"\#(id)","name":"N","email":"n@x"},"seq":\#(seq)}"# + "\n"
    }
}

/// Everything a replayed state holds, comparable.
struct StateFingerprint: Equatable, CustomStringConvertible {
    var users: [User]
    var buildings: [Building]
    var lastSeq: UInt64

    init(_ replay: JournalReplay) {
        let state = replay.state
        users = state.users.page(after: nil, limit: nil).records
        buildings = state.buildings.page(after: nil, limit: nil).records
        lastSeq = replay.lastSeq
    }

    var description: String { "\(users.map(\.id)) \(buildings.map(\.id)) seq \(lastSeq)" }
}

extension JournalReplay {
    mutating func replayJournal(_ bytes: [UInt8]) -> Result<FileOutcome, Failure> {
        bytes.withUnsafeBytes { replayJournal($0) }
    }
}
