import RPCSchema

/// Many ids at once (journal replay): one sort and a bottom-up build instead of a tree walk per id.
extension SortedIDs {
    /// Adds `ids` (any order; repeats, and ids already here, count once). Many at once (journal
    /// replay) cost one sort and a bottom-up rebuild instead of a tree walk per id; a few, relative
    /// to the ids already here, are inserted one by one, in order.
    public mutating func insert(contentsOf ids: consuming [ExactID]) {
        let sorted = Self.sortedUnique(consume ids)
        guard sorted.count >= count / 8 else {
            for key in sorted { insert(key) }
            return
        }
        // Each array handed on with `consume`: uniquely held, its keys move instead of being copied.
        let merged = count == 0 ? consume sorted : Self.merge(root.allKeys, consume sorted)
        count = merged.count
        root = Self.build(consume merged)
    }

    /// `ids` in byte order without repeats, as keys (each with the prefix it was sorted by).
    /// Sorted by `orderPrefix`: a radix sort of the first 24 bytes, then comparisons of the rest
    /// (the keys' texts) only where those are shared.
    static func sortedUnique(_ ids: consuming [ExactID]) -> [Key] {
        // Each id's prefix, and what its key keeps of its text (`Key.stored`), in input order: the
        // ids are visited in the order they were made, and a key's tail (an id past 24 bytes) is
        // cut here, not in sorted order, a cache miss on each id's text. Strings are moved out
        // of `ids`: a copy retained each.
        var texts: [String] = []
        var entries: [Entry] = []
        texts.reserveCapacity(ids.count)
        entries.reserveCapacity(ids.count)
        ids.withUnsafeMutableBufferPointer { ids in
            let hole = ExactID("")
            for i in ids.indices {
                let id = (ids.baseAddress! + i).move()
                (ids.baseAddress! + i).initialize(to: hole)
                let prefix = id.orderPrefix
                entries.append(Entry(high: prefix.0, middle: prefix.1, low: prefix.2, index: i))
                texts.append(Key.stored(id.string, prefix.0, prefix.1, prefix.2))
            }
        }
        ids = []
        Entry.radixSort(&entries)
        // Entries sharing their first 24 bytes: by the rest (`Key.compareTexts`).
        var start = 0
        while start < entries.count {
            var end = start + 1
            while end < entries.count && entries[end].samePrefix(as: entries[start]) { end += 1 }
            if end - start > 1 {
                texts.withUnsafeBufferPointer { texts in
                    entries.withUnsafeMutableBufferPointer { buffer in
                        var run = UnsafeMutableBufferPointer(rebasing: buffer[start..<end])
                        run.sort { a, b in Key.compareTexts(texts[a.index], texts[b.index]) < 0 }
                    }
                }
            }
            start = end
        }
        return texts.withUnsafeMutableBufferPointer { texts in
            [Key](unsafeUninitializedCapacity: entries.count) { out, written in
                written = 0
                for n in entries.indices {
                    let entry = entries[n]
                    // A repeat: equal to the key kept before it (same prefix, same text); it stays
                    // in `texts`, which lets it go.
                    if n > 0 && entry.samePrefix(as: entries[n - 1]) && Key.compareTexts(out[written - 1].string, texts[entry.index]) == 0 {
                        continue
                    }
                    let text = (texts.baseAddress! + entry.index).move()
                    (texts.baseAddress! + entry.index).initialize(to: "")
                    (out.baseAddress! + written).initialize(to: Key(high: entry.high, middle: entry.middle, low: entry.low, stored: text))
                    written += 1
                }
            }
        }
    }

    /// Two ascending runs as one, an id in both once. Keys are moved, not copied: a copy retained
    /// each id's string and the runs' release let it go again, a third of a 1M-record restart's
    /// reference counting (`perf`, `--recovery 1000000`).
    static func merge(_ a: consuming [Key], _ b: consuming [Key]) -> [Key] {
        var a = a
        var b = b
        let total = a.count + b.count
        return a.withUnsafeMutableBufferPointer { a in
            b.withUnsafeMutableBufferPointer { b in
                [Key](unsafeUninitializedCapacity: total) { out, written in
                    var i = 0
                    var j = 0
                    written = 0
                    while i < a.count && j < b.count {
                        let order = Key.compare(a[i], b[j])
                        if order <= 0 {
                            // On a tie `b[j]` stays behind, a copy its run's release lets go.
                            Self.move(from: a, at: i, count: 1, to: out, at: written)
                            i += 1
                            if order == 0 { j += 1 }
                        } else {
                            Self.move(from: b, at: j, count: 1, to: out, at: written)
                            j += 1
                        }
                        written += 1
                    }
                    Self.move(from: a, at: i, count: a.count - i, to: out, at: written)
                    written += a.count - i
                    Self.move(from: b, at: j, count: b.count - j, to: out, at: written)
                    written += b.count - j
                }
            }
        }
    }

    /// Moves `count` keys from `source` at `start` to `target` at `offset`, leaving placeholders (no
    /// counted reference) behind for the source array to destroy.
    @inline(__always)
    private static func move(
        from source: UnsafeMutableBufferPointer<Key>, at start: Int, count: Int, to target: UnsafeMutableBufferPointer<Key>, at offset: Int
    ) {
        guard count > 0 else { return }
        (target.baseAddress! + offset).moveInitialize(from: source.baseAddress! + start, count: count)
        (source.baseAddress! + start).initialize(repeating: .placeholder, count: count)
    }

    /// The keys of `source` in `range`, moved into an array of their own.
    private static func moved(from source: UnsafeMutableBufferPointer<Key>, _ range: Range<Int>) -> [Key] {
        [Key](unsafeUninitializedCapacity: range.count) { out, written in
            move(from: source, at: range.lowerBound, count: range.count, to: out, at: 0)
            written = range.count
        }
    }

    /// The tree of ascending, distinct `ids`, built level by level: nodes are 3/4 full (as even as
    /// possible, so none falls near the merge threshold), leaving room for inserts before splits.
    static func build(_ ids: consuming [Key]) -> Node {
        guard ids.count > leafCapacity else { return Node(keys: ids) }
        var ids = ids
        var nodes: [Node] = []
        var lowest: [Key] = []  // the smallest id below each node: its separator one level up
        ids.withUnsafeMutableBufferPointer { ids in
            for piece in pieces(ids.count, fill: leafCapacity * 3 / 4) {
                lowest.append(ids[piece.lowerBound])  // a copy: the separator and the leaf both hold it
                nodes.append(Node(keys: moved(from: ids, piece)))
            }
        }
        while nodes.count > innerCapacity {
            var parents: [Node] = []
            var parentLowest: [Key] = []
            for piece in pieces(nodes.count, fill: innerCapacity * 3 / 4) {
                parents.append(Node(keys: Array(lowest[(piece.lowerBound + 1)..<piece.upperBound]), children: Array(nodes[piece])))
                parentLowest.append(lowest[piece.lowerBound])
            }
            nodes = parents
            lowest = parentLowest
        }
        return Node(keys: Array(lowest.dropFirst()), children: nodes)
    }

    /// `0..<count` cut into the fewest ranges of at most `fill`, their sizes differing by at most one.
    private static func pieces(_ count: Int, fill: Int) -> [Range<Int>] {
        let n = (count + fill - 1) / fill
        return (0..<n).map { i in (i * count / n)..<((i + 1) * count / n) }
    }
}

/// An id by its `orderPrefix`, and where it is in the input.
private struct Entry {
    var high: UInt64
    var middle: UInt64
    var low: UInt64
    var index: Int

    func samePrefix(as other: Entry) -> Bool { high == other.high && middle == other.middle && low == other.low }

    /// Sorts by `high`, then `middle`, then `low`: one pass of a byte each, least significant
    /// first, through a second buffer; a byte where every entry has the same value (a prefix all
    /// ids share, short ids' zero padding) takes no pass. Ids that differ only past their first 8
    /// bytes (a shared prefix such as a tenant or a run's tag) are sorted as fast as any.
    static func radixSort(_ entries: inout [Entry]) {
        let count = entries.count
        guard count > 1 else { return }
        // Digit d: byte d % 8 of word d / 8, the words least significant first (low, middle, high).
        var histograms = [Int](repeating: 0, count: 24 * 256)
        histograms.withUnsafeMutableBufferPointer { counts in
            for entry in entries {
                for byte in 0..<8 {
                    let shift = UInt64(byte &* 8)
                    counts[byte &* 256 &+ Int((entry.low >> shift) & 0xFF)] &+= 1
                    counts[(8 &+ byte) &* 256 &+ Int((entry.middle >> shift) & 0xFF)] &+= 1
                    counts[(16 &+ byte) &* 256 &+ Int((entry.high >> shift) & 0xFF)] &+= 1
                }
            }
        }
        var other = entries
        for digit in 0..<24 {
            let counts = histograms[(digit * 256)..<((digit + 1) * 256)]
            if counts.contains(count) { continue }
            var next = [Int](repeating: 0, count: 256)
            var total = 0
            for (value, n) in counts.enumerated() {
                next[value] = total
                total += n
            }
            let shift = UInt64((digit % 8) * 8)
            let word = digit / 8
            entries.withUnsafeBufferPointer { source in
                other.withUnsafeMutableBufferPointer { target in
                    next.withUnsafeMutableBufferPointer { next in
                        for entry in source {
                            let key = word == 0 ? entry.low : word == 1 ? entry.middle : entry.high
                            let value = Int((key >> shift) & 0xFF)
                            target[next[value]] = entry
                            next[value] &+= 1
                        }
                    }
                }
            }
            swap(&entries, &other)
        }
    }
}
