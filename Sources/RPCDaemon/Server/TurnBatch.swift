import RPCEntities
import RPCSchema
import RPCTransport

/// The requests a loop read in one pass over its ready peers, answered together when the pass
/// ends (`EventLoop.onTurnEnd`; sooner if the batch fills, and at once for lines delivered outside
/// a turn): their calls run under one hold of the dispatcher's state lock instead of one each,
/// the mutations among them wait for the journal with one waiter, and the replies leave in one
/// burst of sends, as Redis writes its clients' replies before it sleeps.
///
/// Per pass, not per peer read: answering each read at once paid the batch's fixed costs per
/// read and woke each peer per reply; a pass pays them once for all its ready peers.
///
/// Two loops taking the state lock per request met there about once per request under a write
/// load: a futex wait, a wake-up and two context switches each time, close to half the daemon's
/// CPU on two cores. A pass holds tens to hundreds of requests, so the lock changes hands that
/// many times less often.
///
/// Replies keep their order: a connection's replies are sent in the order its lines came, and
/// anything that answers at once (a service method, a bad line) first finishes the turn's batch.
/// Confined to its loop's queue.
final class TurnBatch: @unchecked Sendable {
    // @unchecked: touched only on the loop's queue; its fields are `Confined` for that reason.
    enum Kind {
        /// Runs in the batch; its reply is the next one `Dispatcher.run` writes.
        case call
        /// Answered when staged (an error): the bytes of `staged` in `range`.
        case answered(Dispatcher.Served, Range<Int>)
    }

    struct Entry {
        let connection: Connection
        let method: RPCMethod
        let id: String
        let form: WireForm
        let kind: Kind
    }

    /// The fields below, touched only on the owner's queue: see `Confined`.
    private struct Fields {
        var entries: [Entry] = []
        var calls: [Dispatcher.Call] = []
        var staged: [UInt8] = []
        var out: [UInt8] = []
        var outcomes: [(served: Dispatcher.Served, end: Int)] = []
        var deferring: [Connection] = []
        var held: HeldTurn = HeldTurn()
    }
    private let confined = Confined(Fields())

    private(set) var entries: [Entry] { _read { yield confined.value.entries } _modify { yield &confined.value.entries } }
    var calls: [Dispatcher.Call] { _read { yield confined.value.calls } _modify { yield &confined.value.calls } }
    /// Replies answered when staged.
    var staged: [UInt8] { _read { yield confined.value.staged } _modify { yield &confined.value.staged } }
    /// Replies written by `Dispatcher.run`, and where each ends (reused from turn to turn).
    var out: [UInt8] { _read { yield confined.value.out } _modify { yield &confined.value.out } }
    var outcomes: [(served: Dispatcher.Served, end: Int)] { _read { yield confined.value.outcomes } _modify { yield &confined.value.outcomes } }
    /// The connections told to expect deferred replies (`beginDeferredReplies`), once for each run
    /// of their lines among the entries.
    private var deferring: [Connection] { _read { yield confined.value.deferring } _modify { yield &confined.value.deferring } }
    /// Replies that wait for the journal, from this batch and the earlier ones of the loop's turn:
    /// the server releases them together when the turn's pass ends (`Server.releaseHeld`).
    var held: HeldTurn { _read { yield confined.value.held } _modify { yield &confined.value.held } }

    /// The most requests a batch gathers before it is run (the rest of the turn starts another).
    static let maxEntries = 512
    /// Reply bytes one hold of the lock writes before the replies are handed to their connections.
    static let maxReplyBytes = 1 << 20

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { entries.count >= Self.maxEntries }

    func add(_ entry: consuming Entry) {
        // A peer's lines come together (one read), so only the last peer is compared: a search
        // of the list cost a pass of hundreds of peers that many comparisons per request. A peer
        // that comes back later in the pass is told twice, and told twice at the reset (the
        // connection counts them).
        if deferring.last !== entry.connection {
            entry.connection.beginDeferredReplies()
            deferring.append(entry.connection)
        }
        entries.append(entry)
    }

    /// Empties the batch, calling `done` with each connection told to expect deferred replies.
    func reset(_ done: (Connection) -> Void) {
        for connection in deferring { done(connection) }
        entries.removeAllIfAny(keepingCapacity: entries.capacity <= Self.maxEntries * 2)
        calls.removeAllIfAny(keepingCapacity: calls.capacity <= Self.maxEntries * 2)
        staged.removeAllIfAny(keepingCapacity: staged.capacity <= Self.maxReplyBytes)
        out.removeAllIfAny(keepingCapacity: out.capacity <= 2 * Self.maxReplyBytes)
        outcomes.removeAllIfAny(keepingCapacity: true)
        deferring.removeAllIfAny(keepingCapacity: true)
    }
}

/// Replies that wait for the journal: in one buffer the items share (one allocation a batch,
/// where copying each reply out cost one a mutation), and the last ticket among them.
struct HeldTurn {
    var replies: [UInt8] = []
    var items: [HeldReply] = []
    var ticket: UInt64 = 0

    /// Holds `reply` for `connection` (reserving its place in the connection's reply order) until
    /// `ticket` is durable.
    mutating func hold(_ reply: UnsafeRawBufferPointer, for connection: Connection, id: String, form: WireForm, after ticket: UInt64) {
        let start = replies.count
        replies.append(contentsOf: reply)
        items.append(HeldReply(connection: connection, slot: connection.reserve(), reply: start..<replies.count, id: id, form: form))
        self.ticket = max(self.ticket, ticket)
    }
}

extension Array {
    /// `removeAll(keepingCapacity:)`, skipped when there is nothing to remove: the standard
    /// library's replaces the whole (empty) range all the same, ~90 instructions. A batch of one
    /// request emptied nine arrays a request that way, four of them empty as a rule.
    ///
    /// A few elements are taken off the end one at a time: `removeLast` is specialized for the
    /// element and moves it out in place, where `removeAll` goes through the generic
    /// `replaceSubrange`, ~200–500 instructions for a one-request batch's arrays of calls,
    /// entries and outcomes.
    @inline(__always)
    mutating func removeAllIfAny(keepingCapacity keep: Bool) {
        guard !isEmpty else { return }
        if keep && count <= 4 {
            repeat { removeLast() } while !isEmpty
        } else {
            removeAll(keepingCapacity: keep)
        }
    }
}
