import Foundation
import RPCEntities
import RPCSchema

/// `--list-after-insert N`: no sockets. Creates N users through a dispatcher, then times rounds of
/// one `user.createUser` followed by one `user.listUsers {"limit":1}`: the pattern that stalled
/// every client while each list after an insert re-sorted all ids under the state lock.
func runListAfterInsert(users: Int) -> Never {
    let dispatcher = Dispatcher()
    var session = Dispatcher.Session()
    var out: [UInt8] = []
    for line in createUsersLines(users, prefix: "bench-u") {
        line.dropLast().withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
        out.removeAll(keepingCapacity: true)
    }
    let list = Array(#"{"id":"l","method":"user.listUsers","param":{"limit":1}}"#.utf8)
    // One list first, so a lazily built order is in place before the timed rounds.
    list.withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
    var createNanos: UInt64 = 0
    var listNanos: UInt64 = 0
    var worstList: UInt64 = 0
    var rounds = 0
    let start = nowNanoseconds()
    // Up to 200 rounds or 20 s, whichever comes first.
    while rounds < 200 && nowNanoseconds() - start < 20_000_000_000 {
        let create = Array(#"{"id":"c","method":"user.createUser","param":{"id":"fresh-\#(rounds)","name":"N","email":"n@x"}}"#.utf8)
        out.removeAll(keepingCapacity: true)
        let t0 = nowNanoseconds()
        create.withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
        let t1 = nowNanoseconds()
        list.withUnsafeBytes { _ = dispatcher.handle(line: $0, session: &session, into: &out) }
        let t2 = nowNanoseconds()
        guard !out.withUnsafeBytes({ countOccurrences(of: Array(#""method":"error.error""#.utf8), in: $0) > 0 }) else {
            fail("round \(rounds) failed: \(String(decoding: out, as: UTF8.self))")
        }
        createNanos += t1 - t0
        listNanos += t2 - t1
        worstList = max(worstList, t2 - t1)
        rounds += 1
    }
    func ms(_ nanos: UInt64) -> String { String(format: "%.3f", Double(nanos) / 1e6) }
    print("list-after-insert  \(users) users, \(rounds) rounds of createUser + listUsers {limit:1}")
    print("per createUser \(ms(createNanos / UInt64(rounds))) ms, per listUsers \(ms(listNanos / UInt64(rounds))) ms (worst \(ms(worstList)) ms)")
    print("RESULT list_after_insert=\(users) rounds=\(rounds) create_ms=\(ms(createNanos / UInt64(rounds))) list_ms=\(ms(listNanos / UInt64(rounds))) list_worst_ms=\(ms(worstList))")
    exit(0)
}
