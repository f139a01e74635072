import FuzzSupport
import RPCTransport

/// Fuzzes `LineFramer`: feeds a byte stream in chunks the input chooses and checks the frames
/// against a reference split of the whole stream.
///
/// Input: byte 0 picks `maxFrameBytes` (0...239 -> 1...240; 240...253 -> 1, 1001, ... 13001;
/// 254 -> Int.max - 1; 255 -> Int.max); byte 1 mod 16 is the number of chunk lengths that follow
/// (one byte each, 0 is an empty feed); the rest is the stream, fed in those lengths and then in
/// one last chunk.
@main enum FuzzFramer {
    static func main() {
        FuzzMain.run { data, size in
            FuzzFramer.test(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
    }

    static func test(_ input: UnsafeRawBufferPointer) {
        guard input.count >= 2 else { return }
        let limit = maxFrameBytes(input[0])
        let splits = Int(input[1] % 16)
        guard input.count >= 2 + splits else { return }
        let lengths = input[2..<(2 + splits)].map(Int.init)
        let stream = UnsafeRawBufferPointer(rebasing: input[(2 + splits)...])
        check(stream, limit: limit, chunks: lengths)
    }

    static func maxFrameBytes(_ byte: UInt8) -> Int {
        switch byte {
        case 0..<240: return Int(byte) + 1
        case 240..<254: return Int(byte - 240) * 1000 + 1
        case 254: return Int.max - 1
        default: return Int.max
        }
    }

    /// What the framer hands on, with the bytes of lines copied out of the callback.
    enum Frame: Equatable, CustomStringConvertible {
        case line([UInt8])
        case tooLarge

        var description: String {
            switch self {
            case .line(let bytes): return "line(\(String(decoding: bytes, as: UTF8.self).debugDescription))"
            case .tooLarge: return "tooLarge"
            }
        }
    }

    static func check(_ stream: UnsafeRawBufferPointer, limit: Int, chunks lengths: [Int]) {
        var framer = LineFramer(maxFrameBytes: limit)
        var frames: [Frame] = []
        var offset = 0
        var chunks = lengths.map { length -> Range<Int> in
            let end = min(stream.count, offset + length)
            defer { offset = end }
            return offset..<end
        }
        chunks.append(offset..<stream.count)
        for chunk in chunks {
            framer.feed(UnsafeRawBufferPointer(rebasing: stream[chunk])) { frame in
                switch frame {
                case .line(let bytes):
                    fuzzCheck(bytes.count <= limit, "a line of \(bytes.count) bytes passed the limit \(limit)")
                    frames.append(.line(Array(bytes)))
                case .tooLarge(let length):
                    fuzzCheck(length > limit, "tooLarge(length: \(length)) is within the limit \(limit)")
                    frames.append(.tooLarge)
                }
            }
            // An unfinished line is held only while it can still fit (one byte more: a `\r` may follow).
            fuzzCheck(framer.bufferedByteCount == 0 || framer.bufferedByteCount - 1 <= limit,
                "\(framer.bufferedByteCount) bytes buffered with the limit \(limit)")
        }
        let expected = reference(stream, limit: limit)
        fuzzCheck(frames == expected, "limit \(limit), chunks \(lengths): framer gave \(frames), reference \(expected)")
    }

    /// The whole stream split at `\n`: each complete line loses one trailing `\r`; blank lines (only
    /// spaces, tabs, `\r`) are skipped; a line longer than the limit is one `tooLarge`; so is an
    /// unfinished last line that is already more than one byte past the limit.
    static func reference(_ stream: UnsafeRawBufferPointer, limit: Int) -> [Frame] {
        let pieces = stream.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        var frames: [Frame] = []
        for piece in pieces.dropLast() {
            var line = Array(piece)
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            if line.count > limit {
                frames.append(.tooLarge)
            } else if !line.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) {
                frames.append(.line(line))
            }
        }
        if let tail = pieces.last, tail.count - 1 > limit { frames.append(.tooLarge) }
        return frames
    }
}
