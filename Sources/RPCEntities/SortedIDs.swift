import RPCSchema

/// A set of ids kept in byte order, for paging: O(log n) insert and remove, O(log n + limit) for a
/// page after any id. A B+tree of value-type nodes.
///
/// Copy-on-write per node: every node is a struct whose arrays are shared between copies, so after
/// compaction takes a copy of the state, the next insert copies only the nodes on its path (one
/// leaf of at most `leafCapacity` ids and at most `innerCapacity` children per level above it),
/// never the whole index.
public struct SortedIDs: Sendable {
    static let leafCapacity = 256
    static let innerCapacity = 64

    /// A leaf holds ids; an inner node holds children and the separators between them.
    ///
    /// Inner node invariant: `keys.count == children.count - 1`, and every id in `children[i]` is
    /// below `keys[i]` and at or above `keys[i - 1]`. Removing an id leaves its separator in
    /// place (still a valid bound), so removals never rewrite ancestors.
    struct Node: Sendable {
        var keys: [ExactID] = []
        var children: [Node] = []

        var isLeaf: Bool { children.isEmpty }
        /// Ids in a leaf, children in an inner node.
        var size: Int { isLeaf ? keys.count : children.count }
        var capacity: Int { isLeaf ? SortedIDs.leafCapacity : SortedIDs.innerCapacity }
    }

    private(set) var root = Node()
    public private(set) var count = 0

    public init() {}

    public func contains(_ id: ExactID) -> Bool {
        var node = root
        while !node.isLeaf { node = node.children[Self.upperBound(node.keys, id)] }
        let i = Self.lowerBound(node.keys, id)
        return i < node.keys.count && node.keys[i] == id
    }

    /// Adds `id`; false if it was there already.
    @discardableResult
    public mutating func insert(_ id: ExactID) -> Bool {
        let (inserted, split) = root.insert(id)
        if let (separator, right) = split {
            root = Node(keys: [separator], children: [root, right])
        }
        if inserted { count += 1 }
        return inserted
    }

    /// Removes `id`; false if it was not there.
    @discardableResult
    public mutating func remove(_ id: ExactID) -> Bool {
        guard root.remove(id) else { return false }
        count -= 1
        while !root.isLeaf && root.children.count == 1 { root = root.children[0] }
        return true
    }

    /// Up to `limit` ids above `after` (from the first when nil), in order. `limit` below 1 gives none.
    public func ids(after: ExactID?, limit: Int) -> [ExactID] {
        guard limit > 0 else { return [] }
        var out: [ExactID] = []
        out.reserveCapacity(Swift.min(limit, count))
        root.collect(after: after, limit: limit, into: &out)
        return out
    }

    /// Every id, in order.
    public var all: [ExactID] { ids(after: nil, limit: count) }

    /// Adds `ids` (any order; repeats, and ids already here, count once). Many at once (journal
    /// replay) cost one sort and a bottom-up rebuild instead of a tree walk per id; a few, relative
    /// to the ids already here, are inserted one by one, in order.
    public mutating func insert(contentsOf ids: [ExactID]) {
        let sorted = Self.sortedUnique(ids)
        guard sorted.count >= count / 8 else {
            for id in sorted { insert(id) }
            return
        }
        let merged = count == 0 ? sorted : Self.merge(all, sorted)
        root = Self.build(merged)
        count = merged.count
    }

    /// `ids` in byte order without repeats. Sorted by `orderPrefix` first: integer comparisons,
    /// and whole-id comparisons only among ids sharing their first 16 bytes.
    static func sortedUnique(_ ids: [ExactID]) -> [ExactID] {
        struct Entry {
            var high: UInt64
            var low: UInt64
            var index: Int
        }
        var entries = ids.indices.map { i in
            let prefix = ids[i].orderPrefix
            return Entry(high: prefix.0, low: prefix.1, index: i)
        }
        entries.sort { a, b in
            if a.high != b.high { return a.high < b.high }
            if a.low != b.low { return a.low < b.low }
            return ids[a.index] < ids[b.index]
        }
        var out: [ExactID] = []
        out.reserveCapacity(ids.count)
        for (n, entry) in entries.enumerated() {
            if n > 0, entries[n - 1].high == entry.high, entries[n - 1].low == entry.low, ids[entries[n - 1].index] == ids[entry.index] {
                continue
            }
            out.append(ids[entry.index])
        }
        return out
    }

    /// Two ascending runs as one, an id in both once.
    static func merge(_ a: [ExactID], _ b: [ExactID]) -> [ExactID] {
        var out: [ExactID] = []
        out.reserveCapacity(a.count + b.count)
        var i = 0
        var j = 0
        while i < a.count && j < b.count {
            if a[i] < b[j] {
                out.append(a[i])
                i += 1
            } else if b[j] < a[i] {
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
    static func build(_ ids: [ExactID]) -> Node {
        guard ids.count > leafCapacity else { return Node(keys: ids) }
        var nodes: [Node] = []
        var lowest: [ExactID] = []  // the smallest id below each node: its separator one level up
        for piece in pieces(ids.count, fill: leafCapacity * 3 / 4) {
            nodes.append(Node(keys: Array(ids[piece])))
            lowest.append(ids[piece.lowerBound])
        }
        while nodes.count > innerCapacity {
            var parents: [Node] = []
            var parentLowest: [ExactID] = []
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

    /// First index whose key is at or above `id`.
    static func lowerBound(_ keys: [ExactID], _ id: ExactID) -> Int {
        var low = 0
        var high = keys.count
        while low < high {
            let mid = low + (high - low) / 2
            if keys[mid] < id { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// First index whose key is above `id` (the number of keys at or below it).
    static func upperBound(_ keys: [ExactID], _ id: ExactID) -> Int {
        var low = 0
        var high = keys.count
        while low < high {
            let mid = low + (high - low) / 2
            if id < keys[mid] { high = mid } else { low = mid + 1 }
        }
        return low
    }

    /// The tree's shape rules, for tests: nil when they hold, else what is wrong.
    func violation() -> String? {
        var previous: ExactID?
        var seen = 0
        func check(_ node: Node, low: ExactID?, high: ExactID?, depth: Int, leafDepth: inout Int?) -> String? {
            if node.isLeaf {
                if let leafDepth, leafDepth != depth { return "leaves at depths \(leafDepth) and \(depth)" }
                leafDepth = depth
                if node.keys.count > Self.leafCapacity { return "leaf of \(node.keys.count) ids" }
                for id in node.keys {
                    if let previous, !(previous < id) { return "\(previous) is not below \(id)" }
                    if let low, id < low { return "\(id) below its bound \(low)" }
                    if let high, !(id < high) { return "\(id) not below its bound \(high)" }
                    previous = id
                    seen += 1
                }
                return nil
            }
            if node.keys.count != node.children.count - 1 { return "\(node.keys.count) keys for \(node.children.count) children" }
            if node.children.count > Self.innerCapacity { return "inner node of \(node.children.count) children" }
            for (i, child) in node.children.enumerated() {
                let childLow = i == 0 ? low : node.keys[i - 1]
                let childHigh = i == node.keys.count ? high : node.keys[i]
                if let problem = check(child, low: childLow, high: childHigh, depth: depth + 1, leafDepth: &leafDepth) {
                    return problem
                }
            }
            return nil
        }
        var leafDepth: Int?
        if let problem = check(root, low: nil, high: nil, depth: 0, leafDepth: &leafDepth) { return problem }
        return seen == count ? nil : "count \(count) but \(seen) ids"
    }
}

extension SortedIDs.Node {
    /// Inserts `id` below this node; returns whether it was new, and the right half when the node split.
    mutating func insert(_ id: ExactID) -> (inserted: Bool, split: (ExactID, Self)?) {
        if isLeaf {
            let i = SortedIDs.lowerBound(keys, id)
            if i < keys.count && keys[i] == id { return (false, nil) }
            keys.insert(id, at: i)
            guard keys.count > SortedIDs.leafCapacity else { return (true, nil) }
            let half = keys.count / 2
            let right = Self(keys: Array(keys[half...]))
            keys.removeSubrange(half...)
            return (true, (right.keys[0], right))
        }
        let c = SortedIDs.upperBound(keys, id)
        let (inserted, split) = children[c].insert(id)
        guard let (separator, newChild) = split else { return (inserted, nil) }
        keys.insert(separator, at: c)
        children.insert(newChild, at: c + 1)
        guard children.count > SortedIDs.innerCapacity else { return (inserted, nil) }
        // Children [0, half) stay; keys[half - 1] separates the halves and moves up.
        let half = children.count / 2
        let promoted = keys[half - 1]
        let right = Self(keys: Array(keys[half...]), children: Array(children[half...]))
        keys.removeSubrange((half - 1)...)
        children.removeSubrange(half...)
        return (inserted, (promoted, right))
    }

    /// Removes `id` from below this node; false if it was not there.
    mutating func remove(_ id: ExactID) -> Bool {
        if isLeaf {
            let i = SortedIDs.lowerBound(keys, id)
            guard i < keys.count && keys[i] == id else { return false }
            keys.remove(at: i)
            return true
        }
        let c = SortedIDs.upperBound(keys, id)
        guard children[c].remove(id) else { return false }
        mergeIfSmall(c)
        return true
    }

    /// Merges child `c` with a neighbour when it has fallen below a quarter of its capacity and the
    /// two fit in one node (an empty child always fits), so nodes stay a constant fraction full.
    private mutating func mergeIfSmall(_ c: Int) {
        let child = children[c]
        guard children.count > 1, child.size < Swift.max(1, child.capacity / 4) else { return }
        let (left, right) = c > 0 ? (c - 1, c) : (c, c + 1)
        guard children[left].size + children[right].size <= child.capacity else { return }
        let moved = children.remove(at: right)
        let separator = keys.remove(at: left)
        if !moved.isLeaf { children[left].keys.append(separator) }
        children[left].keys.append(contentsOf: moved.keys)
        children[left].children.append(contentsOf: moved.children)
    }

    /// Appends ids above `after` (all when nil) until `out` holds `limit`; true once it does.
    @discardableResult
    func collect(after: ExactID?, limit: Int, into out: inout [ExactID]) -> Bool {
        if isLeaf {
            let start = after.map { SortedIDs.upperBound(keys, $0) } ?? 0
            for id in keys[start...] {
                if out.count >= limit { return true }
                out.append(id)
            }
            return out.count >= limit
        }
        let first = after.map { SortedIDs.upperBound(keys, $0) } ?? 0
        // Only the first child can hold ids at or below `after`; the later ones are all above it.
        if children[first].collect(after: after, limit: limit, into: &out) { return true }
        for child in children[(first + 1)...] where child.collect(after: nil, limit: limit, into: &out) {
            return true
        }
        return false
    }
}
