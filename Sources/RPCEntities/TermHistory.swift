import RPCSchema

/// Who wrote which part of the history: each leadership is a term (a number that only grows and
/// a random id, since two daemons promoted by hand can both pick the same number), starting at the
/// sequence number of its `replication.term` record. Records before a daemon's first term are in
/// the implicit term 0 (id "") that every history starts with.
public struct TermHistory: Sendable, Equatable {
    public struct Term: Sendable, Equatable {
        public var term: UInt64
        public var id: String
        public var start: UInt64
        public var leader: String
        public init(term: UInt64, id: String, start: UInt64, leader: String) {
            self.term = term
            self.id = id
            self.start = start
            self.leader = leader
        }

        /// A `replication.term` record starting at `start`; nil unless its term is above 0, it has
        /// an id and a start.
        public init?(_ record: ReplicationTerm, start: UInt64) {
            guard record.term > 0, start > 0, !record.termId.isEmpty else { return nil }
            self.init(term: UInt64(record.term), id: record.termId, start: start, leader: record.leader)
        }
    }

    /// What a `replication.term` record needs.
    public static let recordNeeds = "replication.term needs a \"term\" above 0, a \"termId\" and a start"

    public private(set) var terms: [Term] = []

    public init() {}

    /// The term new records are written in (nil: the implicit term 0).
    public var current: Term? { terms.last }

    /// Adds a term that starts after the last; nil, or why it may not (a term that does not grow,
    /// or starts no later than the last). The same term again (by id) is no change.
    public mutating func add(_ term: Term) -> String? {
        if let last = terms.last {
            if last.id == term.id && last.term == term.term { return nil }
            guard term.term > last.term else {
                return "term \(term.term) (id \(term.id), leader \(term.leader)) does not follow term \(last.term) (id \(last.id), leader \(last.leader)): terms only grow"
            }
            guard term.start > last.start else {
                return "term \(term.term) starts at sequence \(term.start), not after term \(last.term)'s start \(last.start)"
            }
        }
        terms.append(term)
        return nil
    }

    public var marks: [TermMark] {
        terms.map { TermMark(term: Int(clamping: $0.term), termId: $0.id, sequence: Int(clamping: $0.start)) }
    }

    /// The last sequence number two histories share: a subscriber's (`marks`, records through
    /// `last`) and a leader's (through `leaderLast`). Terms are compared in order, by id and start;
    /// from the first that differs (or that only one side has), the records differ. Records before
    /// the first term are in term 0, whose id is the history's origin ("": not known, which
    /// matches any: data directories from before origins).
    public static func common(
        _ marks: [TermMark], last: UInt64, origin: String? = nil, leader: [TermMark], leaderLast: UInt64, leaderOrigin: String? = nil
    ) -> UInt64 {
        func withImplicit(_ marks: [TermMark], _ origin: String?) -> [TermMark] {
            guard let first = marks.first, first.sequence <= 1 else { return [TermMark(term: 0, termId: origin ?? "", sequence: 1)] + marks }
            return marks
        }
        func same(_ a: TermMark, _ b: TermMark) -> Bool {
            guard a.sequence == b.sequence else { return false }
            return a.termId == b.termId || (a.term == 0 && b.term == 0 && (a.termId.isEmpty || b.termId.isEmpty))
        }
        let mine = withImplicit(marks, origin)
        let theirs = withImplicit(leader, leaderOrigin)
        var shared = min(last, leaderLast)
        for index in 0..<max(mine.count, theirs.count) {
            let a = index < mine.count ? mine[index] : nil
            let b = index < theirs.count ? theirs[index] : nil
            if let a, let b, same(a, b) { continue }
            let start = min(a?.sequence ?? .max, b?.sequence ?? .max)
            shared = min(shared, UInt64(clamping: max(0, start - 1)))
            break
        }
        return shared
    }

    /// A new term id: 128 random bits as 32 hex digits.
    public static func newID() -> String {
        var generator = SystemRandomNumberGenerator()
        return [generator.next(), generator.next()].map { (word: UInt64) in
            let hex = String(word, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }.joined()
    }
}
