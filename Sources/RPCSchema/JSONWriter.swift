// Compact JSON output.

public enum JSONWriter {
    /// Appends compact JSON (no spaces) for `value` to `out`. Strings are escaped per RFC 8259
    /// (\" \\ \n \r \t \b \f, other control characters as \u00XX; "/" is not escaped; non-ASCII is
    /// written as raw UTF-8). Numbers are written as their literal text; object pairs in order.
    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        // Most params are a few short plain strings: gathered on the stack, appended once.
        if gathered(into: &out, { $0.value(value) }) { return }
        writeTree(value, into: &out)
    }

    /// `write`, piece by piece.
    private static func writeTree(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null:
            appendASCII("null", into: &out)
        case .bool(let b):
            appendASCII(b ? "true" : "false", into: &out)
        case .number(let text):
            appendUTF8(text, into: &out)
        case .string(let s):
            writeString(s, into: &out)
        case .array(let items):
            out.append(0x5B)  // [
            var first = true
            for item in items {
                if !first { out.append(0x2C) }
                first = false
                writeTree(item, into: &out)
            }
            out.append(0x5D)  // ]
        case .object(let object):
            out.append(0x7B)  // {
            var first = true
            for pair in object.pairs {
                if !first { out.append(0x2C) }
                first = false
                writeString(pair.key, into: &out)
                out.append(0x3A)  // :
                writeTree(pair.value, into: &out)
            }
            out.append(0x7D)  // }
        }
    }

    /// Appends `s` as a quoted, escaped JSON string.
    public static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(0x22)
        appendEscaped(s, into: &out)
        out.append(0x22)
    }

    /// Appends the UTF-8 bytes `buf` as a JSON string, quoted and escaped.
    package static func writeString(_ buf: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        out.append(0x22)
        appendEscaped(buf, into: &out)
        out.append(0x22)
    }

    /// Appends the escaped contents of `s`, without quotes.
    public static func appendEscaped(_ s: String, into out: inout [UInt8]) {
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { buf in
            appendEscaped(buf, into: &out)
        }
        if done == nil {
            var copy = s
            copy.makeContiguousUTF8()
            let again: Void? = copy.utf8.withContiguousStorageIfAvailable { buf in
                appendEscaped(buf, into: &out)
            }
            if again == nil {
                let bytes = Array(s.utf8)
                bytes.withUnsafeBufferPointer { appendEscaped($0, into: &out) }
            }
        }
    }

    /// Compact JSON text for `value`.
    public static func string(_ value: JSONValue) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(value, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: - Internals

    @inline(__always)
    static func appendASCII(_ s: StaticString, into out: inout [UInt8]) {
        out.append(contentsOf: s.bytes)
    }

    @inline(__always)
    static func appendUTF8(_ s: String, into out: inout [UInt8]) {
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { out.append(contentsOf: $0) }
        if done == nil { out.append(contentsOf: s.utf8) }
    }

    private static let hexDigits: StaticString = "0123456789abcdef"

    /// Appends the bytes of a string body, escaping what RFC 8259 requires. Runs of bytes that need
    /// no escaping are appended in one go (the whole string when nothing needs escaping).
    static func appendEscaped(_ buf: UnsafeBufferPointer<UInt8>, into out: inout [UInt8]) {
        var runStart = 0
        var i = 0
        let n = buf.count
        while i < n {
            i = plainEnd(buf, from: i)
            guard i < n else { break }
            let b = buf[i]
            if runStart < i {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<i]))
            }
            out.append(0x5C)  // \
            switch b {
            case 0x22: out.append(0x22)
            case 0x5C: out.append(0x5C)
            case 0x0A: out.append(0x6E)  // n
            case 0x0D: out.append(0x72)  // r
            case 0x09: out.append(0x74)  // t
            case 0x08: out.append(0x62)  // b
            case 0x0C: out.append(0x66)  // f
            default:
                let hex = hexDigits.utf8Start
                out.append(0x75)  // u
                out.append(0x30)
                out.append(0x30)
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 0xF)])
            }
            i += 1
            runStart = i
        }
        if runStart == 0 {
            out.append(contentsOf: buf)
        } else if runStart < n {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buf[runStart..<n]))
        }
    }

    /// The index of the first byte at or after `from` that needs an escape (a quote, a backslash, a
    /// control byte), or the count: eight bytes at a time (a mutation writes its journal line and
    /// its reply under the state lock).
    @inline(__always)
    static func plainEnd(_ buf: UnsafeBufferPointer<UInt8>, from: Int) -> Int {
        var i = from
        let n = buf.count
        if let base = buf.baseAddress {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            while i + 8 <= n {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self))
                // The "has zero / has less" tests flag a byte above a real hit, never one below it.
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let flagged = (((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)) & highs
                if flagged != 0 { return i + flagged.trailingZeroBitCount / 8 }
                i += 8
            }
        }
        while i < n {
            let b = buf[i]
            if b < 0x20 || b == 0x22 || b == 0x5C { return i }
            i += 1
        }
        return n
    }
}

extension StaticString {
    /// The literal's UTF-8 bytes, in place. The byte literals a request's path appends or compares
    /// are `StaticString`s, not `static let` arrays: an array is one object whose reference count
    /// every append changes (`append(contentsOf:)` consumes its argument), so the event loops
    /// passed its cache line back and forth, under the state lock too.
    @inlinable
    package var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: utf8Start, count: utf8CodeUnitCount) }
}
