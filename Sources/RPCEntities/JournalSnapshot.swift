import RPCSchema

/// A snapshot of the live state as request lines: a header, every user as a `user.createUser`,
/// then every building as a `building.addBuilding` (residents exist by then). Replaying it into
/// an empty state gives the state back; like the journal, it can be replayed with `nc`. Every line,
/// the header too, is sealed with a checksum like a journal line (`JournalRecord`):
///
///     {"rpcdSnapshot":1,"seq":S,"records":N,"crc":"hhhhhhhh"}
///     {"id":"s","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"a@x"},"crc":"hhhhhhhh"}
public enum JournalSnapshot {
    /// `{"rpcdSnapshot":1,"seq":S,"records":N,"crc":"hhhhhhhh"}\n`
    public static func header(seq: UInt64, records: Int) -> [UInt8] {
        var out = Array(#"{"rpcdSnapshot":1,"seq":"#.utf8)
        JournalRecord.appendDecimal(seq, into: &out)
        out.append(contentsOf: #","records":"#.utf8)
        JournalRecord.appendDecimal(UInt64(records), into: &out)
        JournalRecord.appendSeal(lineStart: 0, into: &out)
        return out
    }

    public static func recordCount(_ state: Entities) -> Int { state.recordCount }

    /// Calls `body` with chunks of about `chunkBytes` bytes of record lines. Each shard of records
    /// is let go of once written (`Records.drain`): hand over the last copy of a captured state
    /// (`consume`) and the live state changes that shard in place again from then on.
    public static func encodeRecords(
        _ state: consuming Entities, chunkBytes: Int = 1 << 20, _ body: ([UInt8]) throws -> Void
    ) rethrows {
        var out: [UInt8] = []
        out.reserveCapacity(chunkBytes + 4096)
        // Written directly, byte for byte what `RequestCodec.encode` makes of the same request
        // (a test holds them equal): a snapshot of a million records is written while the daemon
        // serves, on the same cores, so no JSON values are built for it.
        func seal(lineStart: Int) throws {
            JournalRecord.appendSeal(lineStart: lineStart, into: &out)
            if out.count >= chunkBytes {
                try body(out)
                out.removeAll(keepingCapacity: true)
            }
        }
        // The terms first: a follower installing the snapshot knows its history before its records.
        for term in state.terms.terms {
            let start = out.count
            out.append(contentsOf: termLinePrefix.bytes)
            JournalRecord.appendDecimal(term.term, into: &out)
            out.append(contentsOf: #","termId":"#.utf8)
            JSONWriter.writeString(term.id, into: &out)
            out.append(contentsOf: #","leader":"#.utf8)
            JSONWriter.writeString(term.leader, into: &out)
            out.append(contentsOf: #","seq":"#.utf8)
            JournalRecord.appendDecimal(term.start, into: &out)
            try seal(lineStart: start)
        }
        // Each record's param is written by the record's own writer (`JSONWritable`, as replies
        // write it). A user line is gathered from the record's stored bytes, no value built, and
        // appended at once unless a field needs an escape.
        func write(_ user: User, lineStart start: Int) throws {
            out.append(contentsOf: userLinePrefix.bytes)
            out.append(contentsOf: paramKey.bytes)
            user.writeJSON(into: &out)
            try seal(lineStart: start)
        }
        try state.users.drainStored({ id, fields in
            let start = out.count
            var unread = fields
            let gathered = JSONWriter.gathered(into: &out) { line in
                line.literal(userLinePrefix)
                line.literal(paramKey)
                User.gatherStored(id: id, &fields, into: &line)
            }
            guard gathered else { return try write(User(id: String(decoding: id, as: UTF8.self), from: &unread), lineStart: start) }
            try seal(lineStart: start)
        }, value: { try write($0, lineStart: out.count) })
        try state.buildings.drain { building in
            let start = out.count
            out.append(contentsOf: buildingLinePrefix.bytes)
            out.append(contentsOf: paramKey.bytes)
            building.writeJSON(into: &out)
            try seal(lineStart: start)
        }
        // Registered entities' records, as the calls their declarations give.
        for entity in Entities.registered {
            try entity.snapshotCalls(in: state) { call in
                let start = out.count
                out.append(contentsOf: #"{"id":"s","method":"#.utf8)
                JSONWriter.writeString(type(of: call).method.description, into: &out)
                out.append(contentsOf: #","param":"#.utf8)
                // A call the entity made itself from its own state: failing to encode it is a bug.
                if let error = JSONWriter.write(encodable: call, into: &out) {
                    preconditionFailure("entity \(entity.name) gave a snapshot call that does not encode: \(error)")
                }
                try seal(lineStart: start)
            }
        }
        // The outcomes of keyed mutations, oldest first, so retries after a compaction still find them.
        // In chunks too: a million remembered replies are hundreds of megabytes.
        try state.keys.forEachApplied { key, digest, legacyDigest, seq, reply in
            let start = out.count
            out.append(contentsOf: keyLinePrefix.bytes)
            JSONWriter.writeString(key, into: &out)
            out.append(contentsOf: digestKey.bytes)
            if !legacyDigest { out.append(contentsOf: IdempotencyKeys.digestTextPrefix.bytes) }
            appendHex(digest, into: &out)
            out.append(contentsOf: keySeqKey.bytes)
            JournalRecord.appendDecimal(seq, into: &out)
            out.append(contentsOf: replyKey.bytes)
            out.append(contentsOf: reply)
            try seal(lineStart: start)
        }
        if !out.isEmpty { try body(out) }
    }

    private static let userLinePrefix: StaticString = #"{"id":"s","method":"user.createUser","#
    private static let buildingLinePrefix: StaticString = #"{"id":"s","method":"building.addBuilding","#
    private static let paramKey: StaticString = #""param":"#
    private static let digestKey: StaticString = #","digest":""#
    private static let keySeqKey: StaticString = #"","seq":"#
    private static let replyKey: StaticString = #","reply":"#

    /// Lowercase hex without leading zeros, as `String(value, radix: 16)` writes it.
    static func appendHex(_ value: UInt64, into out: inout [UInt8]) {
        guard value > 0 else { return out.append(UInt8(ascii: "0")) }
        // Sixteen digits at once, eight to a word, most significant first in memory; a snapshot
        // writes one a remembered key (a nibble at a time cost ~570 instructions).
        var digits = (hexDigits(of: UInt32(truncatingIfNeeded: value >> 32)).bigEndian, hexDigits(of: UInt32(truncatingIfNeeded: value)).bigEndian)
        let count = (64 - value.leadingZeroBitCount + 3) / 4
        withUnsafeBytes(of: &digits) { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[(16 - count)...])) }
    }

    /// The 8 lowercase hex digits of `value`, the least significant in the word's low byte.
    @inline(__always) private static func hexDigits(of value: UInt32) -> UInt64 {
        var nibbles = UInt64(value)  // one nibble a byte, nibble k in byte k
        nibbles = (nibbles | nibbles << 16) & 0x0000_FFFF_0000_FFFF
        nibbles = (nibbles | nibbles << 8) & 0x00FF_00FF_00FF_00FF
        nibbles = (nibbles | nibbles << 4) & 0x0F0F_0F0F_0F0F_0F0F
        let letters = ((nibbles &+ 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101  // 1 where a nibble is 10...15
        return nibbles &+ 0x3030_3030_3030_3030 &+ letters &* UInt64(UInt8(ascii: "a") - UInt8(ascii: "0") - 10)
    }

    /// How many user and building lines a snapshot written by `encodeRecords` holds, by their
    /// beginnings (no parse): what replay reserves room for. Lines of another form count as neither.
    static func recordCounts(_ bytes: UnsafeRawBufferPointer) -> (users: Int, buildings: Int) {
        var counts = (users: 0, buildings: 0)
        _ = JournalReplay.forEachLine(bytes) { line, _, _ in
            if line.starts(with: userLinePrefix.bytes) {
                counts.users += 1
            } else if line.starts(with: buildingLinePrefix.bytes) {
                counts.buildings += 1
            }
            return nil
        }
        return counts
    }

    private static let keyLinePrefix: StaticString = #"{"rpcdKey":"#
    private static let termLinePrefix: StaticString = #"{"rpcdTerm":"#

    /// A snapshot line naming a term of the history: `{"rpcdTerm":N,"termId":…,"leader":…,"seq":S,"crc":…}`.
    public static func isTermLine(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count > termLinePrefix.bytes.count && line.prefix(termLinePrefix.bytes.count).elementsEqual(termLinePrefix.bytes)
    }

    /// A term line -> the term, `sequence` set to its start.
    public static func parseTermLine(_ line: UnsafeRawBufferPointer) -> Result<ReplicationTerm, JournalLineError> {
        let seal = JournalRecord.checksum(of: line)
        if case .mismatch(let stored, let computed) = seal {
            return .failure(.checksumMismatch(stored: stored, computed: computed))
        }
        guard seal == .valid, case .object(let object)? = try? JSONParser.parse(line),
            case .number(let termText)? = object["rpcdTerm"], let term = Int(termText), term > 0,
            case .string(let id)? = object["termId"], !id.isEmpty, case .string(let leader)? = object["leader"],
            case .number(let seqText)? = object["seq"], let seq = Int(seqText), seq > 0
        else {
            return .failure(JournalLineError(#"not a sealed term line {"rpcdTerm":N,"termId":"hex","leader":"HOST:PORT","seq":S}"#))
        }
        return .success(ReplicationTerm(term: term, termId: id, leader: leader, sequence: seq))
    }

    /// A snapshot line remembering an idempotency key (not a record: nc replay does not need it).
    public static func isKeyLine(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count > keyLinePrefix.bytes.count && line.prefix(keyLinePrefix.bytes.count).elementsEqual(keyLinePrefix.bytes)
    }

    /// `{"rpcdKey":K,"digest":"v2:hex","seq":N,"reply":{…},"crc":…}` -> the key and its outcome
    /// (`IdempotencyKeys.digestText`: bare hex in snapshots written before `v2:`).
    public static func parseKeyLine(_ line: UnsafeRawBufferPointer) -> Result<(key: ExactID, outcome: IdempotencyKeys.Outcome), JournalLineError> {
        let seal = JournalRecord.checksum(of: line)
        if case .mismatch(let stored, let computed) = seal {
            return .failure(.checksumMismatch(stored: stored, computed: computed))
        }
        guard seal == .valid, case .object(let object)? = try? JSONParser.parse(line),
            case .string(let key)? = object["rpcdKey"], !key.isEmpty, key.utf8.count <= Request.maxKeyBytes,
            case .string(let digestText)? = object["digest"], let digest = IdempotencyKeys.digest(text: digestText),
            case .number(let seqText)? = object["seq"], let seq = UInt64(seqText),
            let reply = object["reply"], reply != .null
        else {
            return .failure(JournalLineError(#"not a sealed key line {"rpcdKey":K,"digest":"v2:hex","seq":N,"reply":{…}}"#))
        }
        var bytes: [UInt8] = []
        JSONWriter.write(reply, into: &bytes)
        return .success((ExactID(key), IdempotencyKeys.Outcome(digest: digest.value, legacyDigest: digest.legacy, reply: bytes, seq: seq)))
    }

    private static let headerKeys = ["rpcdSnapshot", "seq", "records", "crc"]

    /// The header's sequence number and record count, and whether it is sealed (snapshots written
    /// before checksums are not).
    public static func parseHeader(_ line: UnsafeRawBufferPointer) -> Result<(seq: UInt64, records: Int, sealed: Bool), JournalLineError> {
        let seal = JournalRecord.checksum(of: line)
        if case .mismatch(let stored, let computed) = seal {
            return .failure(.checksumMismatch(stored: stored, computed: computed))
        }
        guard case .object(let object)? = try? JSONParser.parse(line), object["rpcdSnapshot"] == .number("1"),
            case .number(let seqText)? = object["seq"], let seq = UInt64(seqText),
            case .number(let countText)? = object["records"], let records = Int(countText), records >= 0
        else {
            return .failure(JournalLineError(#"not a snapshot header {"rpcdSnapshot":1,"seq":N,"records":N}"#))
        }
        if object["crc"] != nil, seal != .valid { return .failure(JournalLineError(JournalRecord.misplacedChecksum)) }
        if let unknown = object.keys.first(where: { !headerKeys.contains($0) }) {
            return .failure(JournalLineError("unknown key \"\(unknown)\"; a snapshot header holds only \(headerKeys.joined(separator: ", "))"))
        }
        return .success((seq, records, seal == .valid))
    }
}
