/// "Did you mean …?" for names a person typed: the nearest candidate by edit distance, when it is
/// near enough to be a typo.
public enum Suggestion {
    /// Longer names get no suggestion: the distance costs length × candidate length, and a peer
    /// controls the length.
    static let maxLength = 64

    /// The candidate nearest to `name` (case-insensitive), or nil when none is near.
    public static func closest(to name: String, among candidates: some Sequence<String>) -> String? {
        let typed = Array(name.lowercased().utf8)
        guard !typed.isEmpty, typed.count <= maxLength else { return nil }
        var best: (candidate: String, distance: Int)?
        for candidate in candidates {
            let distance = editDistance(typed, Array(candidate.lowercased().utf8))
            if distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        guard let best, best.distance > 0 || name != best.candidate else { return nil }
        return best.distance <= max(2, best.candidate.utf8.count / 3) ? best.candidate : nil
    }

    /// `; did you mean "x"?` or "".
    public static func hint(for name: String, among candidates: some Sequence<String>) -> String {
        closest(to: name, among: candidates).map { "; did you mean \"\($0)\"?" } ?? ""
    }

    /// Levenshtein distance over bytes.
    public static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        var current = previous
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
