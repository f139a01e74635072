import Testing
import RPCSchema

/// `ExactID` compares its cached fingerprint before its bytes: equal bytes must give equal
/// fingerprints and hashes however the string was made, and equal fingerprints alone must never
/// make two ids equal.
@Suite struct ExactIDTests {
    @Test("the same bytes from a literal, a substring, a decoded buffer and a bridged copy: one id, one hash")
    func sameBytesSameFingerprint() {
        let literal = ExactID("user-\u{E9}-0123456789-abcdef")
        let text = "xx user-\u{E9}-0123456789-abcdef yy"
        let fromSubstring = ExactID(String(text.dropFirst(3).dropLast(3)))
        let fromBytes = ExactID(String(decoding: Array("user-\u{E9}-0123456789-abcdef".utf8), as: UTF8.self))
        let fromScalars = ExactID(String(String.UnicodeScalarView("user-\u{E9}-0123456789-abcdef".unicodeScalars)))
        for other in [fromSubstring, fromBytes, fromScalars] {
            #expect(other == literal)
            #expect(other.fingerprint == literal.fingerprint)
            #expect(other.hashValue == literal.hashValue)
        }
        #expect(Set([literal, fromSubstring, fromBytes, fromScalars]).count == 1)
    }

    @Test("canonically equivalent spellings, short and long, are two ids with two fingerprints")
    func equivalentSpellingsDiffer() {
        for (a, b) in [("caf\u{E9}", "cafe\u{301}"), ("\u{212A}", "K"), (String(repeating: "x", count: 40) + "\u{E9}", String(repeating: "x", count: 40) + "e\u{301}")] {
            let x = ExactID(a)
            let y = ExactID(b)
            #expect(a == b)  // String equality: canonical equivalence
            #expect(x != y)
            #expect(x.fingerprint != y.fingerprint)
            #expect(Set([x, y]).count == 2)
        }
    }

    @Test("a dictionary of 100,000 ids of one length finds each and no other")
    func dictionaryOfSameLengthIDs() {
        var table: [ExactID: Int] = [:]
        for i in 0..<100_000 { table[ExactID("user-\(String(1_000_000 + i))-same-length")] = i }
        #expect(table.count == 100_000)
        for i in stride(from: 0, to: 100_000, by: 997) {
            #expect(table[ExactID("user-\(String(1_000_000 + i))-same-length")] == i)
        }
        #expect(table[ExactID("user-\(String(1_100_000))-same-length")] == nil)
    }

    @Test("a table hashes an id by its fingerprint and its own seed; a table filled in another's order finds each id")
    func tableHashUsesTheFingerprint() {
        let a = ExactID("user-1"), b = ExactID(String("xuser-1".dropFirst()))
        #expect(a._rawHashValue(seed: 7) == b._rawHashValue(seed: 7))
        #expect(a._rawHashValue(seed: 7) != a._rawHashValue(seed: 8))
        // Ids whose fingerprints share their low bits (as one `Records` shard's do) still spread
        // over a table's buckets, which it picks by the low bits.
        let sameShard = (0..<400_000).lazy.map { ExactID("id-\($0)") }.filter { $0.fingerprint & 63 == 5 }.prefix(4_000)
        let buckets = Set(sameShard.map { $0._rawHashValue(seed: 12_345) & 1023 })
        #expect(buckets.count > 900, "\(buckets.count) of 1024 buckets for 4,000 ids")
        // A resize, a copy or a filter walks one table in bucket order into another.
        var first: [ExactID: Int] = [:]
        for i in 0..<50_000 { first[ExactID("k\(i)")] = i }
        var second: [ExactID: Int] = [:]
        for (key, value) in first where value % 3 != 0 { second[key] = value }
        #expect(second.count == 50_000 - 16_667)
        #expect(second.allSatisfy { first[$0.key] == $0.value })
        #expect(second[ExactID("k3")] == nil && second[ExactID("k4")] == 4)
    }
}
