import FuzzSupport
import RPCEntities
import RPCSchema

/// Fuzzes `Dispatcher` with a model check. The input is split at `\n` into lines, handed to one
/// dispatcher in order over one session (what one connection does). For each line:
/// - a counter-request (by the model below) gets no reply; any other line gets exactly one reply
///   line, valid JSON, itself a counter-request, whose id is the line's id when that was a string,
///   else "";
/// - a mutation that succeeded goes to the log, and a reply that waits for it names the line's id.
/// At the end the logged mutations, written as journal lines and replayed into an empty state,
/// give the dispatcher's state.
@main enum FuzzDispatcher {
    static func main() {
        FuzzMain.run { data, size in
            FuzzDispatcher.test(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
    }

    static func test(_ input: UnsafeRawBufferPointer) {
        let log = RecordingLog()
        let dispatcher = Dispatcher(log: log)
        var session = Dispatcher.Session()
        var out: [UInt8] = []
        var lines = input.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        for piece in lines {
            let line = UnsafeRawBufferPointer(rebasing: piece)
            let (isCounter, id) = expectation(line)
            let mark = out.count
            let logged = log.requests.count
            let disposition = dispatcher.handle(line: line, session: &session, into: &out)
            let reply = out[mark...]
            if isCounter {
                fuzzCheck(disposition == .none && reply.isEmpty, "a counter-request got \(disposition) and \(reply.count) bytes: \(text(line))")
                continue
            }
            fuzzCheck(disposition != .none, "no reply to \(text(line))")
            checkReply(Array(reply), id: id, request: line)
            switch disposition {
            case .replyAfter(let ticket, let replyID):
                fuzzCheck(replyID == id, "the reply waits under id \(replyID.debugDescription), not \(id.debugDescription)")
                // A keyed retry waits for its first attempt's ticket and logs nothing new.
                let retried = log.requests.count == logged && ticket >= 1 && ticket <= UInt64(logged) && hasKey(line)
                fuzzCheck(retried || (log.requests.count == logged + 1 && ticket == UInt64(log.requests.count)),
                    "ticket \(ticket) is not the one the log gave for \(text(line))")
            case .reply:
                fuzzCheck(log.requests.count == logged, "a mutation was logged but its reply does not wait for it: \(text(line))")
            case .none, .replyLater:
                break
            }
            out.removeAll(keepingCapacity: true)
        }
        checkJournal(log.requests, dispatcher)
    }

    /// Whether the line carries an idempotency key (a retry may be answered from an earlier attempt).
    static func hasKey(_ line: UnsafeRawBufferPointer) -> Bool {
        guard case .object(let object)? = try? JSONParser.parse(line), case .string? = object["key"] else { return false }
        return true
    }

    /// Whether the model calls `line` a counter-request, and the id its reply must carry.
    /// Counter-requests: `"method":"entity.nameResult"` or `"error.error"` (exactly one dot, a
    /// name on both sides), or the seed form `{"entity":{"_0":"nameResult"}}`.
    static func expectation(_ line: UnsafeRawBufferPointer) -> (counter: Bool, id: String) {
        guard case .object(let object)? = try? JSONParser.parse(line) else { return (false, "") }
        let id = object["id"]?.stringValue ?? ""
        return (isCounterRequest(object), id)
    }

    static func isCounterRequest(_ object: JSONObject) -> Bool {
        let entity: String
        let name: String
        switch object["method"] {
        case .string(let text)?:
            let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else { return false }
            entity = String(decoding: parts[0], as: UTF8.self)
            name = String(decoding: parts[1], as: UTF8.self)
        case .object(let seed)?:
            guard seed.count == 1, case .object(let payload) = seed.pairs[0].value, payload.count == 1,
                case .string(let text)? = payload["_0"], !seed.pairs[0].key.isEmpty, !text.isEmpty
            else { return false }
            entity = seed.pairs[0].key
            name = text
        default:
            return false
        }
        return name.hasSuffix("Result") || (entity == "error" && name == "error")
    }

    static func checkReply(_ reply: [UInt8], id: String, request: UnsafeRawBufferPointer) {
        fuzzCheck(reply.last == UInt8(ascii: "\n"), "the reply to \(text(request)) does not end a line")
        let body = reply.dropLast()
        fuzzCheck(!body.contains(UInt8(ascii: "\n")), "more than one reply line to \(text(request))")
        body.withUnsafeBytes { bytes in
            fuzzCheck(JSONCheck.isValid(bytes), "the reply \(text(bytes)) to \(text(request)) is not valid JSON")
            guard case .object(let object)? = try? JSONParser.parse(bytes) else {
                return fuzzCheck(false, "the reply \(text(bytes)) is not a JSON object to RPCSchema")
            }
            // Byte for byte: String's == would take "caf\u{e9}" and "cafe\u{301}" as one id.
            fuzzCheck(object["id"]?.stringValue.map { Array($0.utf8) } == Array(id.utf8), "the reply \(text(bytes)) to \(text(request)) does not carry id \(id.debugDescription)")
            fuzzCheck(isCounterRequest(object), "the reply \(text(bytes)) is not a counter-request")
        }
    }

    /// The logged mutations as journal lines, replayed into an empty state, give the dispatcher's state.
    static func checkJournal(_ requests: [JournalRecord.Body], _ dispatcher: Dispatcher) {
        var journal: [UInt8] = []
        for (index, request) in requests.enumerated() {
            JournalRecord.encode(request, seq: UInt64(index + 1), into: &journal)
        }
        var replay = JournalReplay()
        let result = journal.withUnsafeBytes { replay.replayJournal($0) }
        guard case .success(let outcome) = result else {
            return fuzzCheck(false, "the journal of applied mutations does not replay: \(result)\n\(String(decoding: journal, as: UTF8.self))")
        }
        fuzzCheck(outcome.applied == requests.count && outcome.tornBytes == 0, "replay applied \(outcome.applied) of \(requests.count) mutations")
        let replayed = replay.state
        dispatcher.withState { live in
            fuzzCheck(live.users.page(after: nil, limit: nil).records == replayed.users.page(after: nil, limit: nil).records,
                "users differ after replaying the journal\n\(String(decoding: journal, as: UTF8.self))")
            fuzzCheck(live.buildings.page(after: nil, limit: nil).records == replayed.buildings.page(after: nil, limit: nil).records,
                "buildings differ after replaying the journal\n\(String(decoding: journal, as: UTF8.self))")
        }
    }

    static func text(_ bytes: UnsafeRawBufferPointer) -> String {
        String(decoding: bytes.prefix(300), as: UTF8.self).debugDescription
    }
}

/// A journal stand-in: keeps each applied mutation; every one is durable at once.
final class RecordingLog: MutationLog, @unchecked Sendable {
    // @unchecked: used from the fuzzer's one thread only.
    private(set) var requests: [JournalRecord.Body] = []

    func refusal() -> String? { nil }

    func record(_ body: JournalRecord.Body) -> UInt64? {
        requests.append(body)
        return UInt64(requests.count)
    }

    func whenDurable(_ ticket: UInt64, _ done: @escaping @Sendable (_ failure: String?) -> Void) { done(nil) }
}
