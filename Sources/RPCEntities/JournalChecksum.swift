import RPCSchema

/// The checksum that seals each journal and snapshot line, and the rule that tells a torn last
/// line (a crash mid-write) from damage.
///
/// Sealed line: `<bytes B>,"crc":"hhhhhhhh"}` + `\n`, where `hhhhhhhh` is CRC-32C(B) in lowercase
/// hex and B runs from the line's `{` through the byte before `,"crc":"`.
extension JournalRecord {
    /// What a line's seal says.
    public enum Checksum: Equatable, Sendable {
        /// The line does not end with a seal (written before checksums, or its end is damaged).
        case absent
        case valid
        case mismatch(stored: UInt32, computed: UInt32)
    }

    /// `,"crc":"` + 8 hex digits + `"}`.
    static let sealLength = 18
    private static let sealPrefix: StaticString = #","crc":""#
    private static let hexDigits: StaticString = "0123456789abcdef"

    /// Appends `,"crc":"…"}\n` to the unfinished line that starts at `lineStart` (everything from
    /// there to the end of `out` is covered).
    static func appendSeal(lineStart: Int, into out: inout [UInt8]) {
        let crc = out.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[lineStart...])) }
        // Built on the stack and appended at once (a byte at a time cost ~50 instructions each).
        var seal: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &seal) { bytes in
            for (i, byte) in sealPrefix.bytes.enumerated() { bytes[i] = byte }
            for digit in 0..<8 {
                let nibble = (crc >> UInt32(28 - 4 * digit)) & 0xF
                bytes[sealPrefix.bytes.count + digit] = nibble < 10 ? UInt8(ascii: "0") + UInt8(nibble) : UInt8(ascii: "a") + UInt8(nibble - 10)
            }
            bytes[sealLength - 2] = UInt8(ascii: "\"")
            bytes[sealLength - 1] = UInt8(ascii: "}")
            bytes[sealLength] = UInt8(ascii: "\n")
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<(sealLength + 1)]))
        }
    }

    /// The sequence number of a change feed's record line (without its `\n`): one that starts
    /// `{"id":"r<seq>"` and ends with a seal; nil for any other line (a reply, a snapshot's
    /// record). Only the shape is read here: the checksum is checked where the record is applied.
    public static func feedRecordSequence(_ line: UnsafeRawBufferPointer) -> UInt64? {
        let head = feedIDPrefix.bytes
        let count = line.count
        guard count > head.count + sealLength, line.starts(with: head) else { return nil }
        var index = head.count
        var seq: UInt64 = 0
        while index < count - sealLength, line[index] >= UInt8(ascii: "0"), line[index] <= UInt8(ascii: "9") {
            let (times, o1) = seq.multipliedReportingOverflow(by: 10)
            let (sum, o2) = times.addingReportingOverflow(UInt64(line[index] - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            seq = sum
            index += 1
        }
        guard index > head.count, line[index] == UInt8(ascii: "\""), line[count - 2] == UInt8(ascii: "\""), line[count - 1] == UInt8(ascii: "}"),
            UnsafeRawBufferPointer(rebasing: line[(count - sealLength)..<(count - sealLength + sealPrefix.bytes.count)]).elementsEqual(sealPrefix.bytes)
        else { return nil }
        return seq
    }

    /// Whether a line (without its `\n`) is an entity's record of a snapshot a leader feeds:
    /// `{"id":"s","method":"` then a method outside `replication.` (its terms, keys and markers),
    /// and a seal. Only the shape is read here, as in `feedRecordSequence`.
    public static func isFeedSnapshotRecord(_ line: UnsafeRawBufferPointer) -> Bool {
        let head = snapshotRecordPrefix.bytes, replication = replicationMethodPrefix.bytes
        let count = line.count
        return count > head.count + replication.count + sealLength && line.starts(with: head)
            && !UnsafeRawBufferPointer(rebasing: line[head.count..<(head.count + replication.count)]).elementsEqual(replication)
            && line[count - 2] == UInt8(ascii: "\"") && line[count - 1] == UInt8(ascii: "}")
            && UnsafeRawBufferPointer(rebasing: line[(count - sealLength)..<(count - sealLength + sealPrefix.bytes.count)]).elementsEqual(sealPrefix.bytes)
    }

    private static let snapshotRecordPrefix: StaticString = #"{"id":"s","method":""#
    private static let replicationMethodPrefix: StaticString = "replication."

    /// Seals the finished line (ending in `}\n`) that starts at `lineStart`.
    static func seal(lineStart: Int, into out: inout [UInt8]) {
        out.removeLast(2)
        appendSeal(lineStart: lineStart, into: &out)
    }

    /// Checks the seal of one line (without its `\n`).
    public static func checksum(of line: UnsafeRawBufferPointer) -> Checksum {
        let count = line.count
        guard count > sealLength, line[count - 2] == UInt8(ascii: "\""), line[count - 1] == UInt8(ascii: "}") else {
            return .absent
        }
        let start = count - sealLength
        let prefix = sealPrefix.bytes
        for i in 0..<prefix.count where line[start + i] != prefix[i] { return .absent }
        var stored: UInt32 = 0
        for i in (start + prefix.count)..<(count - 2) {
            guard let digit = hexValue(line[i]) else { return .absent }
            stored = stored << 4 | digit
        }
        let computed = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: line[..<start]))
        return stored == computed ? .valid : .mismatch(stored: stored, computed: computed)
    }

    private static func hexValue(_ byte: UInt8) -> UInt32? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
        default: nil
        }
    }

    /// 8 lowercase hex digits, as in a seal.
    public static func hex(_ crc: UInt32) -> String {
        String(decoding: (0..<8).map { hexDigits.bytes[Int((crc >> UInt32(28 - 4 * $0)) & 0xF)] }, as: UTF8.self)
    }

    /// No record line is longer: a request line is at most `max_frame_bytes` (1 MiB by default) and
    /// the journal adds its `seq` and seal. A tail longer than this is not a torn record.
    public static let maxRecordBytes = 64 << 20

    /// What the bytes after a file's last newline are when they cannot be the beginning of a record
    /// cut short by a crash mid-write, or nil if they can. A start cuts them either way (no
    /// acknowledged record lies there); this is what its warning says they were.
    ///
    /// A writer writes whole lines with one write(2) at the journal's end, so a crash leaves at
    /// most one unfinished line: a prefix of `{"…`, with no control bytes (JSON text escapes
    /// them), no longer than a record, and not a whole sealed record with more bytes after it (a
    /// damaged newline). The NUL blocks a file system can leave after a power loss are something
    /// else. (The spaces a writer keeps ahead of the end are not passed here: `JournalReplay`
    /// takes them off first.)
    public static func tornTailProblem(_ tail: UnsafeRawBufferPointer) -> String? {
        let count = tail.count
        guard count <= maxRecordBytes else {
            return "longer than any record"
        }
        if let nul = tail.firstIndex(of: 0) {
            let run = tail[nul...].prefix { $0 == 0 }.count
            if run == count {
                return "all NUL bytes: blocks a file system left unwritten after a power cut?"
            }
            return "\(run) NUL bytes from byte \(nul) of them"
        }
        if let control = tail.firstIndex(where: { $0 < 0x20 }) {
            return "the control byte 0x\(String(tail[control], radix: 16)) at byte \(control) of them"
        }
        let opening = Array(#"{""#.utf8)
        for i in 0..<min(count, opening.count) where tail[i] != opening[i] {
            return "they do not start like a record ({\")"
        }
        return damagedNewline(tail)
    }

    /// Why `tail` is a whole sealed record whose newline was overwritten (more bytes follow it,
    /// and not the NUL blocks of a power cut), or nil. Such a record may have been acknowledged,
    /// so a start refuses it rather than cutting it.
    public static func damagedNewline(_ tail: UnsafeRawBufferPointer) -> String? {
        var from = 0
        while let end = sealEnd(in: tail, from: from) {
            if end < tail.count, tail[end] != 0, case .valid = checksum(of: UnsafeRawBufferPointer(rebasing: tail[..<end])) {
                return "a complete record followed by \(tail.count - end) more bytes: its newline is damaged"
            }
            from = end
        }
        return nil
    }

    /// The end (just past `"}`) of the next `,"crc":"hhhhhhhh"}` in `bytes` at or after `from`.
    private static func sealEnd(in bytes: UnsafeRawBufferPointer, from: Int) -> Int? {
        var i = from
        while i + sealLength <= bytes.count {
            guard let comma = bytes[i...].firstIndex(of: UInt8(ascii: ",")) else { return nil }
            let end = comma + sealLength
            if end <= bytes.count, bytes[end - 2] == UInt8(ascii: "\""), bytes[end - 1] == UInt8(ascii: "}"),
                bytes[comma..<(comma + sealPrefix.bytes.count)].elementsEqual(sealPrefix.bytes),
                bytes[(comma + sealPrefix.bytes.count)..<(end - 2)].allSatisfy({ hexValue($0) != nil })
            {
                return end
            }
            i = comma + 1
        }
        return nil
    }
}
