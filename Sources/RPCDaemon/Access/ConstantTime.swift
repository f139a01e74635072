/// Comparing secrets without telling an attacker how close they came.
///
/// `==` on arrays stops at the first differing byte, so the time it takes says how many leading
/// bytes matched; a peer that can time many `system.auth` calls could learn a stored value byte
/// by byte. Here every byte of both inputs is read and the differences are OR-ed together, with no
/// branch on the data, so the time depends only on the length (which is public: a digest is
/// always 32 bytes). The token is hashed before it is compared (see `AuthFile`), so even a leak
/// would give away bytes of a hash, not of a token; this closes that channel too.
enum ConstantTime {
    /// Whether `a` and `b` hold the same bytes. Inputs of different lengths are unequal at once:
    /// only the length is revealed, never the content.
    @inline(never)
    static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        a.withUnsafeBufferPointer { a in
            b.withUnsafeBufferPointer { b in
                for index in 0..<a.count { difference |= a[index] ^ b[index] }
            }
        }
        return difference == 0
    }
}
