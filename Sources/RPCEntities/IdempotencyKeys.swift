import RPCSchema

/// The outcomes of keyed mutations, so a retry with the same key gets the first outcome again
/// instead of running twice. Part of the entity state: guarded by the dispatcher's lock, rebuilt
/// by journal replay (keyed records carry their key) and written into snapshots.
///
/// Bounded: at most `limit` keys and none older than `window`; the oldest go first. Kept in 64
/// shards, and the arrival order in chunks, so that after compaction takes a copy-on-write copy of
/// the state, the next keyed mutation copies one shard and one chunk, not the whole table.
public struct IdempotencyKeys: Sendable {
    /// What a key remembers: 40 bytes, besides the reply's bytes.
    public struct Outcome: Sendable, Equatable {
        /// `digest(method:param:)` of the first request: the same key with another method or param is `keyReused`.
        public var digest: UInt64
        /// The first reply's param as JSON text: the result, or the `error.error` param when `failed`.
        public var reply: [UInt8]
        /// The first attempt failed (not journaled: an error had no effect, so after a restart the
        /// mutation simply runs again).
        public var failed: Bool
        /// The journal sequence number of the applied mutation (0: none); a retry is answered
        /// once it is durable, like the first attempt.
        public var seq: UInt64
        /// Uptime in nanoseconds when remembered (replay stamps the replay time).
        var at: UInt64 = 0

        public init(digest: UInt64, reply: [UInt8], failed: Bool = false, seq: UInt64) {
            self.digest = digest
            self.reply = reply
            self.failed = failed
            self.seq = seq
        }

        /// The remembered error of a failed first attempt.
        public var error: RPCError? {
            guard failed, case .object(let object)? = try? JSONParser.parse(reply),
                case .string(let message)? = object["errorMessage"], case .string(let code)? = object["code"]
            else { return failed ? .internal("the first attempt failed") : nil }
            return RPCError(RPCErrorCode(code), message)
        }

        /// An outcome for a failed first attempt.
        public static func failure(_ error: RPCError, digest: UInt64) -> Outcome {
            let param = JSONValue.object(JSONObject([("errorMessage", .string(error.errorMessage)), ("code", .string(error.code.rawValue))]))
            var bytes: [UInt8] = []
            JSONWriter.write(param, into: &bytes)
            return Outcome(digest: digest, reply: bytes, failed: true, seq: 0)
        }
    }

    /// A key with its hash computed once, before the state lock is taken: the shard, the lookup
    /// and the insert then hash one word instead of the key's bytes three times.
    public struct Key: Hashable, Sendable {
        public let id: ExactID
        let hash: Int

        public init(_ id: ExactID) {
            self.id = id
            hash = id.hashValue
        }

        public init(_ string: String) { self.init(ExactID(string)) }

        public static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.id == b.id }
        public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    private static var shardCount: Int { 64 }
    private static var chunkSize: Int { 4096 }
    private var shards = [[Key: Outcome]](repeating: [:], count: IdempotencyKeys.shardCount)
    /// Keys in the order they were remembered, with when, in chunks; `head` is the oldest's index in
    /// the first. The time is here too, so checking the oldest's age costs no hash lookup.
    private var order: [[(key: Key, at: UInt64)]] = []
    private var head = 0
    public private(set) var count = 0
    /// Retries answered from the table, and keys forgotten by age or count.
    public private(set) var hits = 0
    public private(set) var evictions = 0

    /// At most this many keys (0: keys are not remembered).
    public var limit: Int
    /// Nanoseconds a key is kept.
    public var window: UInt64

    public init(limit: Int = 1_000_000, windowSeconds: Double = 86_400) {
        self.limit = max(0, limit)
        self.window = Self.nanoseconds(windowSeconds)
    }

    /// Seconds as nanoseconds, clamped to 0...UInt64.max / 2 (a NaN or huge window is "very long").
    private static func nanoseconds(_ seconds: Double) -> UInt64 {
        seconds * 1e9 < Double(UInt64.max / 2) ? UInt64(max(0, seconds) * 1e9) : UInt64.max / 2
    }

    @inline(__always)
    private static func shard(_ key: Key) -> Int { key.hash & (shardCount - 1) }

    /// The outcome remembered for `key`, counting a hit.
    public mutating func lookup(_ key: Key, now: UInt64) -> Outcome? {
        evictExpired(now: now)
        guard let outcome = shards[Self.shard(key)][key] else { return nil }
        hits += 1
        return outcome
    }

    /// Remembers `outcome` for `key` (a new key: callers look up first).
    public mutating func remember(_ key: Key, _ outcome: Outcome, now: UInt64) {
        guard limit > 0 else { return }
        var outcome = outcome
        outcome.at = now
        if shards[Self.shard(key)].updateValue(outcome, forKey: key) == nil {
            count += 1
            if order.isEmpty || order[order.count - 1].count == Self.chunkSize {
                order.append([])
                order[order.count - 1].reserveCapacity(Self.chunkSize)
            }
            order[order.count - 1].append((key, now))
        }
        while count > limit { evictOldest() }
    }

    public mutating func lookup(_ key: ExactID, now: UInt64) -> Outcome? { lookup(Key(key), now: now) }
    public mutating func remember(_ key: ExactID, _ outcome: Outcome, now: UInt64) { remember(Key(key), outcome, now: now) }

    /// Sets the bounds (from the config) and forgets what is past them now.
    public mutating func setBounds(limit: Int, windowSeconds: Double, now: UInt64) {
        self.limit = max(0, limit)
        window = Self.nanoseconds(windowSeconds)
        while count > self.limit { evictOldest() }
        evictExpired(now: now)
    }

    /// Forgets keys older than the window.
    public mutating func evictExpired(now: UInt64) {
        while let oldest = oldestEntry, now &- oldest.at > window {
            evictOldest()
        }
    }

    private var oldestEntry: (key: Key, at: UInt64)? { order.first.flatMap { head < $0.count ? $0[head] : nil } }
    private var oldestKey: Key? { oldestEntry?.key }

    private mutating func evictOldest() {
        guard let oldest = oldestKey else { return }
        if shards[Self.shard(oldest)].removeValue(forKey: oldest) != nil {
            count -= 1
            evictions += 1
        }
        head += 1
        if head == order[0].count {
            order.removeFirst()
            head = 0
        }
    }

    /// Every remembered success, oldest first (for snapshots; failures are not kept across restarts).
    public func forEachApplied(_ body: (ExactID, Outcome) -> Void) {
        for (index, chunk) in order.enumerated() {
            for (key, _) in chunk[(index == 0 ? head : 0)...] {
                if let outcome = shards[Self.shard(key)][key], !outcome.failed { body(key.id, outcome) }
            }
        }
    }

    /// FNV-1a over the method and the param's structure (kinds, keys in order, exact UTF-8 bytes of
    /// strings and number texts): what makes a retry the same request. Walks the parsed value, so it
    /// costs no encoding or allocation.
    public static func digest(method: RPCMethod, param: JSONValue?) -> UInt64 {
        var hash = Digest()
        hash.add(method.entity)
        hash.add(byte: 0)
        hash.add(method.name)
        if let param { hash.add(param) }
        return hash.value
    }

    private struct Digest {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325

        @inline(__always)
        mutating func add(byte: UInt8) {
            value ^= UInt64(byte)
            value = value &* 0x0000_0100_0000_01b3
        }

        mutating func add(_ text: String) {
            // Over the contiguous bytes: iterating `utf8` cost about 40 instructions a byte.
            let done: Void? = text.utf8.withContiguousStorageIfAvailable { bytes in
                for byte in bytes { add(byte: byte) }
            }
            if done == nil {
                for byte in text.utf8 { add(byte: byte) }
            }
            add(byte: 0xFF)  // never in UTF-8: ends the string unambiguously
        }

        mutating func add(_ value: JSONValue) {
            switch value {
            case .null: add(byte: 1)
            case .bool(let flag): add(byte: flag ? 2 : 3)
            case .number(let text):
                add(byte: 4)
                add(text)
            case .string(let text):
                add(byte: 5)
                add(text)
            case .array(let items):
                add(byte: 6)
                for item in items { add(item) }
                add(byte: 7)
            case .object(let object):
                add(byte: 8)
                for pair in object.pairs {
                    add(pair.key)
                    add(pair.value)
                }
                add(byte: 9)
            }
        }
    }
}
