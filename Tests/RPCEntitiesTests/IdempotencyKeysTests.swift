import Testing
import RPCSchema
@testable import RPCEntities

/// The idempotency-key table's pure parts.
@Suite struct IdempotencyKeysTests {
    /// Snapshots store digests (`"digest":"hex"`), so the function may get faster but never change:
    /// these values are FNV-1a 64 of the byte sequences the digest is defined over, computed apart.
    @Test func digestsKeepTheirValues() throws {
        let param = try JSONParser.parse(Array(#"{"id":"u1","name":"Ad\u00e9","n":12.5,"tags":[true,null,false],"o":{}}"#.utf8))
        #expect(IdempotencyKeys.digest(method: RPCMethod("user", "createUser"), param: param) == 0x6b4d_d9ae_08f7_dbd7)
        #expect(IdempotencyKeys.digest(method: RPCMethod("user", "deleteUser"), param: nil) == 0xd72b_aae6_6427_cd06)
    }
}
