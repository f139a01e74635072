import Testing
@testable import RPCDaemon

/// SHA-256 against published vectors. Every digest below was also checked with `sha256sum` (and
/// Python's hashlib) when the test was written; the message bytes are given in full.
struct SHA256Tests {
    private func hex(_ bytes: [UInt8]) -> String { Hex.encode(SHA256.hash(bytes)) }

    // FIPS 180-4 examples (NIST "SHA256.pdf", Cryptographic Standards and Guidelines: examples
    // with intermediate values).

    @Test func fipsOneBlockMessage() {
        #expect(hex(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func fipsTwoBlockMessage448Bits() {
        let message = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"
        #expect(message.utf8.count == 56)
        #expect(hex(Array(message.utf8)) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
    }

    @Test func fipsMessage896Bits() {
        let message = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"
        #expect(message.utf8.count == 112)
        #expect(hex(Array(message.utf8)) == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
    }

    @Test func fipsOneMillionA() {
        #expect(hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
            == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
    }

    /// NIST CAVP SHAVS, byte-oriented `SHA256ShortMsg.rsp` (Len in bits; Len = 0 is the empty
    /// message): the first few, and those around the padding boundary, where 55 bytes still fit
    /// the length in the last block, 56 do not, and 63 and 64 fill or just overflow one block.
    static let shortMessages: [(message: String, digest: String)] = [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),  // Len = 0
        ("d3", "28969cdfa74a12c82f3bad960b0b000aca2ac329deea5c2328ebc6f2ba9802c1"),  // Len = 8
        ("11af", "5ca7133fa735326081558ac312c620eeca9970d1e70a4b95533d956f072d1f98"),  // Len = 16
        ("b4190e", "dff2e73091f6c05e528896c4c831b9448653dc2ff043528f6769437bc7b975c2"),  // Len = 24
        ("74ba2521", "b16aa56be3880d18cd41e68384cf1ec8c17680c45a02b1575dc1518923ae8b0e"),  // Len = 32
        // Len = 432 (54 bytes)
        ("25362a4b9d74bde6128c4fdc672305900947bc3ada9d9d316ebcf1667ad4363189937251f149c72e064a48608d940b7574b17fefc0df",
         "f8e4ccab6c979229f6066cc0cb0cfa81bb21447c16c68773be7e558e9f9d798d"),
        // Len = 440 (55 bytes)
        ("3ebfb06db8c38d5ba037f1363e118550aad94606e26835a01af05078533cc25f2f39573c04b632f62f68c294ab31f2a3e2a1a0d8c2be51",
         "6595a2ef537a69ba8583dfbf7f5bec0ab1f93ce4c8ee1916eff44a93af5749c4"),
        // Len = 448 (56 bytes)
        ("2d52447d1244d2ebc28650e7b05654bad35b3a68eedc7f8515306b496d75f3e73385dd1b002625024b81a02f2fd6dffb6e6d561cb7d0bd7a",
         "cfb88d6faf2de3a69d36195acec2e255e2af2b7d933997f348e09f6ce5758360"),
        // Len = 456 (57 bytes)
        ("4cace422e4a015a75492b3b3bbfbdf3758eaff4fe504b46a26c90dacc119fa9050f603d2b58b398cad6d6d9fa922a154d9e0bc4389968274b0",
         "4d54b2d284a6794581224e08f675541c8feab6eefa3ac1cfe5da4e03e62f72e4"),
        // Len = 504 (63 bytes)
        ("e2f76e97606a872e317439f1a03fcd92e632e5bd4e7cbc4e97f1afc19a16fde92d77cbe546416b51640cddb92af996534dfd81edb17c4424cf1ac4d75aceeb",
         "18041bd4665083001fba8c5411d2d748e8abbfdcdfd9218cb02b68a78e7d4c23"),
        // Len = 512 (64 bytes)
        ("5a86b737eaea8ee976a0a24da63e7ed7eefad18a101c1211e2b3650c5187c2a8a650547208251f6d4237e661c7bf4c77f335390394c37fa1a9f9be836ac28509",
         "42e61e174fbb3897d6dd6cef3dd2802fe67b331953b06114a65c772859dfc1aa"),
    ]

    @Test(arguments: 0..<shortMessages.count)
    func nistShortMessage(_ index: Int) throws {
        let (message, digest) = Self.shortMessages[index]
        let bytes = try #require(Hex.decode(lowercase: message))
        #expect(hex(bytes) == digest, "Len = \(bytes.count * 8)")
    }

    /// Fed in pieces of every size from 1 to 130 bytes, the digest is the one of the whole.
    @Test func piecesHashLikeTheWhole() {
        let message = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let whole = SHA256.hash(message)
        for size in 1...130 {
            var hasher = SHA256()
            var start = 0
            while start < message.count {
                let end = min(start + size, message.count)
                hasher.update(Array(message[start..<end]))
                start = end
            }
            #expect(hasher.finalize() == whole, "pieces of \(size)")
        }
    }

    @Test func tokensHashToTheirHexDigest() {
        #expect(SHA256.hex(of: "abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Token.hash("abc") == Hex.decode(lowercase: SHA256.hex(of: "abc")))
    }
}
