import CRPCLinux

/// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78, initial value and final xor
/// 0xFFFFFFFF): the checksum of iSCSI (RFC 3720 B.4), ext4 and SCTP. Its one user is
/// `JournalRecord`, which seals every journal and snapshot line with it.
///
/// With the CPU's instruction where it has one (x86-64 SSE4.2, AArch64 CRC: 8 bytes a cycle or
/// so; a journal line is written under the state lock, and a restart checks a million of them),
/// else slicing-by-8 in plain Swift: eight 256-entry tables, one 8-byte load and eight lookups per
/// 8 bytes of input (about 1-2 GB/s on one core here).
public enum CRC32C {
    /// The CRC-32C of `bytes`; pass a previous result as `continuing` to checksum data in pieces.
    public static func checksum(_ bytes: UnsafeRawBufferPointer, continuing previous: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return previous }
        if hasInstruction { return ~crpc_crc32c_update(~previous, base, bytes.count) }
        return tableChecksum(bytes, continuing: previous)
    }

    /// Whether this CPU has a CRC-32C instruction (asked once).
    static let hasInstruction = crpc_crc32c_available() != 0

    /// The portable path (tests run both).
    static func tableChecksum(_ bytes: UnsafeRawBufferPointer, continuing previous: UInt32 = 0) -> UInt32 {
        var crc = ~previous
        guard var p = bytes.baseAddress else { return previous }
        var n = bytes.count
        tables.withUnsafeBufferPointer { t in
            while n >= 8 {
                let word = UInt64(littleEndian: p.loadUnaligned(as: UInt64.self)) ^ UInt64(crc)
                let low = UInt32(truncatingIfNeeded: word)
                let high = UInt32(truncatingIfNeeded: word >> 32)
                crc = t[7 &* 256 &+ Int(low & 0xFF)] ^ t[6 &* 256 &+ Int((low >> 8) & 0xFF)]
                    ^ t[5 &* 256 &+ Int((low >> 16) & 0xFF)] ^ t[4 &* 256 &+ Int(low >> 24)]
                    ^ t[3 &* 256 &+ Int(high & 0xFF)] ^ t[2 &* 256 &+ Int((high >> 8) & 0xFF)]
                    ^ t[1 &* 256 &+ Int((high >> 16) & 0xFF)] ^ t[Int(high >> 24)]
                p += 8
                n -= 8
            }
            while n > 0 {
                crc = t[Int((crc ^ UInt32(p.load(as: UInt8.self))) & 0xFF)] ^ (crc >> 8)
                p += 1
                n -= 1
            }
        }
        return ~crc
    }

    /// The CRC-32C of a byte collection (tests, short strings).
    public static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        Array(bytes).withUnsafeBytes { checksum($0) }
    }

    /// Table k (entries k*256 ..< (k+1)*256) advances a byte through k further zero bytes, so eight
    /// bytes fold in with eight independent lookups.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for byte in 0..<256 {
            var crc = UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[byte] = crc
        }
        for k in 1..<8 {
            for byte in 0..<256 {
                let previous = tables[(k - 1) * 256 + byte]
                tables[k * 256 + byte] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()
}
