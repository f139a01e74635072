/// A strict RFC 8259 recognizer for one JSON text, written apart from RPCSchema's parser so that
/// what rpcd writes is judged by a second opinion. Only says yes or no.
public enum JSONCheck {
    /// True when `bytes` is valid UTF-8 holding exactly one JSON value (whitespace around it allowed).
    public static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard String(validating: bytes, as: UTF8.self) != nil else { return false }
        var reader = Reader(bytes: bytes)
        reader.skipSpace()
        guard reader.value(depth: 0) else { return false }
        reader.skipSpace()
        return reader.index == bytes.count
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let b = peek, b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { index += 1 }
        }

        mutating func take(_ b: UInt8) -> Bool {
            guard peek == b else { return false }
            index += 1
            return true
        }

        mutating func literal(_ text: StaticString) -> Bool {
            let utf8 = UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
            for b in utf8 where !take(b) { return false }
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < 512, let b = peek else { return false }
            switch b {
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return literal("true")
            case UInt8(ascii: "f"): return literal("false")
            case UInt8(ascii: "n"): return literal("null")
            default: return number()
            }
        }

        mutating func object(depth: Int) -> Bool {
            index += 1
            skipSpace()
            if take(UInt8(ascii: "}")) { return true }
            while true {
                skipSpace()
                guard string() else { return false }
                skipSpace()
                guard take(UInt8(ascii: ":")) else { return false }
                skipSpace()
                guard value(depth: depth + 1) else { return false }
                skipSpace()
                if take(UInt8(ascii: "}")) { return true }
                guard take(UInt8(ascii: ",")) else { return false }
            }
        }

        mutating func array(depth: Int) -> Bool {
            index += 1
            skipSpace()
            if take(UInt8(ascii: "]")) { return true }
            while true {
                skipSpace()
                guard value(depth: depth + 1) else { return false }
                skipSpace()
                if take(UInt8(ascii: "]")) { return true }
                guard take(UInt8(ascii: ",")) else { return false }
            }
        }

        mutating func string() -> Bool {
            guard take(UInt8(ascii: "\"")) else { return false }
            while let b = peek {
                index += 1
                switch b {
                case UInt8(ascii: "\""): return true
                case 0x00..<0x20: return false
                case UInt8(ascii: "\\"):
                    guard let e = peek else { return false }
                    index += 1
                    switch e {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        continue
                    case UInt8(ascii: "u"):
                        for _ in 0..<4 {
                            guard let h = peek, isHex(h) else { return false }
                            index += 1
                        }
                    default: return false
                    }
                default: continue
                }
            }
            return false
        }

        mutating func number() -> Bool {
            _ = take(UInt8(ascii: "-"))
            if take(UInt8(ascii: "0")) {
            } else {
                guard let b = peek, b >= UInt8(ascii: "1") && b <= UInt8(ascii: "9") else { return false }
                digits()
            }
            if take(UInt8(ascii: ".")) {
                guard let b = peek, isDigit(b) else { return false }
                digits()
            }
            if take(UInt8(ascii: "e")) || take(UInt8(ascii: "E")) {
                if !take(UInt8(ascii: "+")) { _ = take(UInt8(ascii: "-")) }
                guard let b = peek, isDigit(b) else { return false }
                digits()
            }
            return true
        }

        mutating func digits() {
            while let b = peek, isDigit(b) { index += 1 }
        }

        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

        func isHex(_ b: UInt8) -> Bool {
            isDigit(b) || (b >= UInt8(ascii: "a") && b <= UInt8(ascii: "f")) || (b >= UInt8(ascii: "A") && b <= UInt8(ascii: "F"))
        }
    }
}
