import Testing
@testable import RPCDaemon

/// `ConstantTime.equal` answers like `==`; it only takes longer to say no.
struct ConstantTimeTests {
    @Test func equalBytesAreEqual() {
        #expect(ConstantTime.equal([], []))
        #expect(ConstantTime.equal([0], [0]))
        let digest = SHA256.hash(Array("token".utf8))
        #expect(ConstantTime.equal(digest, SHA256.hash(Array("token".utf8))))
    }

    /// A difference in any single bit of any byte (first, middle, last) is found.
    @Test func everySingleBitDifferenceIsFound() {
        let digest = SHA256.hash(Array("token".utf8))
        for index in digest.indices {
            for bit in 0..<8 {
                var other = digest
                other[index] ^= 1 << bit
                #expect(!ConstantTime.equal(digest, other), "byte \(index) bit \(bit)")
                #expect(!ConstantTime.equal(other, digest), "byte \(index) bit \(bit)")
            }
        }
    }

    @Test func differentLengthsAreUnequal() {
        #expect(!ConstantTime.equal([1, 2, 3], [1, 2]))
        #expect(!ConstantTime.equal([], [0]))
        #expect(!ConstantTime.equal(Array(repeating: 0, count: 32), Array(repeating: 0, count: 33)))
    }

    /// Agrees with `==` over many random pairs, equal and not.
    @Test func agreesWithEquality() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<1000 {
            let a = (0..<4).map { _ in UInt8.random(in: 0...3, using: &generator) }
            let b = (0..<4).map { _ in UInt8.random(in: 0...3, using: &generator) }
            #expect(ConstantTime.equal(a, b) == (a == b))
        }
    }

    @Test func hexRoundTripsAndRefusesWhatIsNotLowercaseHex() throws {
        let bytes: [UInt8] = [0x00, 0x0f, 0xa5, 0xff]
        #expect(Hex.encode(bytes) == "000fa5ff")
        #expect(Hex.decode(lowercase: "000fa5ff") == bytes)
        #expect(Hex.decode(lowercase: "") == [])
        #expect(Hex.decode(lowercase: "000FA5FF") == nil)
        #expect(Hex.decode(lowercase: "abc") == nil)
        #expect(Hex.decode(lowercase: "zz") == nil)
    }

    @Test func tokensAreFreshAnd64HexDigits() throws {
        let a = try Token.generate()
        let b = try Token.generate()
        #expect(a.utf8.count == 64 && Hex.decode(lowercase: a)?.count == 32)
        #expect(a != b)
    }
}
