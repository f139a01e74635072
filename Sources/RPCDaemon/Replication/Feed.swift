import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// The change feed of `replication.subscribe`: every durable journal batch, kept in memory for a
/// while and handed to each subscriber's connection as its output drains. A subscriber that falls
/// behind what memory keeps is fed from the journal files (on a queue of their own: reads can wait
/// for the disk), the journal a compaction replaced included (`journal.prev.jsonl`, where a daemon
/// may also start); one whose next record is in no file but the snapshot is disconnected with a
/// logged reason (it subscribes again, with a snapshot).
///
/// Bounded: memory keeps `maxMemoryBytes` of batches for everyone, and only while a subscriber is
/// attached or left less than `backlogSeconds` ago (a leader nobody follows keeps none, as Redis
/// allocates its backlog with the first replica; a follower that reconnects later reads the
/// files); each subscriber has at most
/// its window of output queued (1 MiB), and there are at most `maxSubscribers`. A slow subscriber costs only its own window: clients and other
/// subscribers never wait for it.
final class ReplicationFeed: @unchecked Sendable {
    // @unchecked: every `var` is guarded by `lock`; the rest is immutable.
    struct Batch {
        var first: UInt64
        var last: UInt64
        var bytes: [UInt8]
    }

    let files: DataFiles
    let maxLineBytes: Int
    let maxMemoryBytes: Int
    let log: Logger
    /// Reads journal and snapshot files for subscribers that are behind.
    let fileQueue = DispatchQueue(label: "rpcd.replication.files", qos: .utility)

    private let lock = NSLock()
    private var batches: [Batch] = []
    private var head = 0
    private var memoryBytes = 0
    private var durable: UInt64
    private var snapshotSeq: UInt64
    /// Records after this one are in the journal files: the snapshot's sequence number, or the one
    /// before the journal a compaction kept.
    private var filesFrom: UInt64
    /// Journal bytes and records published since the start (for the average line size).
    private var publishedBytes: UInt64 = 0
    private var publishedRecords: UInt64 = 0
    private var subscribers: [ObjectIdentifier: Subscriber] = [:]
    /// When the last subscriber left (`DispatchTime` nanoseconds): nil while one is attached, 0
    /// when none ever was.
    private var lastLeft: UInt64? = 0
    static var backlogSeconds: UInt64 { 60 }
    /// Batches are kept with no subscriber too (tests of the memory bound); set before use.
    var keepsBacklogAlways = false

    init(files: DataFiles, durable: UInt64, snapshotSeq: UInt64, maxLineBytes: Int, maxMemoryBytes: Int = 16 << 20, log: Logger) {
        self.files = files
        self.durable = durable
        self.snapshotSeq = snapshotSeq
        self.filesFrom = snapshotSeq
        self.maxLineBytes = maxLineBytes
        self.maxMemoryBytes = maxMemoryBytes
        self.log = log
    }

    // MARK: - From the journal (its writer queue, one batch at a time, in order)

    /// A batch of journal lines (records up to `lastSeq`) is durable.
    func published(_ bytes: [UInt8], lastSeq: UInt64) {
        let waiting: [Subscriber] = lock.withLock {
            guard lastSeq > durable else { return [] }
            publishedBytes &+= UInt64(bytes.count)
            publishedRecords &+= lastSeq - durable
            guard keepsBacklog else {
                durable = lastSeq
                if !batches.isEmpty { (batches, head, memoryBytes) = ([], 0, 0) }
                return []
            }
            batches.append(Batch(first: durable + 1, last: lastSeq, bytes: bytes))
            memoryBytes += bytes.count
            durable = lastSeq
            while memoryBytes > maxMemoryBytes, head < batches.count - 1 {
                memoryBytes -= batches[head].bytes.count
                batches[head].bytes = []
                head += 1
            }
            if head > 64 && head * 2 > batches.count {
                batches.removeFirst(head)
                head = 0
            }
            return subscribers.values.filter { $0.wantsWake() }
        }
        for subscriber in waiting { subscriber.wake() }
    }

    /// Whether published batches are kept (under `lock`): a subscriber is attached, or one left
    /// less than `backlogSeconds` ago.
    private var keepsBacklog: Bool {
        guard let left = lastLeft, !keepsBacklogAlways else { return true }
        guard left > 0 else { return false }
        return DispatchTime.now().uptimeNanoseconds &- left < Self.backlogSeconds * 1_000_000_000
    }

    /// A follower replaced its state with its leader's snapshot at `seq`: what memory held is
    /// from before; subscribers that are behind it need that snapshot (they are disconnected when
    /// they next read, and subscribe again).
    func restarted(at seq: UInt64) {
        lock.withLock {
            batches = []
            head = 0
            memoryBytes = 0
            durable = seq
            snapshotSeq = seq
            filesFrom = seq
        }
    }

    /// The snapshot moved on to `seq` (a compaction), and the journal it replaced stayed or not.
    /// That journal began right after the snapshot before (each compaction restarts it there), so
    /// the records after that snapshot are still in files.
    func compacted(at seq: UInt64, keptJournal kept: Bool) {
        lock.withLock {
            filesFrom = max(filesFrom, kept ? snapshotSeq : seq)
            snapshotSeq = max(snapshotSeq, seq)
        }
    }

    /// The journal the last compaction kept is going (a compaction starts), or is damaged
    /// (`why`, logged): subscribers from before the snapshot get the snapshot until the next
    /// compaction keeps another one.
    func stopReadingKeptJournal(because why: String?) {
        let dropped: Bool = lock.withLock {
            guard filesFrom < snapshotSeq else { return false }
            filesFrom = snapshotSeq
            return true
        }
        if dropped, let why {
            log.warning("replication: not reading the journal kept from before the last compaction any more: \(why); subscribers behind the snapshot get the snapshot")
        }
    }

    // MARK: - For subscribers

    /// The last durable sequence number, the snapshot's, and the last one no journal file holds
    /// (a subscriber from before it needs the snapshot).
    var sequences: (durable: UInt64, snapshot: UInt64, filesFrom: UInt64) { lock.withLock { (durable, snapshotSeq, filesFrom) } }

    enum Chunk {
        /// Lines from the asked-for record through `last`.
        case lines(ArraySlice<UInt8>, last: UInt64)
        /// Nothing after it is durable yet.
        case upToDate
        /// Memory no longer holds it: read the files.
        case notInMemory
    }

    /// Lines from record `from` on, about `maxBytes` of them (at least one line, whole lines).
    func chunk(from: UInt64, maxBytes: Int) -> Chunk {
        lock.withLock {
            guard from <= durable else { return .upToDate }
            guard head < batches.count, batches[head].first <= from else { return .notInMemory }
            // Usually the newest batches: search from the end.
            var index = batches.count - 1
            while batches[index].first > from { index -= 1 }
            let batch = batches[index]
            let bytes = batch.bytes
            // Lines are found with memchr, and not at all when the rest of the batch fits: a
            // subscriber that keeps up takes whole batches, every record of them once per subscriber.
            var start = 0
            var skip = from - batch.first
            while skip > 0, let newline = bytes.withUnsafeBytes({ JournalReplay.newline(in: $0, from: start) }) {
                start = newline + 1
                skip -= 1
            }
            if bytes.count - start <= maxBytes, skip == 0 {
                return start < bytes.count ? .lines(bytes[start...], last: batch.last) : .notInMemory
            }
            var end = start
            var last = from - 1
            while end < bytes.count, last < batch.last {
                guard let newline = bytes.withUnsafeBytes({ JournalReplay.newline(in: $0, from: end) }) else { break }
                end = newline + 1
                last += 1
                if end - start >= maxBytes { break }
            }
            guard last >= from else { return .notInMemory }
            return .lines(bytes[start..<end], last: last)
        }
    }

    /// Subscribers at once: each may hold its window of output (`Subscriber.maxWindow`), so the
    /// feed's output is bounded in total too.
    static let maxSubscribers = 128

    var subscriberCount: Int { lock.withLock { subscribers.count } }

    /// The sync set of `min_sync_replicas` (leaders only); set before serving.
    var syncGate: SyncGate?

    func add(_ subscriber: Subscriber) {
        let durable = lock.withLock {
            subscribers[ObjectIdentifier(subscriber)] = subscriber
            lastLeft = nil
            return self.durable
        }
        if subscriber.replica {
            syncGate?.join(ObjectIdentifier(subscriber), peer: subscriber.member ?? subscriber.peer, after: subscriber.figures.sent, durable: durable)
        }
    }

    func remove(_ subscriber: Subscriber) {
        lock.withLock {
            subscribers[ObjectIdentifier(subscriber)] = nil
            if subscribers.isEmpty { lastLeft = max(1, DispatchTime.now().uptimeNanoseconds) }
        }
        syncGate?.leave(ObjectIdentifier(subscriber))
    }

    /// A subscriber acknowledged records through `seq`.
    func acknowledged(_ subscriber: Subscriber, _ seq: UInt64) {
        guard subscriber.replica, let syncGate else { return }
        syncGate.acknowledged(ObjectIdentifier(subscriber), seq)
    }

    private static func product(_ a: UInt64, _ b: UInt64) -> UInt64 {
        let (value, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? .max : value
    }

    /// The feed's figures for `system.stats`.
    func stats() -> [SubscriberStats] {
        lock.withLock {
            let average = publishedRecords > 0 ? publishedBytes / publishedRecords : 0
            return subscribers.values.map { subscriber in
                let figures = subscriber.figures
                let reached = figures.acked > 0 ? figures.acked : figures.sent
                let behind = durable > reached ? durable - reached : 0
                var stats = SubscriberStats(
                    peer: subscriber.peer, sentSequence: Int(clamping: figures.sent), ackedSequence: Int(clamping: figures.acked),
                    lagRecords: Int(clamping: behind), lagBytes: Int(clamping: Self.product(behind, average)))
                if let syncGate, subscriber.replica { stats.inSync = syncGate.isInSync(ObjectIdentifier(subscriber)) }
                return stats
            }
            .sorted { $0.peer < $1.peer }
        }
    }
}
