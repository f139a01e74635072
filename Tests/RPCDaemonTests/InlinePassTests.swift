import Foundation
import RPCEntities
import RPCSchema
import Testing
@testable import RPCDaemon

/// A follower's pass that writes its own records (`Journal.beginInlinePass`/`endInlinePass`), on a
/// real journal file.
struct InlinePassTests {
    private func body(_ n: Int) -> JournalRecord.Body {
        JournalRecord.Body(Request(id: "c\(n)", method: CreateUser.method, param: ["id": .string("u\(n)"), "name": "N", "email": "e@x"]))
    }

    private func journal(_ path: String) throws -> Journal {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return try Journal(
            directory: DataDirectory(path: path), policy: .always, lastSeq: 0, snapshotBytes: 0, compactAfterBytes: 1 << 30, log: Logger(level: .error))
    }

    private func isDurable(_ journal: Journal, _ ticket: UInt64) -> Bool { journal.sequences.durable >= ticket }

    private func lineCount(_ path: String) -> Int {
        (FileManager.default.contents(atPath: path + "/journal.jsonl") ?? Data()).filter { $0 == UInt8(ascii: "\n") }.count
    }

    @Test("a pass that finds the writer idle writes and syncs its records itself: durable when its end returns, the writer never started")
    func passWritesItsOwn() throws {
        let path = NSTemporaryDirectory() + "rpcd-inline-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let journal = try journal(path)
        journal.beginInlinePass()
        var last: UInt64 = 0
        for n in 1...3 {
            last = try #require(journal.record(body(n)))
            journal.recorded()  // as the dispatcher does after each apply: left to the pass's end
        }
        #expect(!isDurable(journal, last))
        #expect(journal.endInlinePass(), "the pass did not write its records itself")
        #expect(isDurable(journal, last) && isDurable(journal, 1))
        #expect(lineCount(path) == 3)

        // Outside a pass, `recorded()` starts the writer as before.
        let next = try #require(journal.record(body(4)))
        journal.recorded()
        #expect(journal.waitDurable(next) == nil && lineCount(path) == 4)
        journal.close {}
    }

    @Test("a pass whose records find the writer busy leaves them to it: its end says so, and they become durable")
    func busyWriterKeepsThem() throws {
        let path = NSTemporaryDirectory() + "rpcd-inline-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let journal = try journal(path)
        // Hold the writer's queue, and a record that started the writer waits behind it.
        let hold = DispatchSemaphore(value: 0)
        journal.queue.async { hold.wait() }
        let first = try #require(journal.record(body(1)))
        journal.recorded()
        journal.beginInlinePass()
        let second = try #require(journal.record(body(2)))
        journal.recorded()
        #expect(!journal.endInlinePass(), "a pass wrote while the writer was running")
        hold.signal()
        #expect(journal.waitDurable(second) == nil && isDurable(journal, first))
        #expect(lineCount(path) == 2)
        journal.close {}
    }
}
