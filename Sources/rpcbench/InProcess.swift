import Foundation
import RPCEntities
import RPCSchema

/// Runs `count` requests of the workload through a dispatcher on this thread: the daemon's
/// decode → dispatch → encode path without sockets, for profiling (stable under callgrind).
func runInProcess(count: Int, options: Options) -> Never {
    let dispatcher = Dispatcher()
    var session = Dispatcher.Session()
    var out: [UInt8] = []
    out.reserveCapacity(1 << 16)
    let factory = RPCDLoad(workload: options.workload, users: options.users, runTag: "inproc")
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
        line.withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
        if out.count > 60_000 {
            errors += out.withUnsafeBytes { countOccurrences(of: errorMarker, in: $0) }
            out.removeAll(keepingCapacity: true)
        }
    }
    let seconds = Double(nowNanoseconds() - start) / 1e9
    errors += out.withUnsafeBytes { countOccurrences(of: errorMarker, in: $0) }
    let perRequest = seconds / Double(count) * 1e9
    print("in-process  \(count) \(options.workload.rawValue) requests in \(String(format: "%.3f", seconds)) s")
    print("per request \(String(format: "%.0f", perRequest)) ns (\(Int(Double(count) / seconds)) requests/s on one core)")
    print("RESULT inprocess=\(count) workload=\(options.workload.rawValue) ns_per_request=\(Int(perRequest)) errors=\(errors)")
    exit(errors == 0 ? 0 : 1)
}

private let errorMarker = Array(#""method":"error.error""#.utf8)
