/// An identity (a record id, a request id) that is equal to another only when their UTF-8 bytes are,
/// and sorts in byte order.
///
/// Swift's `String ==` is Unicode canonical equivalence: `"caf\u{E9}"` (é) equals `"cafe\u{301}"`
/// (e + combining acute), and `"\u{212A}"` (Kelvin sign) equals `"K"`. Two peers that send those
/// ids mean two records, so every identity is kept, hashed, compared and sorted as this type.
/// Byte order is also Unicode scalar order, and the order of plain ASCII ids is unchanged.
public struct ExactID: Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// The id as received (native UTF-8 storage, so the byte views below need no copy).
    public let string: String
    /// The seeded hash of the bytes (`Hasher`, random per process, so a peer cannot choose ids
    /// that collide), computed once: hashing feeds only this, and `==` compares it before any byte.
    /// A dictionary probe that meets another id then reads no string storage: no retain, no
    /// cache miss on a record's id, for every id in the probe sequence. Package-internal: it
    /// differs from one process to the next, so it means nothing to a client.
    @usableFromInline package let fingerprint: Int

    public init(_ string: String) {
        var string = string
        string.makeContiguousUTF8()
        self.string = string
        fingerprint = Self.fingerprint(of: string)
    }

    /// The fingerprint an `ExactID` of `string` has.
    package static func fingerprint(of string: String) -> Int {
        ExactUTF8.withBytes(string) { fingerprint(of: UnsafeRawBufferPointer($0)) }
    }

    /// The fingerprint an `ExactID` of these UTF-8 bytes has.
    package static func fingerprint(of bytes: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(bytes: bytes)
        return hasher.finalize()
    }

    /// An id whose fingerprint `init(_:)` computed already, for the same string in this process
    /// (a call hashes its record's id once, before the state lock is taken).
    package init(_ string: String, fingerprint: Int) {
        var string = string
        string.makeContiguousUTF8()
        self.string = string
        self.fingerprint = fingerprint
    }

    public init(stringLiteral value: String) { self.init(value) }

    public var description: String { string }

    @inlinable
    public static func == (a: ExactID, b: ExactID) -> Bool {
        a.fingerprint == b.fingerprint && a.string.utf8.count == b.string.utf8.count
            && ExactUTF8.compare(a.string, b.string) == 0
    }

    @inlinable
    public static func < (a: ExactID, b: ExactID) -> Bool { ExactUTF8.compare(a.string, b.string) < 0 }

    @inlinable
    public func hash(into hasher: inout Hasher) { hasher.combine(fingerprint) }

    /// What a `Dictionary` or `Set` hashes an id with: the fingerprint, already a seeded SipHash
    /// of the bytes, mixed with the table's seed by a few multiplies and shifts, not by a second
    /// `Hasher` pass (~150 instructions a lookup, each get and create). Mixed, not just xored:
    /// a table indexes by the low bits, and the ids of one `Records` shard share the low bits of
    /// their fingerprints. `hash(into:)` stays the standard one for every other use.
    @inlinable
    public func _rawHashValue(seed: Int) -> Int {
        // SplitMix64's finalizer: every input bit reaches every output bit.
        var x = UInt64(UInt(bitPattern: fingerprint ^ seed))
        x = (x ^ (x &>> 30)) &* 0xBF58_476D_1CE4_E5B9
        x = (x ^ (x &>> 27)) &* 0x94D0_49BB_1331_11EB
        return Int(Int64(bitPattern: x ^ (x &>> 31)))
    }

    /// Calls `body` with a comparator against this id's bytes, fetched once: <0, 0 or >0 as the
    /// id passed to it sorts before, equal to or after this one (a binary search compares one id
    /// with many).
    @inlinable
    public func withComparator<R>(_ body: ((ExactID) -> Int) -> R) -> R {
        ExactUTF8.withBytes(string) { probe in
            body { other in ExactUTF8.withBytes(other.string) { ExactUTF8.compare($0, probe) } }
        }
    }

    /// The first 24 UTF-8 bytes as three big-endian words, zero-padded. Byte order refines it:
    /// when `a < b`, `a`'s prefix is at or below `b`'s, so a sort can compare prefixes (integer
    /// comparisons) and compare whole ids only when the prefixes are equal.
    public var orderPrefix: (UInt64, UInt64, UInt64) {
        var words: (UInt64, UInt64, UInt64) = (0, 0, 0)
        ExactUTF8.withBytes(string) { bytes in
            withUnsafeMutableBytes(of: &words) { out in
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes).prefix(24)))
            }
        }
        return (UInt64(bigEndian: words.0), UInt64(bigEndian: words.1), UInt64(bigEndian: words.2))
    }
}

/// Byte-exact comparison of strings, for the few places that compare a `String` with a `String`.
public enum ExactUTF8 {
    /// Whether `a` and `b` have the same UTF-8 bytes (not just canonically equivalent text).
    @inlinable @inline(__always)
    public static func equal(_ a: String, _ b: String) -> Bool {
        // Lengths first (inline, no call: most keys looked up differ in length), then `==`: a
        // byte-equal pair is always `==`, so its failing is a cheap "no"; only a match is checked by bytes.
        a.utf8.count == b.utf8.count && a == b && compare(a, b) == 0
    }

    /// <0, 0 or >0 as `a`'s UTF-8 bytes sort before, equal or after `b`'s (shorter prefix first).
    @inlinable
    public static func compare(_ a: String, _ b: String) -> Int {
        withBytes(a) { x in withBytes(b) { y in compare(x, y) } }
    }

    /// <0, 0 or >0 as the bytes `x` sort before, equal or after `y`.
    @inlinable
    public static func compare(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Int {
        let common = Swift.min(x.count, y.count)
        if common > 0, let p = x.baseAddress, let q = y.baseAddress {
            var i = 0
            // Eight bytes at a time, read big-endian so integer order is byte order.
            while i + 8 <= common {
                let u = UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self).bigEndian
                let v = UnsafeRawPointer(q + i).loadUnaligned(as: UInt64.self).bigEndian
                if u != v { return u < v ? -1 : 1 }
                i += 8
            }
            if i < common && common >= 8 {
                // The last eight common bytes, overlapping ones already equal: the first that
                // differs among them is the first that differs.
                let u = UnsafeRawPointer(p + common - 8).loadUnaligned(as: UInt64.self).bigEndian
                let v = UnsafeRawPointer(q + common - 8).loadUnaligned(as: UInt64.self).bigEndian
                if u != v { return u < v ? -1 : 1 }
                i = common
            }
            while i < common {
                if p[i] != q[i] { return p[i] < q[i] ? -1 : 1 }
                i += 1
            }
        }
        return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
    }

    /// Calls `body` with the UTF-8 bytes of `string` (copied only for a string without contiguous storage).
    @inlinable @inline(__always)
    package static func withBytes<R>(_ string: String, _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        if let result = string.utf8.withContiguousStorageIfAvailable(body) { return result }
        return Array(string.utf8).withUnsafeBufferPointer(body)
    }
}
