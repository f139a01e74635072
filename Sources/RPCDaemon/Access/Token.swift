import RPCTransport

#if os(Linux)
import CRPCLinux
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A principal's secret: 32 random bytes, written as 64 lowercase hex digits, shown once by
/// `rpcd auth add`; the auth file keeps only `Token.hash` of it.
enum Token {
    /// Random bytes in a token (256 bits: nothing to guess, so a plain SHA-256 stores it safely).
    static let byteCount = 32

    /// A fresh token from the kernel's random source.
    static func generate() throws(Errno) -> String {
        Hex.encode(try Syscall.randomBytes(count: byteCount))
    }

    /// What the auth file stores for `token`: SHA-256 of its UTF-8 bytes.
    static func hash(_ token: String) -> [UInt8] { SHA256.hash(token.utf8) }
}

/// Lowercase hexadecimal, the auth file's spelling of a digest.
enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        var text: [UInt8] = []
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of an even-length string of lowercase hex digits; nil for anything else.
    static func decode(lowercase text: some StringProtocol) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        for index in stride(from: 0, to: utf8.count, by: 2) {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
    }

    private static func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}

extension Syscall {
    /// `count` bytes from `getrandom(2)` (the urandom source, blocking only until the kernel's pool
    /// is first initialised at boot). EINTR is retried by `retrying`; a short read (possible past
    /// 256 bytes, or when a signal arrives) asks for the rest.
    static func randomBytes(count: Int) throws(Errno) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var filled = 0
        while filled < count {
            let n = try bytes.withUnsafeMutableBytes { buffer in
                Result { () throws(Errno) in
                    #if os(Linux)
                    try retrying("getrandom") { getrandom(buffer.baseAddress! + filled, count - filled, 0) }
                    #else
                    // getentropy fills at most 256 bytes and returns 0: report what it filled.
                    try retrying("getentropy") { getentropy(buffer.baseAddress! + filled, min(256, count - filled)) } == 0 ? min(256, count - filled) : 0
                    #endif
                }
            }.get()
            filled += n
        }
        return bytes
    }
}
