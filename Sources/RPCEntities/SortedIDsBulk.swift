import RPCSchema

/// Many ids at once (journal replay): one sort and a bottom-up build instead of a tree walk per id.
extension SortedIDs {
    /// Adds `ids` (any order; repeats, and ids already here, count once). Many at once (journal
    /// replay) cost one sort and a bottom-up rebuild instead of a tree walk per id; a few, relative
    /// to the ids already here, are inserted one by one, in order.
    public mutating func insert(contentsOf ids: [ExactID]) {
        let sorted = Self.sortedUnique(ids)
        guard sorted.count >= count / 8 else {
            for key in sorted { insert(key) }
            return
        }
        let merged = count == 0 ? sorted : Self.merge(root.allKeys, sorted)
        root = Self.build(merged)
        count = merged.count
    }

    /// `ids` in byte order without repeats, as keys (each with the prefix it was sorted by).
    /// Sorted by `orderPrefix`: a radix sort of the first 8 bytes, then comparisons of the next 16
    /// and of whole ids only where those are shared.
    static func sortedUnique(_ ids: [ExactID]) -> [Key] {
        var entries = ids.indices.map { i in
            let prefix = ids[i].orderPrefix
            return Entry(high: prefix.0, middle: prefix.1, low: prefix.2, index: i)
        }
        Entry.radixSortByHigh(&entries)
        // Entries sharing their first 8 bytes: by the next 8, then whole ids.
        var start = 0
        while start < entries.count {
            var end = start + 1
            while end < entries.count && entries[end].high == entries[start].high { end += 1 }
            if end - start > 1 {
                entries.withUnsafeMutableBufferPointer { buffer in
                    var run = UnsafeMutableBufferPointer(rebasing: buffer[start..<end])
                    run.sort { a, b in
                        a.middle != b.middle ? a.middle < b.middle : a.low != b.low ? a.low < b.low : ids[a.index] < ids[b.index]
                    }
                }
            }
            start = end
        }
        var out: [Key] = []
        out.reserveCapacity(ids.count)
        for (n, entry) in entries.enumerated() {
            if n > 0, entries[n - 1].high == entry.high, entries[n - 1].middle == entry.middle, entries[n - 1].low == entry.low,
                ids[entries[n - 1].index] == ids[entry.index]
            {
                continue
            }
            out.append(Key(high: entry.high, middle: entry.middle, low: entry.low, string: ids[entry.index].string))
        }
        return out
    }

    /// Two ascending runs as one, an id in both once.
    static func merge(_ a: [Key], _ b: [Key]) -> [Key] {
        var out: [Key] = []
        out.reserveCapacity(a.count + b.count)
        var i = 0
        var j = 0
        while i < a.count && j < b.count {
            let order = a[i].compare(b[j])
            if order < 0 {
                out.append(a[i])
                i += 1
            } else if order > 0 {
                out.append(b[j])
                j += 1
            } else {
                out.append(a[i])
                i += 1
                j += 1
            }
        }
        out.append(contentsOf: a[i...])
        out.append(contentsOf: b[j...])
        return out
    }

    /// The tree of ascending, distinct `ids`, built level by level: nodes are 3/4 full (as even as
    /// possible, so none falls near the merge threshold), leaving room for inserts before splits.
    static func build(_ ids: [Key]) -> Node {
        guard ids.count > leafCapacity else { return Node(keys: ids) }
        var nodes: [Node] = []
        var lowest: [Key] = []  // the smallest id below each node: its separator one level up
        for piece in pieces(ids.count, fill: leafCapacity * 3 / 4) {
            nodes.append(Node(keys: Array(ids[piece])))
            lowest.append(ids[piece.lowerBound])
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

    /// Sorts by `high`, stable: eight passes of a byte each, least significant first, through a
    /// second buffer; a pass where every entry has the same byte there (ids sharing a first letter,
    /// short ids' zero padding) is skipped.
    static func radixSortByHigh(_ entries: inout [Entry]) {
        let count = entries.count
        guard count > 1 else { return }
        var histograms = [Int](repeating: 0, count: 8 * 256)
        for entry in entries {
            for byte in 0..<8 { histograms[byte &* 256 &+ Int((entry.high >> UInt64(byte &* 8)) & 0xFF)] &+= 1 }
        }
        var other = entries
        for byte in 0..<8 {
            let counts = histograms[(byte * 256)..<((byte + 1) * 256)]
            if counts.contains(count) { continue }
            var next = [Int](repeating: 0, count: 256)
            var total = 0
            for (value, n) in counts.enumerated() {
                next[value] = total
                total += n
            }
            let shift = UInt64(byte * 8)
            entries.withUnsafeBufferPointer { source in
                other.withUnsafeMutableBufferPointer { target in
                    for entry in source {
                        let value = Int((entry.high >> shift) & 0xFF)
                        target[next[value]] = entry
                        next[value] &+= 1
                    }
                }
            }
            swap(&entries, &other)
        }
    }
}
