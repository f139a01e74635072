import RPCEntities
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// Reads a data directory's journal lines by sequence number, for a subscriber that fell behind
/// what the feed keeps in memory: it finds the file holding a sequence number, then reads on from
/// where it stopped. Used on the feed's file queue only (reads can wait for the disk).
///
/// Journal lines are numbered one by one, so the line of `seq` in a file that starts at `first` is
/// line `seq - first`: finding it counts newlines, it parses no JSON. Each line it returns has its
/// checksum and sequence number checked: damage on the disk stops the feed here, with its reason,
/// instead of reaching a follower as a record that does not apply.
final class JournalCursor {
    private let files: DataFiles
    private var fd: Int32 = -1
    private var path = ""
    private var offset = 0
    /// The sequence number of the line at `offset`.
    private var seq: UInt64 = 0
    private var buffer: [UInt8] = []

    /// The largest line a journal may hold (a frame) and a little more.
    private let maxLineBytes: Int

    init(files: DataFiles, maxLineBytes: Int) {
        self.files = files
        self.maxLineBytes = maxLineBytes
    }

    deinit { closeFile() }

    enum Outcome {
        /// Whole lines from `from` through `last`.
        case lines([UInt8], last: UInt64)
        /// No file holds `from` any more (a compaction put it in a snapshot): why.
        case gone(String)
        /// The file could not be read: why.
        case failed(String)
        /// A line read is damaged (its checksum, or not the sequence number its place says): why,
        /// and whether it is in the journal the last compaction kept (`journal.prev.jsonl`).
        case damaged(String, kept: Bool)
    }

    /// Lines from `from` on, at most about `maxBytes` (at least one line) and none after `durable`.
    func read(from: UInt64, durable: UInt64, maxBytes: Int) -> Outcome {
        guard from <= durable else { return .lines([], last: from &- 1) }
        for attempt in 0..<2 {
            if fd < 0 || seq != from {
                switch locate(from) {
                case .some(let problem): return problem
                case .none: break
                }
            }
            switch readLines(limit: durable - from + 1, maxBytes: maxBytes) {
            case .failed(let why): return .failed(why)
            case .lines(let bytes, let count) where count > 0:
                if let damage = Self.damage(in: bytes, from: from) {
                    return .damaged("\(path): \(damage)", kept: path == files.previousJournal)
                }
                return .lines(bytes, last: from + UInt64(count) - 1)
            case .lines:
                // The end of this file: a compaction moved on to the next one. Find it again.
                closeFile()
                if attempt == 1 { return .gone("record \(from) is in no journal file") }
            }
        }
        return .gone("record \(from) is in no journal file")
    }

    private enum Chunk {
        case lines([UInt8], count: Int)
        case failed(String)
    }

    /// Up to `limit` whole lines from `offset`, about `maxBytes` of them.
    private func readLines(limit: UInt64, maxBytes: Int) -> Chunk {
        var want = max(4096, maxBytes)
        while true {
            if buffer.count < want { buffer = [UInt8](repeating: 0, count: want) }
            let n: Int
            do {
                n = try buffer.withUnsafeMutableBytes { raw throws(Errno) in
                    try FileIO.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<want]), at: offset, path: path)
                }
            } catch {
                return .failed("cannot read \(path): \(error)")
            }
            var end = 0
            var count: UInt64 = 0
            var index = 0
            while index < n, count < limit, end < maxBytes {
                if buffer[index] == UInt8(ascii: "\n") {
                    count += 1
                    end = index + 1
                }
                index += 1
            }
            if count == 0 {
                // Half a line (still being written, or longer than the buffer): read more of it.
                if n < want || want >= maxLineBytes { return .lines([], count: 0) }
                want = min(maxLineBytes, want * 2)
                continue
            }
            offset += end
            seq += count
            return .lines(Array(buffer[0..<end]), count: Int(count))
        }
    }

    /// Opens the file holding `target` and finds its line; nil when found.
    private func locate(_ target: UInt64) -> Outcome? {
        closeFile()
        // The next journal (during a compaction) holds the newer records; the one the last
        // compaction replaced, older ones the snapshot holds too.
        for candidate in [files.nextJournal, files.journal, files.previousJournal] {
            let file: Int32
            do {
                file = try FileIO.open(candidate, O_RDONLY)
            } catch where error.code == ENOENT {
                continue
            } catch {
                return .failed("cannot open \(candidate): \(error)")
            }
            fd = file
            path = candidate
            offset = 0
            guard let first = firstSeq() else {
                closeFile()
                continue
            }
            guard first <= target else {
                closeFile()
                continue
            }
            seq = first
            if let problem = skip(target - first) { return problem }
            return nil
        }
        return .gone("record \(target) is no longer in the journal: a compaction put it in the snapshot")
    }

    /// What is wrong with the first damaged line of `bytes` (whole lines, the first one record
    /// `from`), or nil: each must be sealed with its checksum, as a follower requires (a line
    /// written before checksums, or with its seal damaged, has none), and carry the next
    /// sequence number.
    static func damage(in bytes: [UInt8], from: UInt64) -> String? {
        bytes.withUnsafeBytes { raw in
            var start = 0
            var expected = from
            while let end = JournalReplay.newline(in: raw, from: start) {
                let line = UnsafeRawBufferPointer(rebasing: raw[start..<end])
                switch JournalRecord.checksum(of: line) {
                case .valid: break
                case .absent: return "record \(expected) has no checksum"
                case .mismatch: return "record \(expected) does not match its checksum"
                }
                // The id (`"r<seq>"`) says it in a few bytes; a line of another shape is searched.
                let seq = JournalRecord.feedRecordSequence(line) ?? Self.seq(ofLine: bytes[start..<end])
                guard seq == expected else { return "the line where record \(expected) belongs holds \(seq.map { "record \($0)" } ?? "no sequence number")" }
                expected &+= 1
                start = end + 1
            }
            return nil
        }
    }

    /// The sequence number of the file's first line (its `"seq":N` before the seal).
    private func firstSeq() -> UInt64? {
        guard case .lines(let bytes, let count) = readLines(limit: 1, maxBytes: 64 << 10), count == 1 else { return nil }
        offset = 0
        return Self.seq(ofLine: bytes[...].dropLast())
    }

    /// Moves past `lines` lines.
    private func skip(_ lines: UInt64) -> Outcome? {
        var left = lines
        while left > 0 {
            switch readLines(limit: left, maxBytes: 1 << 20) {
            case .failed(let why): return .failed(why)
            case .lines(_, let count):
                if count == 0 { return .gone("the journal ends before record \(seq + left)") }
                left -= UInt64(count)
            }
        }
        return nil
    }

    private func closeFile() {
        if fd >= 0 { FileIO.close(fd) }
        fd = -1
    }

    /// `"seq":N` near the end of a sealed line (before `,"crc":"hhhhhhhh"}`), or anywhere in an
    /// old unsealed one.
    static func seq(ofLine line: ArraySlice<UInt8>) -> UInt64? {
        let marker = Array(#""seq":"#.utf8)
        var index = line.endIndex - marker.count
        while index >= line.startIndex {
            if line[index..<(index + marker.count)].elementsEqual(marker) {
                var value: UInt64 = 0
                var cursor = index + marker.count
                var digits = 0
                while cursor < line.endIndex, let digit = line[cursor].asciiDigit {
                    let (times, o1) = value.multipliedReportingOverflow(by: 10)
                    let (sum, o2) = times.addingReportingOverflow(UInt64(digit))
                    if o1 || o2 { return nil }
                    value = sum
                    cursor += 1
                    digits += 1
                }
                return digits > 0 ? value : nil
            }
            index -= 1
        }
        return nil
    }
}

extension UInt8 {
    fileprivate var asciiDigit: UInt8? { self >= 48 && self <= 57 ? self - 48 : nil }
}
