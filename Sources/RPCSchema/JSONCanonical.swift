/// One form for params that mean the same: what a keyed mutation's digest is taken over, so a
/// retry whose param has its fields in another order, other whitespace or escapes, or `1.0` for
/// `1` is the same mutation, not `keyReused`.
extension JSONValue {
    /// The top-level object's fields in `fieldOrder` (the call's declared order; others after, by
    /// their bytes), nested objects' fields by their bytes, numbers in their shortest form.
    package func canonical(fieldOrder: [String]) -> JSONValue {
        guard case .object(let object) = self else { return canonical }
        var pairs: [(key: String, value: JSONValue)] = []
        pairs.reserveCapacity(object.pairs.count)
        for name in fieldOrder {
            if let pair = object.pairs.first(where: { $0.key.utf8.elementsEqual(name.utf8) }) { pairs.append((pair.key, pair.value.canonical)) }
        }
        let rest = object.pairs.filter { pair in !fieldOrder.contains { $0.utf8.elementsEqual(pair.key.utf8) } }
        pairs += Self.sorted(rest).map { ($0.key, $0.value.canonical) }
        return .object(JSONObject(pairs))
    }

    /// Objects' fields by their bytes, numbers in their shortest form, all the way down.
    package var canonical: JSONValue {
        switch self {
        case .object(let object): return .object(JSONObject(Self.sorted(object.pairs).map { ($0.key, $0.value.canonical) }))
        case .array(let items): return .array(items.map(\.canonical))
        case .number(let text): return .number(Self.canonicalNumber(text))
        default: return self
        }
    }

    private static func sorted(_ pairs: [(key: String, value: JSONValue)]) -> [(key: String, value: JSONValue)] {
        pairs.sorted { $0.key.utf8.lexicographicallyPrecedes($1.key.utf8) }
    }

    /// `1.0`, `1e0` and `1` as `1`; other numbers as the shortest text of their double, unless
    /// they are whole numbers a double cannot hold exactly (kept as written, minus a `+` or leading zeros).
    static func canonicalNumber(_ text: String) -> String {
        if let whole = Int64(text) { return String(whole) }
        guard let value = Double(text), value.isFinite else { return text }
        if value == value.rounded(), abs(value) < 9_007_199_254_740_992 { return String(Int64(value)) }
        return "\(value)"
    }
}

extension PlainObject {
    /// Whether its keys come in `order` (each one there, none repeated; some may be absent).
    package func keys(inOrder order: [String]) -> Bool {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: UInt8.self) else { return false }
        var next = 0
        var i = 1  // past `{`
        while i < bytes.count && base[i] == UInt8(ascii: "\"") {
            let keyStart = i + 1
            var k = keyStart
            while base[k] != UInt8(ascii: "\"") { k += 1 }
            let key = UnsafeBufferPointer(start: base + keyStart, count: k - keyStart)
            while next < order.count && !order[next].utf8.elementsEqual(key) { next += 1 }
            guard next < order.count else { return false }
            next += 1
            var v = k + 3  // past `":"`
            while base[v] != UInt8(ascii: "\"") { v += 1 }
            i = v + 2  // past `"` and `,` (or `}`)
        }
        return true
    }
}
