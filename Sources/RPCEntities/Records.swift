import RPCSchema

/// Records of one kind by id, listable in id order. Ids are `ExactID`s: two ids are the same
/// record only when their UTF-8 bytes are, and lists are in byte order.
///
/// Kept in 64 shards (by the id's hash), each in a box of its own, so that a copy of the state (the
/// snapshot compaction writes while the daemon serves) costs nothing to take and nothing to
/// keep: while the copy still reads a shard, changes to that shard go to a small overlay beside
/// it (the changed records, and removals), which reads consult first; once the copy has written
/// the shard out and let go of it, the next change folds the overlay into the shard in place.
/// Copy-on-write of plain dictionaries made the first turn after a compaction began copy every
/// shard (every record, a retain per string) on an event loop: tens of milliseconds at a million
/// records, the slowest requests of a durable load.
///
/// The id order is kept as it changes (`SortedIDs`, copy-on-write per node), so a list never sorts.
public struct Records<Record: StoredRecord>: Sendable {
    /// One shard's records. A box rather than bare arrays so a change can tell (by the box's
    /// reference count) whether a copy of the state still reads it.
    ///
    /// The records sit as bytes in one arena, in the order they came; an array says where each
    /// starts, and a `SlotIndex` finds an id's position. A create appends to the arena and writes
    /// one slot, a cache line the lock's holder asked for ahead (`prefetch`); a record costs its
    /// text, a length byte per field, its start and its slots, where a value of strings cost a
    /// heap object per long field and its id twice; and a snapshot reads the arena in order.
    private final class Shard: @unchecked Sendable {
        // @unchecked: these change only while the box is uniquely referenced (the owner's
        // `ownsShard`), the discipline Array's storage follows; shared boxes are only read.
        // Unchecked exclusivity: no access to them overlaps another (none is held across a call
        // that could reach the box again), and the run-time check cost every read of a record
        // ~180 instructions (callgrind, a get).
        /// The records, one after another: the id's length (LEB128) and bytes, then the length
        /// of the fields and the fields (`StoredRecord`). A replaced or removed record's bytes
        /// stay until `garbage` is half the arena, then the live ones are packed together.
        @exclusivity(unchecked) var arena: [UInt8] = []
        /// Where each record starts in the arena, in the order they came (a removal moves the last
        /// one into the gap).
        @exclusivity(unchecked) var starts: ContiguousArray<Int> = []
        @exclusivity(unchecked) var index = SlotIndex()
        /// Arena bytes no record uses.
        @exclusivity(unchecked) var garbage = 0

        init() {}

        /// A box of its own with `shard`'s records.
        init(copying shard: Shard) {
            arena = shard.arena
            starts = shard.starts
            index = shard.index
            garbage = shard.garbage
        }

        var count: Int { starts.count }

        /// The position of `key`'s record.
        @inline(__always)
        func position(of key: ExactID) -> Int? {
            ExactUTF8.withBytes(key.string) { wanted in
                arena.withUnsafeBufferPointer { arena in
                    index.find(hash: key.fingerprint) { number in
                        var reader = RecordReader(bytes: arena, position: starts[number])
                        let id = reader.readBytes()
                        return id.count == wanted.count && ExactUTF8.compare(id, wanted) == 0
                    }
                }
            }
        }

        /// The record at `position`, read back with `id` as its id (the caller's, byte-equal).
        @inline(__always)
        func record(at position: Int, id: String) -> Record {
            arena.withUnsafeBufferPointer { arena in
                var reader = RecordReader(bytes: arena, position: starts[position])
                _ = reader.readBytes()
                _ = reader.readCount()
                return Record(id: id, from: &reader)
            }
        }

        @inline(__always)
        func record(_ key: ExactID) -> Record? { position(of: key).map { record(at: $0, id: key.string) } }

        /// The id, and the record, at `position` (a walk over every record, with no key at hand).
        func entry(at position: Int) -> (id: String, record: Record) {
            arena.withUnsafeBufferPointer { arena in
                var reader = RecordReader(bytes: arena, position: starts[position])
                let id = reader.readString()
                _ = reader.readCount()
                return (id, Record(id: id, from: &reader))
            }
        }

        /// The bytes the record at `position` takes, and its id's fingerprint.
        private func extent(at position: Int) -> (bytes: Int, hash: Int) {
            arena.withUnsafeBufferPointer { arena in
                let start = starts[position]
                var reader = RecordReader(bytes: arena, position: start)
                let hash = ExactID.fingerprint(of: UnsafeRawBufferPointer(reader.readBytes()))
                let fields = reader.readCount()
                return (reader.position + fields - start, hash)
            }
        }

        /// Writes `record` as `key`'s at the arena's end; returns where it starts.
        private func write(_ record: Record, for key: ExactID) -> Int { write(for: key) { record.store(into: &$0) } }

        /// Writes `key`'s record, its fields written by `store`, at the arena's end; returns where it starts.
        private func write(for key: ExactID, _ store: (inout RecordWriter) -> Void) -> Int {
            var writer = RecordWriter(bytes: [])
            swap(&writer.bytes, &arena)
            defer { swap(&writer.bytes, &arena) }
            let start = writer.bytes.count
            writer.write(key.string)
            let lengthAt = writer.bytes.count
            writer.bytes.append(0)
            store(&writer)
            let fields = writer.bytes.count - lengthAt - 1
            if fields < 0x80 {
                writer.bytes[lengthAt] = UInt8(fields)
            } else {
                // A long record: the length takes more than the one byte kept for it.
                var length = RecordWriter(bytes: [])
                length.write(fields)
                writer.bytes.replaceSubrange(lengthAt..<(lengthAt + 1), with: length.bytes)
            }
            return start
        }

        /// Adds `record` as `key`'s, which the shard does not hold.
        @inline(__always)
        func append(_ record: Record, for key: ExactID) { append(for: key) { record.store(into: &$0) } }

        /// `append`, the record's fields written by `store`.
        @inline(__always)
        func append(for key: ExactID, _ store: (inout RecordWriter) -> Void) {
            index.insert(hash: key.fingerprint, number: starts.count) { self.extent(at: $0).hash }
            starts.append(write(for: key, store))
        }

        /// Sets `key`'s record: whether the key is new.
        func set(_ record: Record, for key: ExactID) -> Bool {
            if let position = position(of: key) {
                garbage += extent(at: position).bytes
                starts[position] = write(record, for: key)
                packIfHalfGarbage()
                return false
            }
            append(record, for: key)
            return true
        }

        func remove(_ key: ExactID) -> Record? {
            guard let position = position(of: key) else { return nil }
            let removed = record(at: position, id: key.string)
            garbage += extent(at: position).bytes
            index.remove(hash: key.fingerprint, number: position)
            let last = starts.count - 1
            if position != last {
                let moved = extent(at: last).hash
                starts.swapAt(position, last)
                index.renumber(hash: moved, from: last, to: position)
            }
            starts.removeLast()
            packIfHalfGarbage()
            return removed
        }

        /// Once unused bytes are half the arena, copies the records into one of their own size.
        private func packIfHalfGarbage() {
            guard garbage > 4096, garbage * 2 > arena.count else { return }
            var packed: [UInt8] = []
            packed.reserveCapacity(arena.count - garbage)
            arena.withUnsafeBufferPointer { arena in
                for position in starts.indices {
                    let start = starts[position]
                    let bytes = extent(at: position).bytes
                    starts[position] = packed.count
                    packed.append(contentsOf: UnsafeBufferPointer(rebasing: arena[start..<(start + bytes)]))
                }
            }
            arena = packed
            garbage = 0
        }

        /// Rewrites every record through `body` (the ones it changes, where it returns true).
        func update(_ body: (inout Record) -> Bool) {
            for position in starts.indices {
                var (id, record) = entry(at: position)
                guard body(&record) else { continue }
                garbage += extent(at: position).bytes
                starts[position] = write(record, for: ExactID(id))
            }
            packIfHalfGarbage()
        }

        func reserveCapacity(adding count: Int, bytes: Int) {
            starts.reserveCapacity(starts.count + count)
            arena.reserveCapacity(arena.count + bytes)
            index.reserveCapacity(starts.count + count) { self.extent(at: $0).hash }
        }
    }

    private static var shardCount: Int { 64 }
    /// A box each (never one box repeated: a shared box is never changed in place).
    private var shards: [Shard] = (0..<Records.shardCount).map { _ in Shard() }
    /// Per shard, what changed while its box was shared: a record, or nil where one was
    /// removed. Read before the shard; folded into it by the first change once the box is this
    /// value's alone.
    private var overlays = [[ExactID: Record?]](repeating: [:], count: Records.shardCount)
    private var order = SortedIDs()
    /// While the order is deferred (`deferOrder`), new ids wait here, unsorted, instead of `order`.
    private var unordered: [ExactID] = []
    private var defersOrder = false

    public init() {}

    public var count: Int { order.count + unordered.count }

    /// Ids inserted while the order is deferred and not yet in it (tests).
    var idsAwaitingOrder: Int { unordered.count }

    @inline(__always)
    /// From the id's own seeded hash. Each shard's dictionary hashes with a seed of its own
    /// storage's, so ids that share these bits still spread over its buckets.
    private static func shard(_ id: ExactID) -> Int { id.fingerprint & (shardCount - 1) }

    /// Changes waiting in overlays: zero once no copy reads a shard and each was changed since
    /// (`system.stats` reports it; a copy that never lets go shows as a count that only grows).
    public var overlaid: Int { overlays.reduce(0) { $0 + $1.count } }

    @inline(__always)
    private func lookup(_ key: ExactID, in shard: Int) -> Record? {
        if !overlays[shard].isEmpty, let changed = overlays[shard][key] { return changed }
        // The box borrowed, not retained: `shards` holds it, and nothing changes it during a lookup.
        return Unmanaged.passUnretained(shards[shard])._withUnsafeGuaranteedRef { $0.record(key) }
    }

    /// True when shard `s` may change in place (no copy reads it), its overlay folded in first;
    /// false while a copy still reads it, and changes go to the overlay.
    @inline(__always)
    private mutating func ownsShard(_ s: Int) -> Bool {
        guard isKnownUniquelyReferenced(&shards[s]) else { return false }
        if !overlays[s].isEmpty { fold(s) }
        return true
    }

    private mutating func fold(_ s: Int) {
        let changes = overlays[s]
        overlays[s] = [:]
        let shard = shards[s]
        for (key, record) in changes {
            if let record { _ = shard.set(record, for: key) } else { _ = shard.remove(key) }
        }
    }

    /// Asks the CPU for the slot where an id with this hash (`ExactID.fingerprint`) is looked up
    /// (see `SlotIndex.prefetch`).
    @inline(__always)
    func prefetch(hash: Int) {
        Unmanaged.passUnretained(shards[hash & (Self.shardCount - 1)])._withUnsafeGuaranteedRef { $0.index.prefetch(hash: hash) }
    }

    public subscript(id: String) -> Record? { self[ExactID(id)] }

    /// The record of an id hashed already (a call's `Touch`).
    public subscript(key: ExactID) -> Record? { lookup(key, in: Self.shard(key)) }

    public func contains(_ id: String) -> Bool { self[id] != nil }

    public mutating func insert(_ record: Record, id: String) { insert(record, key: ExactID(id)) }

    public mutating func insert(_ record: Record, key: ExactID) {
        let s = Self.shard(key)
        let added: Bool
        if ownsShard(s) {
            added = shards[s].set(record, for: key)
        } else {
            added = lookup(key, in: s) == nil
            overlays[s][key] = .some(record)
        }
        if added { addToOrder(key) }
    }

    /// Inserts `record` unless `id` is taken (then nothing changes): false if it was. One hash
    /// lookup where `contains` then `insert` take two (a create on a hot path, and in replay).
    public mutating func insertNew(_ record: Record, id: String) -> Bool { insertNew(record, key: ExactID(id)) }

    public mutating func insertNew(_ record: Record, key: ExactID) -> Bool {
        insertNew(key: key, storing: { record.store(into: &$0) }, or: { record })
    }

    /// `insertNew`, the record's fields written by `store` as `Record.store` would write them
    /// (a replayed create's field bytes, stored as they are); `record` makes the value instead
    /// while a copy still reads the shard.
    @inline(__always)
    public mutating func insertNew(key: ExactID, storing store: (inout RecordWriter) -> Void, or record: () -> Record) -> Bool {
        let s = Self.shard(key)
        if ownsShard(s) {
            let shard = shards[s]
            guard shard.position(of: key) == nil else { return false }
            shard.append(for: key, store)
        } else {
            guard lookup(key, in: s) == nil else { return false }
            overlays[s][key] = .some(record())
        }
        addToOrder(key)
        return true
    }

    private mutating func addToOrder(_ key: ExactID) {
        if defersOrder { unordered.append(key) } else { order.insert(key) }
    }

    @discardableResult
    public mutating func remove(_ id: String) -> Record? { remove(key: ExactID(id)) }

    @discardableResult
    public mutating func remove(key: ExactID) -> Record? {
        let s = Self.shard(key)
        let removed: Record?
        if ownsShard(s) {
            removed = shards[s].remove(key)
        } else {
            removed = lookup(key, in: s)
            // `.some(nil)`: a removal. Assigning plain nil would drop the overlay's entry instead.
            if removed != nil { overlays[s][key] = .some(nil) }
        }
        if removed != nil {
            orderWaitingIDs()
            order.remove(key)
        }
        return removed
    }

    /// Room for `count` more records (a replay that knows how many are coming): the shards do
    /// not grow, rehashing every id, on the way. Each shard gets its share, and arena room for
    /// its records' average size so far.
    public mutating func reserveCapacity(adding count: Int) {
        guard count > 0 else { return }
        for s in shards.indices where ownsShard(s) {
            let shard = shards[s]
            let share = count / Self.shardCount
            let average = shard.count > 0 ? (shard.arena.count - shard.garbage) / shard.count : 0
            shard.reserveCapacity(adding: share, bytes: share.multipliedReportingOverflow(by: average).overflow ? 0 : share * average)
        }
    }

    /// Until `restoreOrder`, new ids are not put in order one by one but all at once, with one sort
    /// (journal replay: a tree insert per record was a third of a restart). Lists stay right
    /// meanwhile, only slower; a removal puts the waiting ids in order first.
    public mutating func deferOrder() { defersOrder = true }

    /// Puts the ids inserted since `deferOrder` in order, and inserts keep the order again.
    public mutating func restoreOrder() {
        orderWaitingIDs()
        defersOrder = false
    }

    private mutating func orderWaitingIDs() {
        guard !unordered.isEmpty else { return }
        let waiting = unordered
        unordered = []
        order.insert(contentsOf: consume waiting)
    }

    /// Rewrites the records `body` changes (it returns true for those). A shard a copy still
    /// reads is copied first (with its overlay), as a plain dictionary would be: this is rare (a
    /// user's removal updates buildings).
    public mutating func updateAll(_ body: (inout Record) -> Bool) {
        for s in shards.indices {
            if !ownsShard(s) {
                shards[s] = Shard(copying: shards[s])  // a box of this value's own, then its overlay in it
                fold(s)
            }
            shards[s].update(body)
        }
    }

    /// Calls `body` with the records of shard `s`, in no particular order.
    private func forEach(inShard s: Int, _ body: (Record) throws -> Void) rethrows {
        let overlay = overlays[s]
        let shard = shards[s]
        guard !overlay.isEmpty else {
            for position in 0..<shard.count { try body(shard.entry(at: position).record) }
            return
        }
        for position in 0..<shard.count {
            let (id, record) = shard.entry(at: position)
            if overlay[ExactID(id)] == nil { try body(record) }
        }
        for case let record? in overlay.values { try body(record) }
    }

    /// Every record, in no particular order.
    public var values: some Sequence<Record> {
        shards.indices.lazy.flatMap { s in
            var records: [Record] = []
            self.forEach(inShard: s) { records.append($0) }
            return records
        }
    }

    /// Calls `body` with every record, shard by shard, letting go of each shard once it is read,
    /// so that the value this copy was taken from may change that shard in place again (the
    /// snapshot a compaction writes). This value holds no records afterwards.
    mutating func drain(_ body: (Record) throws -> Void) rethrows {
        try drainStored({ id, fields in try body(Record(id: String(decoding: id, as: UTF8.self), from: &fields)) }, value: body)
    }

    /// `drain`, with each record the shard holds as its bytes (`stored`: the id's, and a reader
    /// at its fields), read in place, no value built; a record changed while this copy was taken
    /// comes as its value (`value`). A snapshot writes the bytes out as they are.
    mutating func drainStored(
        _ stored: (UnsafeBufferPointer<UInt8>, inout RecordReader) throws -> Void, value: (Record) throws -> Void
    ) rethrows {
        for s in shards.indices {
            let overlay = overlays[s]
            let shard = shards[s]
            try shard.arena.withUnsafeBufferPointer { arena in
                for start in shard.starts {
                    var reader = RecordReader(bytes: arena, position: start)
                    let id = reader.readBytes()
                    _ = reader.readCount()
                    if !overlay.isEmpty, overlay[ExactID(String(decoding: id, as: UTF8.self))] != nil { continue }
                    try stored(id, &reader)
                }
            }
            for case let record? in overlay.values { try value(record) }
            shards[s] = Shard()
            overlays[s] = [:]
        }
        order = SortedIDs()
        unordered = []
    }

    /// At most `limit` records with ids after `after` (byte order), in id order, and the last id
    /// returned when more remain. No limit, or one above the record count, means all of them; a
    /// limit below 1 returns none (the methods reject it before).
    public func page(after: String?, limit: Int?) -> (records: [Record], next: String?) {
        if !unordered.isEmpty {
            var ordered = self
            ordered.orderWaitingIDs()
            return ordered.page(after: after, limit: limit)
        }
        // Clamped to 0...count, so `cap + 1` cannot overflow whatever the peer sent.
        let cap = Swift.max(0, Swift.min(limit ?? count, count))
        var ids = order.ids(after: after.map { ExactID($0) }, limit: cap + 1)
        let more = ids.count > cap
        if more { ids.removeLast() }
        let records = ids.compactMap { lookup($0, in: Self.shard($0)) }
        return (records, more ? ids.last?.string : nil)
    }
}
