import Testing
@testable import RPCTransport

/// Feeds `chunks` and returns what came out: lines as strings, oversize lines as "<tooLarge>".
private func frames(_ chunks: [[UInt8]], max: Int = 64) -> [String] {
    var framer = LineFramer(maxFrameBytes: max)
    var out: [String] = []
    for chunk in chunks {
        chunk.withUnsafeBytes { raw in
            framer.feed(raw) { frame in
                switch frame {
                case .line(let line): out.append(String(decoding: line, as: UTF8.self))
                case .tooLarge: out.append("<tooLarge>")
                }
            }
        }
    }
    return out
}

@Suite struct LineFramerTests {
    let stream = Array("{\"a\":1}\n\r\n{\"b\":2}\r\n\n   \n{\"c\":3}\n".utf8)
    let expected = ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]

    @Test func wholeBufferAtOnce() {
        #expect(frames([stream]) == expected)
    }

    @Test func everySplitPoint() {
        for split in 0...stream.count {
            let got = frames([Array(stream[..<split]), Array(stream[split...])])
            #expect(got == expected, "split at \(split)")
        }
    }

    @Test func everyPairOfSplitPoints() {
        for first in 0...stream.count {
            for second in first...stream.count {
                let got = frames([Array(stream[..<first]), Array(stream[first..<second]), Array(stream[second...])])
                #expect(got == expected, "split at \(first), \(second)")
            }
        }
    }

    @Test func oneByteAtATime() {
        #expect(frames(stream.map { [$0] }) == expected)
    }

    @Test func partialLineIsKeptUntilItsNewline() {
        var framer = LineFramer(maxFrameBytes: 64)
        var lines = 0
        Array("{\"a\":".utf8).withUnsafeBytes { framer.feed($0) { _ in lines += 1 } }
        #expect(lines == 0)
        #expect(framer.bufferedByteCount == 5)
        Array("1}\n".utf8).withUnsafeBytes { framer.feed($0) { _ in lines += 1 } }
        #expect(lines == 1)
        #expect(framer.bufferedByteCount == 0)
    }

    @Test func limitMinusOneLimitAndLimitPlusOne() {
        let limit = 16
        for (length, tooLarge) in [(limit - 1, false), (limit, false), (limit + 1, true)] {
            let line = Array(repeating: UInt8(ascii: "x"), count: length)
            for terminator in ["\n", "\r\n"] {
                let bytes = line + Array(terminator.utf8) + Array("ok\n".utf8)
                // All at once, and one byte at a time (the buffered path).
                for chunks in [[bytes], bytes.map { [$0] }] {
                    let got = frames(chunks, max: limit)
                    let first = tooLarge ? "<tooLarge>" : String(repeating: "x", count: length)
                    #expect(got == [first, "ok"], "length \(length) terminator \(terminator.debugDescription)")
                }
            }
        }
    }

    @Test func oversizeLineIsReportedOnceAndNotBuffered() {
        var framer = LineFramer(maxFrameBytes: 100)
        var reports = 0
        var lines: [String] = []
        let chunk = Array(repeating: UInt8(ascii: "y"), count: 1000)
        for _ in 0..<100 {
            chunk.withUnsafeBytes { raw in
                framer.feed(raw) { frame in
                    if case .tooLarge = frame { reports += 1 }
                }
            }
            #expect(framer.bufferedByteCount <= 101)
        }
        Array("tail\n{}\n".utf8).withUnsafeBytes { raw in
            framer.feed(raw) { frame in
                switch frame {
                case .line(let line): lines.append(String(decoding: line, as: UTF8.self))
                case .tooLarge: reports += 1
                }
            }
        }
        #expect(reports == 1)
        #expect(lines == ["{}"])
    }
}

@Suite struct LineFramerLimitEdgeTests {
    @Test("a limit of Int.max cannot overflow when a line is split across chunks")
    func hugeLimitSplitLine() {
        var framer = LineFramer(maxFrameBytes: Int.max)
        var lines: [String] = []
        for chunk in ["{\"id\":", "\"1\"}", "\n"] {
            Array(chunk.utf8).withUnsafeBytes { raw in
                framer.feed(raw) { frame in
                    if case .line(let line) = frame { lines.append(String(decoding: line, as: UTF8.self)) }
                }
            }
        }
        #expect(lines == [#"{"id":"1"}"#])
    }
}
