/// A register's history, checked for linearizability: the Wing–Gong search with Lowe's memo of
/// (operations linearized, state) pairs, as Porcupine and Knossos do. Each operation took effect
/// at one instant between its call and its return; a write whose outcome is unknown (the client
/// gave up) returns at infinity and may or may not have taken effect.
struct RegisterHistory {
    enum Kind: Equatable {
        case write(String)
        case read(String?)
    }

    struct Operation {
        var kind: Kind
        var call: UInt64
        /// nil: the outcome is unknown (a write that may or may not have happened).
        var complete: UInt64?
    }

    var initial: String?
    var operations: [Operation] = []

    /// nil when linearizable, else the operations around where the search got stuck.
    func check() -> String? {
        let ops = operations
        guard !ops.isEmpty else { return nil }
        // Events: a call and a return per operation, in time order (calls before returns at a tie).
        struct Event {
            var op: Int
            var isCall: Bool
            var time: UInt64
        }
        var events: [Event] = []
        for (index, op) in ops.enumerated() {
            events.append(Event(op: index, isCall: true, time: op.call))
            events.append(Event(op: index, isCall: false, time: op.complete ?? .max))
        }
        events.sort { a, b in a.time != b.time ? a.time < b.time : (a.isCall && !b.isCall) }
        // A doubly linked list over the events, with a head sentinel at index `count`.
        let count = events.count
        var next = Array(1...count) + [0]
        var prev = [count] + Array(0..<(count - 1)) + [count - 1]
        next[count] = 0
        next[count - 1] = -1
        prev[0] = count
        var callIndex = [Int](repeating: 0, count: ops.count)
        var returnIndex = [Int](repeating: 0, count: ops.count)
        for (index, event) in events.enumerated() {
            if event.isCall { callIndex[event.op] = index } else { returnIndex[event.op] = index }
        }
        func unlink(_ i: Int) {
            let p = prev[i], n = next[i]
            next[p] = n
            if n >= 0 { prev[n] = p }
        }
        func relink(_ i: Int) {
            let p = prev[i], n = next[i]
            next[p] = i
            if n >= 0 { prev[n] = i }
        }
        struct Memo: Hashable {
            var done: [UInt64]
            var state: String?
        }
        var done = [UInt64](repeating: 0, count: (ops.count + 63) / 64)
        var cache = Set<Memo>()
        var state = initial
        var stack: [(op: Int, state: String?)] = []
        var entry = next[count]
        var steps = 0
        while entry >= 0 {
            steps += 1
            if steps > 50_000_000 { return "the search gave up after \(steps) steps (too many overlapping operations)" }
            let event = events[entry]
            if event.isCall {
                let op = ops[event.op]
                var newState = state
                let fits: Bool
                switch op.kind {
                case .write(let value):
                    newState = value
                    fits = true
                case .read(let value):
                    fits = value == state
                }
                var memo = done
                memo[event.op / 64] |= 1 << UInt64(event.op % 64)
                if fits, cache.insert(Memo(done: memo, state: newState)).inserted {
                    stack.append((event.op, state))
                    state = newState
                    done = memo
                    unlink(callIndex[event.op])
                    unlink(returnIndex[event.op])
                    entry = next[count]
                } else {
                    entry = next[entry]
                }
            } else {
                // Only operations of unknown outcome are left open: leaving them out fits.
                if event.time == .max { return nil }
                guard let (op, before) = stack.popLast() else {
                    let stuck = ops[event.op]
                    return "no order fits: \(stuck.kind) [\(stuck.call), \(stuck.complete.map(String.init) ?? "?")] cannot take effect before it returned"
                }
                state = before
                done[op / 64] &= ~(1 << UInt64(op % 64))
                relink(returnIndex[op])
                relink(callIndex[op])
                entry = next[callIndex[op]]
            }
        }
        return nil
    }
}
