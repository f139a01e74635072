import RPCSchema
import Testing

@Suite("Echo: peer input shown back bounded and printable")
struct EchoTests {
    @Test("control characters (C0, DEL, C1) become \\u00XX; other text is kept")
    func escapes() {
        #expect(Echo.text("a\u{1B}[31m\r\u{07}\u{00}\u{7F}\u{85}é") == #"a\u001b[31m\u000d\u0007\u0000\u007f\u0085é"#)
        #expect(Echo.escaped("line\nbreak\ttab") == #"line\u000abreak\u0009tab"#)
        #expect(Echo.escaped("plain text") == "plain text")
    }

    @Test("a long text is cut by bytes on a scalar boundary, the cut marked")
    func boundsByBytes() {
        let marks = "a" + String(repeating: "\u{0301}", count: 400_000)  // one grapheme
        let shown = Echo.text(marks)
        #expect(shown.utf8.count < 200)
        #expect(shown.hasSuffix("…(+\(marks.utf8.count - 63) bytes)"), "\(shown)")
        // A 2-byte scalar that does not fit is left out whole.
        #expect(Echo.text(String(repeating: "é", count: 40), maxBytes: 5) == "éé…(+76 bytes)")
        #expect(Echo.text("short") == "short")
    }

    @Test("raw bytes: invalid UTF-8 escaped byte by byte, valid sequences kept, bounded")
    func rawBytes() {
        #expect(Echo.bytes([0x61, 0xFF, 0xC3, 0xA9, 0x0A]) == #"a\u00ffé\u000a"#)
        #expect(Echo.bytes(Array(repeating: UInt8(ascii: "x"), count: 100), maxBytes: 10) == "xxxxxxxxxx…(+90 bytes)")
    }
}
