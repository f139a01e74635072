import RPCSchema

/// The outcomes of keyed mutations, so a retry with the same key gets the first outcome again
/// instead of running twice. Part of the entity state: guarded by the dispatcher's lock, rebuilt
/// by journal replay (keyed records carry their key) and written into snapshots.
///
/// Bounded: at most `limit` keys and none older than `window`; the oldest go first.
///
/// Laid out for a table that only grows at its end and shrinks at its start, and is looked up
/// mostly for keys it does not hold (a first attempt):
/// - the entries, in arrival order, in fixed chunks (appended, dropped a chunk at a time); an
///   entry is plain data (no reference), so reading or dropping one touches no other memory;
/// - the keys' and replies' bytes, in arrival order, in byte chunks (no allocation per key);
/// - an index of 64 `SlotIndex` shards of 8-byte slots (an entry's number and 24 bits of its
///   key's hash), so a miss reads one cache line and never the key, and growing a shard reads
///   no entry.
/// After compaction takes a copy-on-write copy of the state, the next keyed mutation copies one
/// index shard, one entry chunk and one byte chunk, never the whole table.
public struct IdempotencyKeys: Sendable {
    /// What a key remembers.
    public struct Outcome: Sendable, Equatable {
        /// `digest(method:param:)` of the first request: the same key with another method or param is `keyReused`.
        public var digest: UInt64
        /// `digest` is a `legacyDigest` (read from a snapshot or feed written before `digest`).
        public var legacyDigest: Bool
        /// The first reply's param as JSON text: the result, or the `error.error` param when `failed`.
        public var reply: [UInt8]
        /// The first attempt failed (not journaled: an error had no effect, so after a restart the
        /// mutation simply runs again).
        public var failed: Bool
        /// The journal sequence number of the applied mutation (0: none); a retry is answered
        /// once it is durable, like the first attempt.
        public var seq: UInt64

        public init(digest: UInt64, legacyDigest: Bool = false, reply: [UInt8], failed: Bool = false, seq: UInt64) {
            self.digest = digest
            self.legacyDigest = legacyDigest
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
            Outcome(digest: digest, reply: failureReply(error), failed: true, seq: 0)
        }

        /// The `error.error` param of `error`, as remembered for a failed first attempt.
        static func failureReply(_ error: RPCError) -> [UInt8] {
            let param = JSONValue.object(JSONObject([("errorMessage", .string(error.errorMessage)), ("code", .string(error.code.rawValue))]))
            var bytes: [UInt8] = []
            JSONWriter.write(param, into: &bytes)
            return bytes
        }
    }

    /// A key with its hash computed once, before the state lock is taken: the shard, the slot and
    /// the tag come from it, and the key's bytes are compared only when a tag matches.
    public struct Key: Hashable, Sendable {
        public let id: ExactID
        let hash: Int

        public init(_ id: ExactID) {
            self.id = id
            hash = id.fingerprint  // already a seeded hash of the bytes
        }

        public init(_ string: String) { self.init(ExactID(string)) }

        /// The hash a key of these UTF-8 bytes has (`hash`).
        package static func hash(of bytes: UnsafeRawBufferPointer) -> Int { ExactID.fingerprint(of: bytes) }

        /// A key with a chosen hash (tests: collisions).
        init(_ id: ExactID, hash: Int) {
            self.id = id
            self.hash = hash
        }

        public static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.id == b.id }
        public func hash(into hasher: inout Hasher) { hasher.combine(hash) }
    }

    /// The shard a key's hash puts it in (its low bits; the rest pick its slot, `SlotIndex`).
    @inline(__always) private static func shard(_ hash: Int) -> Int { hash & (shardCount - 1) }

    /// One remembered key: 56 bytes of plain data, its key's and reply's bytes in `bytes`.
    struct Entry: Sendable {
        let hash: Int
        let digest: UInt64
        let seq: UInt64
        /// Uptime in nanoseconds when remembered (replay stamps the replay time).
        let at: UInt64
        /// The key's bytes then the reply's: the byte chunk's number, where they start in it, the
        /// key's length, the reply's.
        let chunk: UInt32
        let offset: UInt32
        let keyLength: UInt32
        let replyLength: UInt32
        let failed: Bool
        let legacyDigest: Bool
    }

    static var shardCount: Int { 64 }
    private static var entryChunkSize: Int { 4096 }
    private static var byteChunkSize: Int { 256 * 1024 }
    /// Entry numbers are renumbered from 0 before they reach this (never, in practice); below
    /// `SlotIndex.numberLimit`.
    static var numberLimit: UInt64 { (1 << 39) }

    /// The index: per shard, entry numbers by their keys' hashes.
    private var shards = [SlotIndex](repeating: SlotIndex(), count: IdempotencyKeys.shardCount)
    /// The entries in arrival order; `entries[0][head]` is the oldest, numbered `base + head`.
    private var entries: [[Entry]] = []
    private var head = 0
    private var base: UInt64 = 0
    /// The keys' and replies' bytes; `bytes[0]` is chunk number `bytesBase`, and the last chunk
    /// is filled up to `bytesUsed`.
    private var bytes: [ByteChunk] = []
    private var bytesBase: UInt32 = 0
    private var bytesUsed = 0
    /// The last entry chunk and byte chunk an eviction dropped, kept for the next one needed: a
    /// table at its limit drops one as it starts another, and a fresh one cost a page fault every
    /// 4 KiB of it (and the drop, an munmap). Reused only where no copy of the table shares them.
    private var spareEntries: [Entry] = []
    private var spareBytes: ByteChunk?

    /// Bytes written once, at the end, and never changed. Copies of the table share chunks; a
    /// table about to write into a last chunk it shares writes into a copy of it instead, so no
    /// chunk is written while another table can read it.
    private final class ByteChunk: @unchecked Sendable {
        // @unchecked: written only by a table that holds the sole reference (see `store`).
        let base: UnsafeMutableRawPointer
        let capacity: Int

        init(capacity: Int) {
            base = .allocate(byteCount: capacity, alignment: 8)
            self.capacity = capacity
        }

        deinit { base.deallocate() }
    }
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

    // MARK: - The interface

    /// The outcome remembered for `key`, counting a hit.
    public mutating func lookup(_ key: Key, now: UInt64) -> Outcome? {
        ExactUTF8.withBytes(key.id.string) { lookup(keyBytes: $0, hash: key.hash, now: now) }
    }

    /// `lookup` of a key given by its UTF-8 bytes and their hash (`Key.hash`, `Key.hash(of:)`):
    /// a keyed call reads its key where its journal body holds it, no string made.
    package mutating func lookup(keyBytes: UnsafeBufferPointer<UInt8>, hash: Int, now: UInt64) -> Outcome? {
        evictExpired(now: now)
        guard let number = find(hash: hash, bytes: keyBytes) else { return nil }
        hits += 1
        let entry = self.entry(number)
        return Outcome(
            digest: entry.digest, legacyDigest: entry.legacyDigest, reply: withReply(of: entry) { Array($0) }, failed: entry.failed,
            seq: entry.seq)
    }

    /// Remembers `outcome` for `key` (a new key: callers look up first; a key already held keeps
    /// its first outcome).
    public mutating func remember(_ key: Key, _ outcome: Outcome, now: UInt64) {
        ExactUTF8.withBytes(key.id.string) { remember(keyBytes: $0, hash: key.hash, outcome, now: now) }
    }

    /// Remembers a successful outcome whose reply is `reply` (copied into the table).
    public mutating func remember(_ key: Key, digest: UInt64, reply: ArraySlice<UInt8>, seq: UInt64, now: UInt64) {
        ExactUTF8.withBytes(key.id.string) { keyBytes in
            reply.withUnsafeBytes { reply in
                remember(hash: key.hash, keyBytes: keyBytes, digest: digest, legacyDigest: false, reply: reply, failed: false, seq: seq, now: now)
            }
        }
    }

    /// `remember` for a key that `lookup` has just missed, in the same hold of the state lock:
    /// it skips looking the key up again.
    public mutating func rememberMissed(_ key: Key, digest: UInt64, reply: ArraySlice<UInt8>, seq: UInt64, now: UInt64) {
        ExactUTF8.withBytes(key.id.string) { rememberMissed(keyBytes: $0, hash: key.hash, digest: digest, reply: reply, seq: seq, now: now) }
    }

    /// `rememberMissed` of a key given by its bytes and their hash (`lookup(keyBytes:hash:now:)`).
    package mutating func rememberMissed(
        keyBytes: UnsafeBufferPointer<UInt8>, hash: Int, digest: UInt64, reply: ArraySlice<UInt8>, seq: UInt64, now: UInt64
    ) {
        assert(find(hash: hash, bytes: keyBytes) == nil, "rememberMissed for a key the table holds")
        reply.withUnsafeBytes { reply in
            append(hash: hash, keyBytes: keyBytes, digest: digest, legacyDigest: false, reply: reply, failed: false, seq: seq, now: now)
        }
    }

    /// `remember` of a key given by its bytes and their hash (a failed keyed call's outcome).
    package mutating func remember(keyBytes: UnsafeBufferPointer<UInt8>, hash: Int, _ outcome: Outcome, now: UInt64) {
        outcome.reply.withUnsafeBytes { reply in
            remember(
                hash: hash, keyBytes: keyBytes, digest: outcome.digest, legacyDigest: outcome.legacyDigest, reply: reply,
                failed: outcome.failed, seq: outcome.seq, now: now)
        }
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
        while count > 0, now &- entries[0][head].at > window {
            evictOldest()
        }
    }

    /// Every remembered success, oldest first (for snapshots; failures are not kept across restarts).
    public func forEachApplied(_ body: (ExactID, Outcome) -> Void) {
        forEachApplied { key, digest, legacyDigest, seq, reply in
            body(ExactID(String(decoding: key, as: UTF8.self)), Outcome(digest: digest, legacyDigest: legacyDigest, reply: Array(reply), seq: seq))
        }
    }

    /// Every remembered success, oldest first, with its key's UTF-8 bytes and its reply's bytes in
    /// place (a snapshot writes a million of them: no String, no copy).
    public func forEachApplied(
        _ body: (_ key: UnsafeBufferPointer<UInt8>, _ digest: UInt64, _ legacyDigest: Bool, _ seq: UInt64, _ reply: UnsafeRawBufferPointer) throws -> Void
    ) rethrows {
        try Self.forEachLive(entries, head: head) { entry in
            guard !entry.failed else { return }
            try withBytes(of: entry, from: Int(entry.offset), count: Int(entry.keyLength) + Int(entry.replyLength)) { both in
                let key = UnsafeBufferPointer(rebasing: both[..<Int(entry.keyLength)])
                try body(key, entry.digest, entry.legacyDigest, entry.seq, UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: both[Int(entry.keyLength)...])))
            }
        }
    }

    /// Every live entry of `entries` (whose first live one is `entries[0][head]`), oldest first.
    private static func forEachLive(_ entries: [[Entry]], head: Int, _ body: (Entry) throws -> Void) rethrows {
        for (index, chunk) in entries.enumerated() {
            for entry in chunk[(index == 0 ? head : 0)...] { try body(entry) }
        }
    }

    // MARK: - Entries and bytes

    /// Adds the key of `keyBytes` unless the table holds it already (its first outcome stays).
    private mutating func remember(
        hash: Int, keyBytes: UnsafeBufferPointer<UInt8>, digest: UInt64, legacyDigest: Bool, reply: UnsafeRawBufferPointer,
        failed: Bool, seq: UInt64, now: UInt64
    ) {
        guard find(hash: hash, bytes: keyBytes) == nil else { return }
        append(hash: hash, keyBytes: keyBytes, digest: digest, legacyDigest: legacyDigest, reply: reply, failed: failed, seq: seq, now: now)
    }

    /// Adds the key of `keyBytes` (hashing to `hash`), which the table does not hold, as its newest entry.
    private mutating func append(
        hash: Int, keyBytes: UnsafeBufferPointer<UInt8>, digest: UInt64, legacyDigest: Bool, reply: UnsafeRawBufferPointer,
        failed: Bool, seq: UInt64, now: UInt64
    ) {
        guard limit > 0 else { return }
        if base &+ UInt64(head) &+ UInt64(count) >= Self.numberLimit { renumber() }
        // A key and a reply come from one request line under the frame limit (at most 64 MiB):
        // their lengths fit the entry's 32 bits.
        let (chunk, offset) = store(UnsafeRawBufferPointer(keyBytes), reply)
        let keyLength = UInt32(keyBytes.count)
        let entry = Entry(
            hash: hash, digest: digest, seq: seq, at: now, chunk: chunk, offset: offset, keyLength: keyLength,
            replyLength: UInt32(reply.count), failed: failed, legacyDigest: legacyDigest)
        if entries.isEmpty || entries[entries.count - 1].count == Self.entryChunkSize {
            var chunk: [Entry] = []
            swap(&chunk, &spareEntries)  // empty, with its capacity (a copy, where a copy of the table shares it)
            chunk.reserveCapacity(Self.entryChunkSize)
            entries.append(chunk)
        }
        entries[entries.count - 1].append(entry)
        let number = base &+ UInt64(head) &+ UInt64(count)
        count += 1
        insert(hash: hash, number: number)
        while count > limit { evictOldest() }
    }

    /// Entry `number` (live).
    @inline(__always)
    private func entry(_ number: UInt64) -> Entry { Self.entry(number, in: entries, base: base) }

    private static func entry(_ number: UInt64, in entries: [[Entry]], base: UInt64) -> Entry {
        let position = Int(number &- base)
        return entries[position / entryChunkSize][position % entryChunkSize]
    }

    /// Calls `body` with the bytes of `entry`'s key.
    @inline(__always)
    private func withKey<R>(of entry: Entry, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withBytes(of: entry, from: Int(entry.offset), count: Int(entry.keyLength), body)
    }

    /// Calls `body` with the bytes of `entry`'s reply.
    private func withReply<R>(of entry: Entry, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withBytes(of: entry, from: Int(entry.offset) + Int(entry.keyLength), count: Int(entry.replyLength), body)
    }

    @inline(__always)
    private func withBytes<R>(
        of entry: Entry, from start: Int, count: Int, _ body: (UnsafeBufferPointer<UInt8>) throws -> R
    ) rethrows -> R {
        let chunk = bytes[Int(entry.chunk &- bytesBase)]
        precondition(start >= 0 && count >= 0 && start <= chunk.capacity - count, "an idempotency entry points outside its chunk")
        return try withExtendedLifetime(chunk) {
            try body(UnsafeBufferPointer(start: (chunk.base + start).assumingMemoryBound(to: UInt8.self), count: count))
        }
    }

    /// Appends `key` then `reply` to the last byte chunk (a new one when they do not fit: their
    /// own size when larger than a chunk); returns the chunk's number and where the key starts.
    private mutating func store(_ key: UnsafeRawBufferPointer, _ reply: UnsafeRawBufferPointer) -> (chunk: UInt32, offset: UInt32) {
        let size = key.count + reply.count
        if bytes.isEmpty || bytes[bytes.count - 1].capacity - bytesUsed < size {
            bytes.append(takeSpareBytes(atLeast: size) ?? ByteChunk(capacity: max(Self.byteChunkSize, size)))
            bytesUsed = 0
        } else if !isKnownUniquelyReferenced(&bytes[bytes.count - 1]) {
            // A copy of the table (compaction's) shares this chunk: write into a copy of it.
            let shared = bytes[bytes.count - 1]
            let copy = ByteChunk(capacity: shared.capacity)
            copy.base.copyMemory(from: shared.base, byteCount: bytesUsed)
            bytes[bytes.count - 1] = copy
        }
        let chunk = bytes[bytes.count - 1]
        let offset = bytesUsed
        if let source = key.baseAddress { (chunk.base + offset).copyMemory(from: source, byteCount: key.count) }
        if let source = reply.baseAddress { (chunk.base + offset + key.count).copyMemory(from: source, byteCount: reply.count) }
        bytesUsed += size
        return (bytesBase &+ UInt32(truncatingIfNeeded: bytes.count - 1), UInt32(offset))
    }

    /// A chunk an eviction dropped, when it is big enough and no copy of the table reads it.
    private mutating func takeSpareBytes(atLeast size: Int) -> ByteChunk? {
        guard var spare = spareBytes, spare.capacity >= size else { return nil }
        spareBytes = nil
        return isKnownUniquelyReferenced(&spare) ? spare : nil
    }

    private mutating func evictOldest() {
        guard count > 0 else { return }
        remove(hash: entries[0][head].hash, number: base &+ UInt64(head))
        count -= 1
        evictions += 1
        head += 1
        if head == Self.entryChunkSize || count == 0 {
            var dropped = entries.removeFirst()
            dropped.removeAll(keepingCapacity: true)
            spareEntries = dropped
            base &+= UInt64(head)
            head = 0
        }
        if count == 0 {
            bytes.removeAll()
            bytesBase = 0
            bytesUsed = 0
            return
        }
        if count > Self.evictionLookahead { prefetchSlot(of: base &+ UInt64(head + Self.evictionLookahead)) }
        // Byte chunks before the oldest live entry's hold only forgotten replies.
        let needed = entries[0][head].chunk
        while bytesBase != needed && bytes.count > 1 {
            let dropped = bytes.removeFirst()
            if dropped.capacity == Self.byteChunkSize { spareBytes = dropped }
            bytesBase &+= 1
        }
    }

    /// How far ahead of the oldest entry an eviction asks for the index slot it will clear: keys
    /// leave in arrival order, and each one's slot is a cache miss (~100 ns a keyed mutation once
    /// the table is full) unless asked for early.
    private static var evictionLookahead: Int { 16 }

    /// Asks the CPU for the index slot of entry `number` (live).
    @inline(__always) private func prefetchSlot(of number: UInt64) { prefetch(hash: entry(number).hash) }

    /// Numbers the live entries from `first` on (from 0 once numbers near `numberLimit`; tests
    /// start near it) and rebuilds the index.
    mutating func renumber(from first: UInt64 = 0) {
        base = first &- UInt64(head)
        for index in shards.indices { shards[index] = SlotIndex() }
        var number = first
        Self.forEachLive(entries, head: head) { entry in
            insert(hash: entry.hash, number: number)
            number += 1
        }
    }

    var entryNumberOfOldest: UInt64? { count > 0 ? base &+ UInt64(head) : nil }

    // MARK: - The index

    /// Asks the CPU for the index slot where a lookup of `key` starts (a batch prefetches every
    /// key before looking any up, so their cache misses overlap).
    public func prefetch(_ key: Key) { prefetch(hash: key.hash) }

    /// `prefetch` by the key's hash alone (`Key.hash`).
    func prefetch(hash: Int) { shards[Self.shard(hash)].prefetch(hash: hash) }

    /// The number of the entry holding the key of `bytes`, whose hash is `hash`.
    private func find(hash: Int, bytes: UnsafeBufferPointer<UInt8>) -> UInt64? {
        shards[Self.shard(hash)].find(hash: hash) { holds(hash: hash, bytes: bytes, at: UInt64($0)) }.map { UInt64($0) }
    }

    /// Whether entry `number` (live) holds the key of `bytes`.
    private func holds(hash: Int, bytes: UnsafeBufferPointer<UInt8>, at number: UInt64) -> Bool {
        let entry = self.entry(number)
        guard entry.hash == hash, Int(entry.keyLength) == bytes.count else { return false }
        return withKey(of: entry) { held in held.elementsEqual(bytes) }
    }

    private mutating func insert(hash: Int, number: UInt64) {
        let shard = Self.shard(hash)
        if shards[shard].isFull {
            // A shard past 2^24 slots grows by the entries' hashes (never, in practice). Built
            // only here: capturing the entries retains them.
            let (entries, base) = (self.entries, self.base)
            shards[shard].makeRoom { Self.entry(UInt64($0), in: entries, base: base).hash }
        }
        shards[shard].insert(hash: hash, number: Int(number))
    }

    private mutating func remove(hash: Int, number: UInt64) {
        shards[Self.shard(hash)].remove(hash: hash, number: Int(number))
    }

    /// What makes a retry the same request: a 64-bit hash of the canonical encoding of method and
    /// param (`JournalRecord.appendMethodAndParam`, the bytes a journal line holds for them: keys in
    /// order, strings escaped one way, number texts exact, so equal encodings are equal requests).
    /// Snapshots and the change feed store it (`digestText`), so its value never changes.
    public static func digest(method: RPCMethod, param: JSONValue?) -> UInt64 {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(160)
        JournalRecord.appendMethodAndParam(method: method, param: param, into: &bytes)
        return bytes.withUnsafeBytes { digest(canonical: $0) }
    }

    /// `digest` over bytes already encoded by `JournalRecord.appendMethodAndParam` (a keyed
    /// request's journal record has them: no second encoding). Eight bytes a step, little-endian
    /// words, a multiply-rotate mix and a final avalanche; about 8 instructions per 8 bytes, where
    /// the byte-at-a-time FNV-1a walk it replaced (`legacyDigest`) cost ~1,000 per create.
    public static func digest(canonical bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0x9E37_79B9_7F4A_7C15 ^ UInt64(truncatingIfNeeded: bytes.count)
        var at = 0
        while bytes.count - at >= 8 {
            hash = mix(hash, UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self)))
            at += 8
        }
        if at < bytes.count {
            var tail: UInt64 = 0  // the last 1 to 7 bytes, zero-padded, in memory order
            withUnsafeMutableBytes(of: &tail) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[at...])) }
            hash = mix(hash, UInt64(littleEndian: tail))
        }
        hash ^= hash >> 33
        hash = hash &* 0xFF51_AFD7_ED55_8CCD
        hash ^= hash >> 33
        hash = hash &* 0xC4CE_B9FE_1A85_EC53
        return hash ^ hash >> 33
    }

    @inline(__always) private static func mix(_ hash: UInt64, _ word: UInt64) -> UInt64 {
        let mixed = hash ^ (word &* 0xBF58_476D_1CE4_E5B9)
        return (mixed << 27 | mixed >> 37) &* 0x94D0_49BB_1331_11EB
    }

    /// The digest snapshots and change feeds held before `digest` (they wrote it as bare hex):
    /// FNV-1a over the method and the param's structure (kinds, keys in order, exact UTF-8 bytes of
    /// strings and number texts). An outcome read with one is checked with this, so a retry of a
    /// mutation remembered before an upgrade still finds it.
    public static func legacyDigest(method: RPCMethod, param: JSONValue?) -> UInt64 {
        var hash = Digest()
        hash.add(method.entity)
        hash.add(byte: 0)
        hash.add(method.name)
        if let param { hash.add(param) }
        return hash.value
    }

    /// A remembered digest as snapshots and the change feed write it: `v2:` and hex for `digest`,
    /// bare hex (as written before it) for `legacyDigest`.
    public static func digestText(_ digest: UInt64, legacy: Bool) -> String {
        (legacy ? "" : digestTextPrefix.description) + String(digest, radix: 16)
    }

    /// `digestText` read back: the value and whether it is a `legacyDigest`; nil when it is neither form.
    public static func digest(text: String) -> (value: UInt64, legacy: Bool)? {
        let legacy = !text.hasPrefix(digestTextPrefix.description)
        let hex = legacy ? Substring(text) : text.dropFirst(digestTextPrefix.utf8CodeUnitCount)
        guard !hex.isEmpty, hex.count <= 16, hex.utf8.allSatisfy({ isHexDigit($0) }), let value = UInt64(hex, radix: 16) else { return nil }
        return (value, legacy)
    }

    /// What `digestText` puts before a `digest` (the snapshot writer appends it as bytes).
    static let digestTextPrefix: StaticString = "v2:"

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
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
