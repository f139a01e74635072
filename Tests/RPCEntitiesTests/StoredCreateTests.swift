import Testing
import RPCSchema
@testable import RPCEntities

/// A follower applies its leader's `user.createUser` records from the line's bytes
/// (`MethodTable.PlainStorer`): the user it stores is the one the handler makes, and a param the
/// rules refuse, or an id taken, goes the usual way and fails as it did.
@Suite struct StoredCreateTests {
    private static func line(_ seq: UInt64, id: String, name: String, email: String) -> [UInt8] {
        var out: [UInt8] = []
        let request = Request(id: "r\(seq)", method: CreateUser.method, param: ["id": .string(id), "name": .string(name), "email": .string(email)])
        JournalRecord.encode(JournalRecord.Body(request), seq: seq, into: &out)
        return out
    }

    /// Runs the create entry's storer on `line`'s plain param; nil when the param is not plain.
    private static func store(_ line: [UInt8], into state: inout Entities) -> Bool? {
        guard let storer = Entities.table.entry(for: CreateUser.method)?.storer else { return nil }
        return line.withUnsafeBytes { bytes -> Bool? in
            guard case .success(let decoded) = JournalRecord.replayFields(UnsafeRawBufferPointer(rebasing: bytes.dropLast())),
                let plain = decoded.plain
            else { return nil }
            return storer(&state, plain)
        }
    }

    @Test func theStoredUserIsTheOneTheHandlerMakes() throws {
        var state = Entities()
        #expect(Self.store(Self.line(1, id: "user-1", name: "Person 1", email: "p1@example.com"), into: &state) == true)
        #expect(state.users["user-1"] == User(id: "user-1", name: "Person 1", email: "p1@example.com"))
        #expect(state.users.page(after: nil, limit: 10).records.map(\.id) == ["user-1"], "the id is in the list order too")

        // While a copy of the state reads the shard (a snapshot being written), the value goes to
        // its overlay; the copy does not see it.
        let copy = state
        #expect(Self.store(Self.line(2, id: "user-2", name: "Person 2", email: "p2@example.com"), into: &state) == true)
        #expect(state.users["user-2"] == User(id: "user-2", name: "Person 2", email: "p2@example.com"))
        #expect(copy.users["user-2"] == nil && copy.users.count == 1)

        // Refused by a rule, or taken: not stored, the state as it was.
        for refused in [
            Self.line(3, id: "user-3", name: "Person 3", email: "no-at-sign"), Self.line(3, id: "user-3", name: "", email: "p3@x"),
            Self.line(3, id: "", name: "Person 3", email: "p3@x"), Self.line(3, id: "user-1", name: "Other", email: "o@x"),
        ] {
            #expect(Self.store(refused, into: &state) == false)
        }
        #expect(state.users.count == 2 && state.users["user-1"]?.name == "Person 1")
    }

    @Test func aFollowerSeesTheSameStateAndTheSameErrorsAsBefore() {
        let dispatcher = Dispatcher(state: Entities())
        var applier = JournalReplay()
        let lines = (1...50).flatMap { Self.line(UInt64($0), id: "user-\($0)", name: "Person \($0)", email: "person\($0)@example.com") }
        let run = lines.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 0, applier: &applier) }
        #expect(run.applied == 50 && run.failure == nil)
        let users = (1...50).map { User(id: "user-\($0)", name: "Person \($0)", email: "person\($0)@example.com") }
        #expect(dispatcher.withState { $0.users.page(after: nil, limit: 100).records } == users.sorted { Array($0.id.utf8).lexicographicallyPrecedes($1.id.utf8) })

        let taken = Self.line(51, id: "user-7", name: "Other", email: "o@example.com")
        let conflict = taken.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 50, applier: &applier) }
        #expect(conflict.failure == #"record 51 (user.createUser) does not apply here: user "user-7" exists already; pick another id or use user.updateUser"#, "\(conflict.failure ?? "no failure")")
        let noAt = Self.line(51, id: "user-51", name: "Person", email: "nowhere")
        let refused = noAt.withUnsafeBytes { dispatcher.applyReplicated(lines: $0, after: 50, applier: &applier) }
        #expect(refused.failure?.contains(#"email "nowhere" has no @"#) == true, "\(refused.failure ?? "no failure")")
        #expect(dispatcher.withState { $0.users.count } == 50)
    }
}
