import Dispatch
import Testing
import RPCSchema
import RPCEntities

/// A list after an insert must not re-sort every id (issue 10, item 9): at 50,000 users, 50
/// rounds of createUser + listUsers {limit:1} took seconds when each list sorted all ids (about
/// 0.1 s a round in a debug build), and take milliseconds with the ids kept in order. The bound
/// is generous both ways so load on the machine cannot flip the outcome.
@Suite struct ListAfterInsertTests {
    @Test func listsAfterInsertsDoNotSortEveryID() {
        let dispatcher = Dispatcher()
        var session = Dispatcher.Session()
        var out: [UInt8] = []
        func send(_ line: String) {
            out.removeAll(keepingCapacity: true)
            _ = Array(line.utf8).withUnsafeBytes { dispatcher.handle(line: $0, session: &session, into: &out) }
        }
        for n in 0..<50_000 {
            send(#"{"id":"c","method":"user.createUser","param":{"id":"u\#(n)","name":"N","email":"n@x"}}"#)
        }
        send(#"{"id":"l","method":"user.listUsers","param":{"limit":1}}"#)
        let start = DispatchTime.now().uptimeNanoseconds
        for round in 0..<50 {
            send(#"{"id":"c","method":"user.createUser","param":{"id":"fresh\#(round)","name":"N","email":"n@x"}}"#)
            send(#"{"id":"l","method":"user.listUsers","param":{"limit":1}}"#)
            #expect(String(decoding: out, as: UTF8.self).contains(#""users":[{"id":"fresh0""#))
        }
        let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
        #expect(seconds < 1.5, "50 rounds of create + list took \(seconds) s: each list re-sorts the ids")
    }
}
