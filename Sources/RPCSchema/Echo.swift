/// How peer input is shown back, in a reply or a log line: bounded by bytes and made safe to print.
///
/// A peer controls the strings it sends, so an echo of one could rewrite an operator's terminal
/// (ESC, CR, BEL), hide in journald as binary (NUL), or grow a one-line reply to megabytes (a
/// grapheme-counting `prefix` lets one letter carry 400,000 combining marks). Every echo goes
/// through here: control characters (C0, DEL, C1) become `\u00XX`, and a text longer than its
/// bound is cut on a UTF-8 boundary with the cut marked.
public enum Echo {
    /// The bytes an echo of a name, a key or a method keeps before it is cut.
    public static let defaultMaxBytes = 64

    /// `text` safe to print and at most `maxBytes` of its UTF-8 (plus the escapes and the mark
    /// `…(+N bytes)` when cut).
    public static func text(_ text: some StringProtocol, maxBytes: Int = defaultMaxBytes) -> String {
        var out = ""
        var kept = 0
        let total = text.utf8.count
        for scalar in text.unicodeScalars {
            let width = UTF8.width(scalar)
            guard kept + width <= maxBytes else { break }
            kept += width
            append(scalar, to: &out)
        }
        if kept < total { out += "…(+\(total - kept) bytes)" }
        return out
    }

    /// Raw bytes (which may not be UTF-8) safe to print: each byte of an invalid sequence becomes
    /// `\u00XX` as control characters do; bounded as `text(_:maxBytes:)` is.
    public static func bytes(_ bytes: some Collection<UInt8>, maxBytes: Int = defaultMaxBytes) -> String {
        let bytes = Array(bytes)
        var out = ""
        var index = 0
        while index < bytes.count {
            let width = sequenceWidth(bytes, at: index)
            guard index + max(width, 1) <= maxBytes else { break }
            if width > 0, let scalar = String(validating: bytes[index..<(index + width)], as: UTF8.self)?.unicodeScalars.first {
                append(scalar, to: &out)
                index += width
            } else {
                out += hex(bytes[index])
                index += 1
            }
        }
        if index < bytes.count { out += "…(+\(bytes.count - index) bytes)" }
        return out
    }

    /// The length of the well-formed UTF-8 sequence at `index`, or 0 when there is none.
    private static func sequenceWidth(_ bytes: [UInt8], at index: Int) -> Int {
        let lead = bytes[index]
        let width = lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0
        guard width > 0, index + width <= bytes.count else { return 0 }
        return String(validating: bytes[index..<(index + width)], as: UTF8.self) == nil ? 0 : width
    }

    /// `text` with every control character escaped and nothing cut (a log line the daemon built).
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars { append(scalar, to: &out) }
        return out
    }

    private static func append(_ scalar: Unicode.Scalar, to out: inout String) {
        if isControl(scalar) {
            out += hex(UInt8(truncatingIfNeeded: scalar.value))
        } else {
            out.unicodeScalars.append(scalar)
        }
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    private static func hex(_ byte: UInt8) -> String {
        let digits: [Character] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f"]
        return "\\u00" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xF)])
    }
}
