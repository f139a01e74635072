import RPCSchema

/// Where applied mutations go, in apply order (the journal). Called with the state lock held, so
/// the order it sees is the order the state saw.
public protocol MutationLog: AnyObject, Sendable {
    /// Refuses mutations (with the returned reason) while the log cannot take them, e.g. after a failed write.
    func refusal() -> String?
    /// Nil when the log takes `count` more mutations, whatever their size: a turn asks once for
    /// all its mutations (the log's lock is one the journal writer also takes), and when it is
    /// refused, asks `refusal()` before each one, as a lone mutation does.
    func refusal(records count: Int) -> String?
    /// Records one applied mutation (its record's bytes, encoded before the lock was taken);
    /// returns the ticket its reply must wait for (nil: durable now).
    func record(_ body: JournalRecord.Body) -> UInt64?
    /// Records a leader's mutation under the leader's sequence number `seq` (on a follower, whose
    /// journal stays byte-compatible with its leader's); returns the ticket, as `record` does.
    func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64?
    /// Records a run of a leader's journal lines as they came (sealed, each with its `\n`, numbered
    /// `first` through `last`, `first` following the last one recorded): a follower's journal
    /// holds its leader's bytes. Returns the ticket of the last, as `record` does.
    func recordSealed(_ lines: UnsafeRawBufferPointer, first: UInt64, last: UInt64) -> UInt64?
    /// Called once the state lock is released by a caller whose `record` returned a ticket: starts
    /// what `record` left for later (the journal's writer), so the lock is never held across a
    /// thread wake-up.
    func recorded()
    /// Calls `done` once `ticket` is durable (`nil`) or can never be (the reason). Any thread.
    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (_ failure: String?) -> Void)
    /// Why a mutation is refused now, as the error its caller gets (nil: taken).
    func refusalError() -> RPCError?
    /// Calls `done` once `ticket` may be acknowledged to its client (durable here, and wherever
    /// else the daemon's policy asks), or with the error the client gets instead. Any thread.
    func whenConfirmed(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void)
    /// The last ticket recorded, while it is not yet confirmed and reads must not be answered
    /// before it is (nil: a read may be answered now).
    func readFence() -> UInt64?
    /// Whether reads may have to wait at all (`readFence` is asked only then).
    var fencesReads: Bool { get }
    /// Why a read may be stale here now, as the error a connection that did not allow stale reads
    /// gets (nil: reads are answered).
    func readRefusal() -> RPCError?
}

extension MutationLog {
    /// A log whose refusal does not depend on how many mutations come.
    public func refusal(records count: Int) -> String? { refusal() }
    public func refusalError() -> RPCError? { refusal().map { .internal("mutations are refused: \($0)") } }
    /// A log whose reads need not wait.
    public func readFence() -> UInt64? { nil }
    public var fencesReads: Bool { false }
    public func readRefusal() -> RPCError? { nil }
    /// A log whose records are confirmed once durable.
    public func whenConfirmed(_ ticket: UInt64, _ done: @escaping @Sendable (RPCError?) -> Void) {
        whenDurable(ticket) { failure in done(failure.map(Self.notSaved)) }
    }
    /// What a mutation's client gets when its record could not be made durable.
    public static func notSaved(_ failure: String) -> RPCError {
        .internal("the change was applied but not saved: \(failure); it may be lost on restart")
    }
    /// A log that numbers records itself ignores the leader's number.
    public func record(_ body: JournalRecord.Body, at seq: UInt64) -> UInt64? { record(body) }
    /// A log without a faster way records each line's body under its number.
    public func recordSealed(_ lines: UnsafeRawBufferPointer, first: UInt64, last: UInt64) -> UInt64? {
        var seq = first
        var ticket: UInt64?
        _ = JournalReplay.forEachLine(lines) { line, _, _ in
            if let body = JournalRecord.Body(line: line, seq: seq) { ticket = record(body, at: seq) }
            seq &+= 1
            return nil
        }
        return ticket
    }
    /// A log with nothing to start after recording.
    public func recorded() {}
}
