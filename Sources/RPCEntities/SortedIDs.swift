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
        var keys: [Key] = []
        var children: [Node] = []

        var isLeaf: Bool { children.isEmpty }
        /// Ids in a leaf, children in an inner node.
        var size: Int { isLeaf ? keys.count : children.count }
        var capacity: Int { isLeaf ? SortedIDs.leafCapacity : SortedIDs.innerCapacity }
    }

    var root = Node()
    public internal(set) var count = 0

    /// An id's text with its first 24 bytes beside it (`orderPrefix`): a search compares the three
    /// words and reads the text only when they tie. An id longer than 15 bytes lives in storage of
    /// its own, a cache miss for every comparison that read it: at a million ids the binary
    /// searches of an insert were ~10% of a durable create's CPU, and 14% of a follower's. 24
    /// bytes, not 16: ids often share a long prefix (a tag, a date, then a sequence number), and
    /// with 16 a search among ids like `b1f2e3d4a-12-000345` read the text of most keys it probed.
    /// 40 bytes, 16 more than the `ExactID` it replaces (whose hash the order does not need: a
    /// page's ids get theirs again as they are read out).
    ///
    /// An id of 16 to 24 bytes whose last byte is not NUL is all in its prefix: its length is
    /// where the prefix's trailing zero bytes start, so the key keeps no text (`string` is empty).
    /// Such an id is past what a `String` holds inline: its text took a heap block of its own,
    /// 48 bytes with malloc's, a record. Shorter ids are inline in `string` anyway, and so are
    /// ones that end in NUL. An empty `string` with a zero prefix is the empty id, which fits the
    /// same rule.
    ///
    /// An id longer than 24 bytes keeps only its tail in `string`: the bytes from the last
    /// character boundary at or before byte 24 (`tailStart`). A tail of up to 15 bytes (ids up to
    /// 36 bytes or more: a UUID) is inline, where the whole text took a heap block, 80 bytes a
    /// UUID with malloc's, that the key alone kept alive. Except when byte 24 of the prefix
    /// (index 23) is NUL: then the key keeps the whole text, so that `string` is a tail exactly
    /// when the prefix's last byte is not NUL. Keys with equal prefixes are therefore of one kind
    /// (their texts, or their tails from the same boundary) and `compareTexts` orders them.
    struct Key: Sendable {
        let high: UInt64
        let middle: UInt64
        let low: UInt64
        /// What the key keeps of the id's text (`stored`): nothing when the prefix holds it all
        /// (`isInPrefix`), its tail past the prefix (`isTail`), or the whole text.
        let string: String

        init(_ id: ExactID) {
            let (high, middle, low) = id.orderPrefix
            self.init(high: high, middle: middle, low: low, stored: Self.stored(id.string, high, middle, low))
        }

        /// A key that holds no counted reference (an empty string is stored inline): what a split
        /// leaves in the slots it moved keys out of, before they are dropped.
        static var placeholder: Key { Key(high: 0, middle: 0, low: 0, stored: "") }

        /// A key whose prefix is known already and whose `string` is what `stored` made of its
        /// id's text (a bulk sort computed both).
        init(high: UInt64, middle: UInt64, low: UInt64, stored: String) {
            self.high = high
            self.middle = middle
            self.low = low
            self.string = stored
        }

        /// What a key keeps of an id's text (`string`, see the type's comment): nothing, a tail or
        /// the text.
        static func stored(_ string: String, _ high: UInt64, _ middle: UInt64, _ low: UInt64) -> String {
            // The length is in the string itself, the last byte in the prefix: no read of the text.
            let count = string.utf8.count
            if count > 24 && low & 0xFF != 0 {
                return ExactUTF8.withBytes(string) { bytes in
                    String(decoding: UnsafeBufferPointer(rebasing: bytes[Self.tailStart(bytes[24], high, middle, low)...]), as: UTF8.self)
                }
            }
            return count >= 16 && count <= 24 && Self.byte(count - 1, high, middle, low) != 0 ? "" : string
        }

        /// Where the tail of an id longer than 24 bytes starts: 24, or where the character that
        /// byte 24 continues starts (21 to 23), so that the tail is text of its own. `byte24` is
        /// the id's byte 24 when known; nil reads the boundary from the prefix alone (a character's
        /// first byte gives its length).
        @inline(__always)
        static func tailStart(_ byte24: UInt8?, _ high: UInt64, _ middle: UInt64, _ low: UInt64) -> Int {
            if let byte24, byte24 & 0xC0 != 0x80 { return 24 }
            var start = 23
            while start > 20 && byte(start, high, middle, low) & 0xC0 == 0x80 { start -= 1 }
            let lead = byte(start, high, middle, low)
            let length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4
            return start + length > 24 ? start : 24
        }

        /// Byte `index` (0 to 23) of a prefix.
        @inline(__always)
        private static func byte(_ index: Int, _ high: UInt64, _ middle: UInt64, _ low: UInt64) -> UInt8 {
            let word = index < 8 ? high : index < 16 ? middle : low
            return UInt8(truncatingIfNeeded: word >> UInt64((7 - index % 8) * 8))
        }

        /// The id's text is its prefix (up to its trailing zero bytes), not `string`.
        var isInPrefix: Bool { string.isEmpty }

        /// Whether `string` is the tail of an id longer than 24 bytes (see the type's comment).
        var isTail: Bool { !string.isEmpty && low & 0xFF != 0 }

        /// The id's text.
        var text: String {
            guard isInPrefix || isTail else { return string }
            var words = (high.bigEndian, middle.bigEndian, low.bigEndian)
            return withUnsafeBytes(of: &words) { bytes in
                if isTail {
                    let head = UnsafeRawBufferPointer(rebasing: bytes[0..<Self.tailStart(nil, high, middle, low)])
                    var text = String(decoding: head, as: UTF8.self)
                    text += string
                    return text
                }
                var count = 24
                while count > 0 && bytes[count - 1] == 0 { count -= 1 }
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[0..<count]), as: UTF8.self)
            }
        }

        /// The id (its hash computed again).
        var id: ExactID { ExactID(text) }

        /// Order of two keys with the same prefix: an id held in its prefix is a strict prefix of
        /// any other id with those 24 bytes (which has more bytes, or ends in NUL), or that id.
        @inline(__always)
        static func compareTexts(_ a: String, _ b: String) -> Int {
            if a.isEmpty || b.isEmpty { return a.isEmpty ? (b.isEmpty ? 0 : -1) : 1 }
            return ExactUTF8.compare(a, b)
        }

        /// <0, 0 or >0 as `self` sorts before, equal to or after `other`, in byte order.
        @inline(__always)
        func compare(_ other: Key) -> Int {
            if high != other.high { return high < other.high ? -1 : 1 }
            if middle != other.middle { return middle < other.middle ? -1 : 1 }
            if low != other.low { return low < other.low ? -1 : 1 }
            return Self.compareTexts(string, other.string)
        }

        /// `compare` for a key read in place in a node's array (borrowed: a copy retained its string,
        /// an atomic increment and decrement about a dozen times an insert).
        @inline(__always)
        static func compare(_ key: borrowing Key, _ other: Key) -> Int {
            if key.high != other.high { return key.high < other.high ? -1 : 1 }
            if key.middle != other.middle { return key.middle < other.middle ? -1 : 1 }
            if key.low != other.low { return key.low < other.low ? -1 : 1 }
            return compareTexts(key.string, other.string)
        }
    }

    public init() {}

    public func contains(_ id: ExactID) -> Bool {
        let key = Key(id)
        var node = root
        while !node.isLeaf { node = node.children[Self.upperBound(node.keys, key)] }
        let i = Self.lowerBound(node.keys, key)
        return i < node.keys.count && node.keys[i].compare(key) == 0
    }

    /// Adds `id`; false if it was there already.
    @discardableResult
    public mutating func insert(_ id: ExactID) -> Bool {
        insert(Key(id))
    }

    @discardableResult
    mutating func insert(_ key: Key) -> Bool {
        let (inserted, split) = root.insert(key)
        if let (separator, right) = split {
            root = Node(keys: [separator], children: [root, right])
        }
        if inserted { count += 1 }
        return inserted
    }

    /// Removes `id`; false if it was not there.
    @discardableResult
    public mutating func remove(_ id: ExactID) -> Bool {
        guard root.remove(Key(id)) else { return false }
        count -= 1
        while !root.isLeaf && root.children.count == 1 { root = root.children[0] }
        return true
    }

    /// Up to `limit` ids above `after` (from the first when nil), in order. `limit` below 1 gives none.
    public func ids(after: ExactID?, limit: Int) -> [ExactID] {
        guard limit > 0 else { return [] }
        var out: [ExactID] = []
        out.reserveCapacity(Swift.min(limit, count))
        root.collect(after: after.map(Key.init), limit: limit, into: &out)
        return out
    }

    /// Every id, in order.
    public var all: [ExactID] { ids(after: nil, limit: count) }

    /// First index whose key is at or above `key`.
    @inline(__always)
    static func lowerBound(_ keys: [Key], _ key: Key) -> Int { partition(keys, key, below: 0) }

    /// First index whose key is above `key` (the number of keys at or below it).
    @inline(__always)
    static func upperBound(_ keys: [Key], _ key: Key) -> Int { partition(keys, key, below: 1) }

    /// First index whose key compares to `key` at `below` or more (`Key.compare`: -1, 0, 1):
    /// 0 finds the lower bound, 1 the upper.
    @inline(__always)
    private static func partition(_ keys: [Key], _ key: Key, below: Int) -> Int {
        keys.withUnsafeBufferPointer { keys in
            var low = 0
            var high = keys.count
            while low < high {
                let mid = low + (high - low) / 2
                if Key.compare(keys[mid], key) < below { low = mid + 1 } else { high = mid }
            }
            return low
        }
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
                for key in node.keys {
                    let id = key.id
                    if (key.high, key.middle, key.low) != id.orderPrefix { return "\(id) beside another id's prefix" }
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
                let childLow = i == 0 ? low : node.keys[i - 1].id
                let childHigh = i == node.keys.count ? high : node.keys[i].id
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
    mutating func insert(_ id: SortedIDs.Key) -> (inserted: Bool, split: (SortedIDs.Key, Self)?) {
        if isLeaf {
            let i = SortedIDs.lowerBound(keys, id)
            // Compared in place: `keys[i]` copied the key (a retain and a release of its id).
            if i < keys.count && keys.withUnsafeBufferPointer({ SortedIDs.Key.compare($0[i], id) }) == 0 { return (false, nil) }
            // A full array grows to at most what a leaf holds before it splits: doubling gave a
            // bulk-built leaf (3/4 full, no room) 384 slots at its first insert, 1.5 times the most
            // it ever holds, and after a restart that was most leaves.
            if keys.count == keys.capacity { keys.reserveCapacity(Swift.min(Swift.max(keys.count * 2, 8), capacity + 1)) }
            keys.insert(id, at: i)
            guard keys.count > SortedIDs.leafCapacity else { return (true, nil) }
            // An id past all of the leaf's splits off alone: ids that come in order (a counter, a
            // date) leave full leaves behind, not half-full ones (half the index's memory).
            let keeping = i == keys.count - 1 ? keys.count - 1 : keys.count / 2
            let right = Self(keys: Self.moveUpperHalf(from: &keys, keeping: keeping, leaving: SortedIDs.Key.placeholder, room: capacity + 1))
            return (true, (right.keys[0], right))
        }
        let c = SortedIDs.upperBound(keys, id)
        let (inserted, split) = children[c].insert(id)
        guard let (separator, newChild) = split else { return (inserted, nil) }
        keys.insert(separator, at: c)
        children.insert(newChild, at: c + 1)
        guard children.count > SortedIDs.innerCapacity else { return (inserted, nil) }
        // Children [0, half) stay; keys[half - 1] separates the halves and moves up. A child
        // added last splits off alone, as a leaf's last id does.
        let half = c + 1 == children.count - 1 ? children.count - 1 : children.count / 2
        let rightKeys = Self.moveUpperHalf(from: &keys, keeping: half, leaving: SortedIDs.Key.placeholder, room: capacity)
        let promoted = keys.removeLast()
        let right = Self(keys: rightKeys, children: Self.moveUpperHalf(from: &children, keeping: half, leaving: Self(), room: capacity + 1))
        return (inserted, (promoted, right))
    }

    /// The elements of `elements` from `count` on, moved out into a new array (in order), not
    /// copied and then removed: a copy retained each key's id and the removal released it, two
    /// atomic updates per key, on strings long out of the cache. The slots left behind get
    /// `placeholder` (one that holds no counted reference: an empty id, an empty node), then go.
    /// The new array has `room` (what its node holds before it splits).
    static func moveUpperHalf<Element>(from elements: inout [Element], keeping count: Int, leaving placeholder: Element, room: Int) -> [Element] {
        let moving = elements.count - count
        guard moving > 0 else { return [] }
        let moved = elements.withUnsafeMutableBufferPointer { source in
            [Element](unsafeUninitializedCapacity: Swift.max(room, moving)) { target, initialized in
                guard let from = source.baseAddress.map({ $0 + count }), let to = target.baseAddress else {
                    preconditionFailure("a node with elements to move has no storage")
                }
                to.moveInitialize(from: from, count: moving)
                from.initialize(repeating: placeholder, count: moving)
                initialized = moving
            }
        }
        elements.removeLast(moving)
        return moved
    }

    /// Removes `id` from below this node; false if it was not there.
    mutating func remove(_ id: SortedIDs.Key) -> Bool {
        if isLeaf {
            let i = SortedIDs.lowerBound(keys, id)
            guard i < keys.count && keys[i].compare(id) == 0 else { return false }
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

    /// Every key below this node, in order (no id's hash computed again, as `collect` does).
    var allKeys: [SortedIDs.Key] {
        var out: [SortedIDs.Key] = []
        appendKeys(into: &out)
        return out
    }

    private func appendKeys(into out: inout [SortedIDs.Key]) {
        if isLeaf { return out.append(contentsOf: keys) }
        for child in children { child.appendKeys(into: &out) }
    }

    /// Appends ids above `after` (all when nil) until `out` holds `limit`; true once it does.
    @discardableResult
    func collect(after: SortedIDs.Key?, limit: Int, into out: inout [ExactID]) -> Bool {
        if isLeaf {
            let start = after.map { SortedIDs.upperBound(keys, $0) } ?? 0
            for key in keys[start...] {
                if out.count >= limit { return true }
                out.append(key.id)
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
