import Testing
import RPCSchema
@testable import RPCEntities

/// The idempotency-key table: its digest, and the table against a plain model.
@Suite struct IdempotencyKeysTests {
    /// Snapshots and the change feed store digests (`"digest":"v2:hex"`), so the function may get
    /// faster but never change: these values were computed apart (a 12-line Python transcription of
    /// `digest(canonical:)`) over the canonical bytes checked first.
    @Test func digestsKeepTheirValues() throws {
        let param = try JSONParser.parse(Array(#"{"id":"u1","name":"Ad\u00e9","n":12.5,"tags":[true,null,false],"o":{}}"#.utf8))
        var bytes: [UInt8] = []
        JournalRecord.appendMethodAndParam(method: RPCMethod("user", "createUser"), param: param, into: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #","method":"user.createUser","param":{"id":"u1","name":"Adé","n":12.5,"tags":[true,null,false],"o":{}}"#)
        #expect(IdempotencyKeys.digest(method: RPCMethod("user", "createUser"), param: param) == 0x999d_5ff4_11ce_7a19)
        bytes = []
        JournalRecord.appendMethodAndParam(method: RPCMethod("user", "deleteUser"), param: nil, into: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #","method":"user.deleteUser""#)
        #expect(IdempotencyKeys.digest(method: RPCMethod("user", "deleteUser"), param: nil) == 0x76b6_ff8c_e16d_a07f)
        // The digest snapshots held before: FNV-1a 64 of the structure's byte sequence, computed apart.
        #expect(IdempotencyKeys.legacyDigest(method: RPCMethod("user", "createUser"), param: param) == 0x6b4d_d9ae_08f7_dbd7)
        #expect(IdempotencyKeys.legacyDigest(method: RPCMethod("user", "deleteUser"), param: nil) == 0xd72b_aae6_6427_cd06)
    }

    /// A keyed request's journal record hashes the bytes it encodes; replay and followers hash a
    /// fresh encoding of the parsed request: the two must agree for every param, or a retry after
    /// a restart would be `keyReused`.
    @Test func recordDigestIsTheRequestDigest() throws {
        let params = [
            nil, #"{}"#, #"{"id":"u1","name":"Ada","email":"a@x"}"#, #"{"id":"\"\\\n\u0001\u2028😀","n":-0.0e+5}"#,
            #"{"id":"b","residents":["u1","u2"],"nested":{"a":[[],{},null]}}"#, #"{"limit":100,"after":"u9"}"#,
        ]
        for text in params {
            let param = try text.map { try JSONParser.parse(Array($0.utf8)) }
            for method in [CreateUser.method, RPCMethod("building", "addBuilding"), RPCMethod("user", "deleteUser")] {
                let request = Request(id: "7", method: method, param: param, key: "k")
                let body = JournalRecord.Body(request)
                #expect(body.digest == IdempotencyKeys.digest(method: method, param: param), "\(method) \(text ?? "nil")")
                #expect(JournalRecord.Body(Request(id: "7", method: method, param: param)).digest == nil)
            }
        }
        let first = try JSONParser.parse(Array(#"{"id":"u1","name":"Ada"}"#.utf8))
        let other = try JSONParser.parse(Array(#"{"name":"Ada","id":"u1"}"#.utf8))
        #expect(IdempotencyKeys.digest(method: CreateUser.method, param: first) != IdempotencyKeys.digest(method: CreateUser.method, param: other))
    }

    @Test func digestTextsReadBack() {
        for value: UInt64 in [0, 1, 0xABC, UInt64.max] {
            for legacy in [false, true] {
                let text = IdempotencyKeys.digestText(value, legacy: legacy)
                #expect(text.hasPrefix("v2:") == !legacy)
                let read = IdempotencyKeys.digest(text: text)
                #expect(read?.value == value && read?.legacy == legacy, "\(text)")
            }
        }
        for bad in ["", "v2:", "v2:+1", "+1", "x", "v3:1", "1 ", "10000000000000000", "v2:-1"] {
            #expect(IdempotencyKeys.digest(text: bad) == nil, "\(bad)")
        }
    }

    private func outcome(_ n: Int, failed: Bool = false) -> IdempotencyKeys.Outcome {
        .init(digest: UInt64(n), reply: Array("{\"n\":\(n)}".utf8), failed: failed, seq: failed ? 0 : UInt64(n))
    }

    @Test func remembersAndCountsHits() {
        var keys = IdempotencyKeys()
        #expect(keys.lookup(ExactID("a"), now: 1) == nil)
        keys.remember(ExactID("a"), outcome(1), now: 1)
        keys.remember(ExactID("b"), outcome(2, failed: true), now: 1)
        #expect(keys.lookup(ExactID("a"), now: 2) == outcome(1))
        #expect(keys.lookup(ExactID("b"), now: 2) == outcome(2, failed: true))
        #expect(keys.lookup(ExactID("c"), now: 2) == nil)
        #expect(keys.count == 2 && keys.hits == 2)
        // A key held keeps its first outcome.
        keys.remember(ExactID("a"), outcome(9), now: 3)
        #expect(keys.lookup(ExactID("a"), now: 3) == outcome(1) && keys.count == 2)
    }

    @Test func forgetsTheOldestPastTheLimitAndTheWindow() {
        var keys = IdempotencyKeys(limit: 3, windowSeconds: 10)
        for n in 0..<5 { keys.remember(ExactID("k\(n)"), outcome(n), now: UInt64(n) * 1_000_000_000) }
        #expect(keys.count == 3 && keys.evictions == 2)
        #expect(keys.lookup(ExactID("k1"), now: 5_000_000_000) == nil)
        #expect(keys.lookup(ExactID("k2"), now: 5_000_000_000) == outcome(2))
        // k2 was remembered at 2 s: at 12.5 s it is past the 10 s window, k3 and k4 are not.
        #expect(keys.lookup(ExactID("k3"), now: 12_500_000_000) == outcome(3))
        #expect(keys.count == 2 && keys.evictions == 3)
        keys.setBounds(limit: 0, windowSeconds: 10, now: 12_500_000_000)
        #expect(keys.count == 0 && keys.lookup(ExactID("k4"), now: 12_500_000_000) == nil)
        keys.remember(ExactID("k5"), outcome(5), now: 13_000_000_000)
        #expect(keys.count == 0)  // limit 0: nothing is remembered
    }

    /// Keys whose hashes are equal, or equal in their shard, slot and tag bits, are told apart by
    /// their bytes, and forgetting one leaves the other.
    @Test func collidingHashesAreToldApart() {
        var keys = IdempotencyKeys(limit: 10)
        let a = IdempotencyKeys.Key(ExactID("a"), hash: 42)
        let b = IdempotencyKeys.Key(ExactID("b"), hash: 42)
        let c = IdempotencyKeys.Key(ExactID("c"), hash: 42 | 1 << 60)
        keys.remember(a, outcome(1), now: 0)
        keys.remember(b, outcome(2), now: 0)
        keys.remember(c, outcome(3), now: 0)
        #expect(keys.lookup(b, now: 0) == outcome(2) && keys.lookup(c, now: 0) == outcome(3))
        keys.setBounds(limit: 2, windowSeconds: 60, now: 0)
        #expect(keys.lookup(a, now: 0) == nil)
        #expect(keys.lookup(b, now: 0) == outcome(2) && keys.lookup(c, now: 0) == outcome(3))
    }

    /// A copy (what compaction takes) does not change when the original goes on, and back.
    @Test func copiesAreIndependent() {
        var keys = IdempotencyKeys(limit: 5000)
        for n in 0..<6000 { keys.remember(ExactID("k\(n)"), outcome(n), now: 0) }
        let copy = keys
        for n in 6000..<9000 { keys.remember(ExactID("k\(n)"), outcome(n), now: 0) }
        var copied = copy
        #expect(copied.lookup(ExactID("k1000"), now: 0) == outcome(1000))
        #expect(copied.lookup(ExactID("k6000"), now: 0) == nil)
        #expect(keys.lookup(ExactID("k1000"), now: 0) == nil)
        #expect(keys.lookup(ExactID("k8999"), now: 0) == outcome(8999))
        var applied: [ExactID] = []
        copy.forEachApplied { key, _, _, _, _ in applied.append(ExactID(String(decoding: key, as: UTF8.self))) }
        #expect(applied == (1000..<6000).map { ExactID("k\($0)") })
        // Both go on from the chunk they share: neither overwrites the other's bytes.
        for n in 20000..<20100 { copied.remember(ExactID("c\(n)"), outcome(n), now: 0) }
        for n in 9000..<9100 { keys.remember(ExactID("k\(n)"), outcome(n), now: 0) }
        #expect((6000..<9100).allSatisfy { keys.lookup(ExactID("k\($0)"), now: 0) == outcome($0) })
        #expect((20000..<20100).allSatisfy { copied.lookup(ExactID("c\($0)"), now: 0) == outcome($0) })
        #expect((1100..<6000).allSatisfy { copied.lookup(ExactID("k\($0)"), now: 0) == outcome($0) })
        #expect(keys.lookup(ExactID("c20000"), now: 0) == nil && copied.lookup(ExactID("k9000"), now: 0) == nil)
    }

    /// The chunks an eviction drops are written again for new keys (no page faults for a table at
    /// its limit), but never one a copy still reads: the copy's keys and replies stay whole.
    @Test func droppedChunksAreReusedOnlyWhereNoCopyReadsThem() {
        func big(_ n: Int) -> IdempotencyKeys.Outcome {
            .init(digest: UInt64(n), reply: Array("{\"n\":\(n),\"pad\":\"\(String(repeating: "x", count: 1000))\"}".utf8), seq: UInt64(n))
        }
        var keys = IdempotencyKeys(limit: 2000)
        // ~250 replies a byte chunk, 4,096 entries an entry chunk: both kinds are dropped and reused.
        for n in 0..<10000 { keys.remember(ExactID("k\(n)"), big(n), now: 0) }
        #expect((8000..<10000).allSatisfy { keys.lookup(ExactID("k\($0)"), now: 0) == big($0) })
        let copy = keys
        for n in 10000..<20000 { keys.remember(ExactID("k\(n)"), big(n), now: 0) }
        var next = 8000
        var whole = true
        copy.forEachApplied { key, digest, _, seq, reply in
            whole = whole && String(decoding: key, as: UTF8.self) == "k\(next)" && digest == UInt64(next) && seq == UInt64(next)
                && Array(reply) == big(next).reply
            next += 1
        }
        #expect(whole && next == 10000)
        #expect((18000..<20000).allSatisfy { keys.lookup(ExactID("k\($0)"), now: 0) == big($0) })
        #expect(keys.lookup(ExactID("k17999"), now: 0) == nil && keys.count == 2000)
    }

    /// Replies larger than a byte chunk, and empty ones, come back whole; snapshots list successes
    /// only, oldest first.
    @Test func repliesOfAnySizeComeBackWhole() {
        var keys = IdempotencyKeys()
        let large = (0..<700_000).map { UInt8(truncatingIfNeeded: $0 % 251) }
        keys.remember(ExactID("small"), .init(digest: 1, reply: Array("{}".utf8), seq: 1), now: 0)
        keys.remember(ExactID("large"), .init(digest: 2, reply: large, seq: 2), now: 0)
        keys.remember(ExactID("empty"), .init(digest: 3, reply: [], seq: 3), now: 0)
        keys.remember(ExactID("failed"), outcome(4, failed: true), now: 0)
        keys.remember(ExactID("after"), .init(digest: 5, reply: Array("[5]".utf8), seq: 5), now: 0)
        #expect(keys.lookup(ExactID("large"), now: 0)?.reply == large)
        #expect(keys.lookup(ExactID("empty"), now: 0)?.reply == [])
        #expect(keys.lookup(ExactID("after"), now: 0)?.reply == Array("[5]".utf8))
        var listed: [(String, UInt64, Int)] = []
        keys.forEachApplied { key, outcome in listed.append((key.string, outcome.seq, outcome.reply.count)) }
        #expect(listed.map(\.0) == ["small", "large", "empty", "after"])
        #expect(listed.map(\.2) == [2, 700_000, 0, 3])
    }

    /// Entry numbers that near their limit start again from 0 without losing a key.
    @Test func numbersStartAgainBeforeTheirLimit() {
        var keys = IdempotencyKeys(limit: 100)
        for n in 0..<150 { keys.remember(ExactID("k\(n)"), outcome(n), now: 0) }
        keys.renumber(from: IdempotencyKeys.numberLimit - 20)
        for n in 150..<300 { keys.remember(ExactID("k\(n)"), outcome(n), now: 0) }
        #expect(keys.entryNumberOfOldest! < 1000)
        #expect(keys.count == 100)
        for n in 200..<300 { #expect(keys.lookup(ExactID("k\(n)"), now: 0) == outcome(n)) }
        #expect(keys.lookup(ExactID("k199"), now: 0) == nil)
    }

    /// Random remembers, lookups and bound changes against a dictionary and a queue, with hashes
    /// from a small set so probes collide, tombstones pile up and shards rebuild, and time that
    /// sometimes jumps past the window.
    @Test func matchesAModel() {
        var generator = SortedIDsTests.Random(state: 7)
        var keys = IdempotencyKeys(limit: 700, windowSeconds: 1)
        var model: [String: IdempotencyKeys.Outcome] = [:]
        var order: [(key: String, at: UInt64)] = []
        var limit = 700
        let window: UInt64 = 1_000_000_000
        var now: UInt64 = 0
        var expired = 0
        func evictOldest() {
            model[order.removeFirst().key] = nil
        }
        for step in 0..<60_000 {
            now += generator.next() % 200 == 0 ? generator.next() % 1_500_000_000 : generator.next() % 100_000
            let n = Int(generator.next() % 3000)
            let key = IdempotencyKeys.Key(ExactID("key-\(n)"), hash: Int(truncatingIfNeeded: UInt64(n % 97) &* 0x9E37_79B9_7F4A_7C15))
            switch generator.next() % 10 {
            case 0..<5:
                keys.remember(key, outcome(step, failed: step % 7 == 0), now: now)
                if model[key.id.string] == nil && limit > 0 {
                    model[key.id.string] = outcome(step, failed: step % 7 == 0)
                    order.append((key.id.string, now))
                }
                while order.count > limit { evictOldest() }
            case 5..<9:
                while let first = order.first, now &- first.at > window {
                    evictOldest()
                    expired += 1
                }
                #expect(keys.lookup(key, now: now) == model[key.id.string], "step \(step)")
            default:
                limit = generator.next() % 4 == 0 ? Int(generator.next() % 20) : Int(generator.next() % 900)
                keys.setBounds(limit: limit, windowSeconds: 1, now: now)
                while order.count > limit { evictOldest() }
                while let first = order.first, now &- first.at > window { evictOldest() }
            }
            #expect(keys.count == order.count, "step \(step)")
            if keys.count != order.count { return }
        }
        #expect(expired > 100 && keys.evictions > 10_000 && keys.hits > 100, "expired \(expired), evictions \(keys.evictions), hits \(keys.hits)")
        var applied: [String] = []
        keys.forEachApplied { key, _ in applied.append(key.string) }
        #expect(applied == order.map(\.key).filter { !model[$0]!.failed })
    }
}
