import Foundation
import RPCEntities
import RPCSchema

/// Runs `count` requests of the workload through a dispatcher on this thread: the daemon's
/// decode → dispatch → encode path without sockets, for profiling (stable under callgrind).
/// With `--keys both`, once without and once with idempotency keys, and their ratio.
func runInProcess(count: Int, options: Options) -> Never {
    var results: [(keyed: Bool, nanoseconds: Double)] = []
    var errors = 0
    for keyed in options.keyed {
        let (perRequest, failed) = measureInProcess(count: count, keyed: keyed, options: options)
        results.append((keyed, perRequest))
        errors += failed
    }
    if results.count == 2 {
        let (plain, keyed) = (results[0].nanoseconds, results[1].nanoseconds)
        print("RATIO keyed/unkeyed = \(String(format: "%.2f", plain / keyed)) (\(Int(1e9 / keyed)) / \(Int(1e9 / plain)) requests/s on one core)")
    }
    exit(errors == 0 ? 0 : 1)
}

/// One in-process run; returns nanoseconds per request and the error replies.
private func measureInProcess(count: Int, keyed: Bool, options: Options) -> (Double, Int) {
    // A journal's work is part of a mutation's cost: each record is encoded as the daemon's
    // journal would, into memory.
    let dispatcher = Dispatcher(log: MemoryLog())
    var session = Dispatcher.Session()
    var out: [UInt8] = []
    out.reserveCapacity(1 << 16)
    var factory = RPCDLoad(workload: options.workload, users: options.users, runTag: "inproc")
    factory.keyed = keyed
    for line in createUsersLines(options.users, prefix: "bench-u") {
        line.dropLast().withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
    }
    // Pre-encode the requests so only the daemon's path is measured.
    let distinct = min(count, 4096)
    var lines: [[UInt8]] = []
    var createSeq = 0
    for seq in 0..<distinct {
        var line: [UInt8] = []
        factory.appendRequest(conn: 0, seq: seq, into: &line)
        lines.append(Array(line.dropLast()))
        createSeq = seq
    }
    var errors = 0
    var staged = StagedBatch()
    out.removeAll(keepingCapacity: true)
    let start = nowNanoseconds()
    for i in 0..<count {
        var line = lines[i % distinct]
        if options.workload != .get && i >= distinct {
            // Creates need fresh ids: re-encode with a new sequence number.
            createSeq += 1
            var fresh: [UInt8] = []
            factory.appendRequest(conn: 0, seq: createSeq, into: &fresh)
            line = Array(fresh.dropLast())
        }
        if let batch = options.batch {
            line.withUnsafeBytes { staged.stage($0, dispatcher: dispatcher, session: &session, into: &out) }
            if staged.calls.count >= batch { staged.run(dispatcher, into: &out) }
        } else {
            line.withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
        }
        if out.count > 60_000 {
            errors += out.withUnsafeBytes { countOccurrences(of: errorMarker, in: $0) }
            out.removeAll(keepingCapacity: true)
        }
    }
    staged.run(dispatcher, into: &out)
    let seconds = Double(nowNanoseconds() - start) / 1e9
    errors += out.withUnsafeBytes { countOccurrences(of: errorMarker, in: $0) }
    let perRequest = seconds / Double(count) * 1e9
    let keys = keyed ? " keys=yes" : ""
    let batched = options.batch.map { " in batches of \($0)" } ?? ""
    print("in-process  \(count) \(options.workload.rawValue) requests\(keyed ? " with keys" : "")\(batched) in \(String(format: "%.3f", seconds)) s")
    print("per request \(String(format: "%.0f", perRequest)) ns (\(Int(Double(count) / seconds)) requests/s on one core)")
    print("RESULT inprocess=\(count) workload=\(options.workload.rawValue)\(keys) ns_per_request=\(Int(perRequest)) errors=\(errors)")
    measureSnapshot(of: dispatcher)
    return (perRequest, errors)
}

/// Encodes the state as compaction does (in memory, no file): what a snapshot of these records
/// and remembered keys costs the core compaction runs on.
private func measureSnapshot(of dispatcher: Dispatcher) {
    let state = dispatcher.withState { $0 }
    var bytes = 0
    let start = nowNanoseconds()
    JournalSnapshot.encodeRecords(state) { bytes += $0.count }
    let nanoseconds = Double(nowNanoseconds() - start)
    let records = JournalSnapshot.recordCount(state)
    let lines = records + state.keys.count
    print("snapshot    \(records) records and \(state.keys.count) keys (\(bytes) bytes) encoded in \(String(format: "%.0f", nanoseconds / 1e6)) ms, \(String(format: "%.0f", nanoseconds / Double(max(lines, 1)))) ns a line")
}

/// Requests staged as the daemon stages one peer's read (decoded, checked and prepared outside
/// the state lock), then run together under one hold of it, in buffers kept from batch to batch.
private struct StagedBatch {
    var calls: [Dispatcher.Call] = []
    var answered: [UInt8] = []
    var outcomes: [(served: Dispatcher.Served, end: Int)] = []

    mutating func stage(_ line: UnsafeRawBufferPointer, dispatcher: Dispatcher, session: inout Dispatcher.Session, into out: inout [UInt8]) {
        answered.removeAll(keepingCapacity: true)
        switch dispatcher.admit(line, subscriber: false, session: &session, into: &answered, calls: &calls) {
        case .call:
            return
        case .answered:
            // Answered at once (an error): counted as a reply like any other.
            run(dispatcher, into: &out)
            out.append(contentsOf: answered)
        case .service(let request):
            run(dispatcher, into: &out)
            _ = dispatcher.serveService(request, session: &session, into: &out)
        case .acknowledged, .none:
            return
        }
    }

    mutating func run(_ dispatcher: Dispatcher, into out: inout [UInt8]) {
        guard !calls.isEmpty else { return }
        dispatcher.run(calls[...], into: &out, outcomes: &outcomes)
        calls.removeAll(keepingCapacity: true)
        outcomes.removeAll(keepingCapacity: true)
    }
}

/// A journal kept in memory: records are encoded and sealed as the daemon's are, then dropped
/// now and then (only the encoding is measured); every one is durable at once.
private final class MemoryLog: MutationLog, @unchecked Sendable {
    // @unchecked: used from the one measuring thread.
    private var bytes: [UInt8] = []
    private var seq: UInt64 = 0

    func refusal() -> String? { nil }

    func record(_ body: JournalRecord.Body) -> UInt64? {
        seq += 1
        JournalRecord.encode(body, seq: seq, into: &bytes)
        if bytes.count > 1 << 20 { bytes.removeAll(keepingCapacity: true) }
        return nil
    }

    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (String?) -> Void) { done(nil) }
}

private let errorMarker = Array(#""method":"error.error""#.utf8)
