@testable import RPCEntities
import Testing

@Suite("CRC-32C (RFC 3720 B.4 test vectors)")
struct CRC32CTests {
    @Test("RFC 3720 B.4 vectors and the common check value", arguments: [
        ("32 bytes of zeros", [UInt8](repeating: 0, count: 32), UInt32(0x8A91_36AA)),
        ("32 bytes of 0xFF", [UInt8](repeating: 0xFF, count: 32), UInt32(0x62A8_AB43)),
        ("32 ascending bytes 0..31", (0..<32).map { UInt8($0) }, UInt32(0x46DD_794E)),
        ("32 descending bytes 31..0", (0..<32).reversed().map { UInt8($0) }, UInt32(0x113F_DB5C)),
        ("\"123456789\"", Array("123456789".utf8), UInt32(0xE306_9283)),
    ])
    func vectors(_ name: String, _ bytes: [UInt8], _ expected: UInt32) {
        #expect(CRC32C.checksum(bytes) == expected, "\(name)")
        #expect(bytes.withUnsafeBytes { CRC32C.tableChecksum($0) } == expected, "\(name), tables")
    }

    @Test("the empty input, every length and alignment, and pieces agree with the bit-at-a-time definition")
    func lengthsAndPieces() {
        #expect(CRC32C.checksum([UInt8]()) == 0)
        let data = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
        for start in 0..<9 {
            for end in stride(from: start, through: data.count, by: 7) {
                let crc = data.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
                let tables = data.withUnsafeBytes { CRC32C.tableChecksum(UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
                #expect(crc == bytewise(Array(data[start..<end])), "bytes \(start)..<\(end)")
                #expect(tables == crc, "bytes \(start)..<\(end), tables")
            }
        }
        // In pieces: continuing from a previous result gives the checksum of the whole.
        let whole = CRC32C.checksum(data)
        let first = data[..<77].withUnsafeBytes { CRC32C.checksum($0) }
        #expect(data[77...].withUnsafeBytes { CRC32C.checksum($0, continuing: first) } == whole)
        #expect(data[77...].withUnsafeBytes { CRC32C.tableChecksum($0, continuing: first) } == whole)
    }

    @Test("the CPU's instruction is used on x86-64 (SSE4.2 since 2008)")
    func instruction() {
        #if arch(x86_64)
        #expect(CRC32C.hasInstruction)
        #endif
    }

    /// The textbook one-bit-at-a-time definition.
    private func bytewise(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return ~crc
    }
}
