import Dispatch
import Foundation
import Testing
@testable import RPCTransport
#if canImport(Glibc)
import Glibc
#endif

#if canImport(Glibc)
/// A loop on a thread of its own (the daemon's loops): every turn runs on that thread, work
/// queued on the loop still runs, and a loop no one holds is freed with its thread.
extension ConnectionTests {
    /// Notes, for each line, the name of the thread that served it.
    final class ThreadNoting: ConnectionDelegate, @unchecked Sendable {
        // @unchecked: `threads` is guarded by `lock`.
        private let lock = NSLock()
        private var threads: [String] = []

        func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer) {
            let name = ConnectionTests.threadName("thread-self")
            lock.withLock { threads.append(name) }
        }
        func connection(_ connection: Connection, didReceiveOversizeLine length: Int) {}
        func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason) {}
        var all: [String] { lock.withLock { threads } }
    }

    /// A thread's name as the kernel reports it ("" if it is gone): `task` is "self/task/TID",
    /// or "thread-self" for the calling thread.
    static func threadName(_ task: String) -> String {
        let comm = (try? String(contentsOfFile: "/proc/\(task)/comm", encoding: .utf8)) ?? ""
        return comm.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// How many of this process's threads carry `name`.
    static func threads(named name: String) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { threadName("self/task/\($0)") == name }.count
    }

    @Test("a loop on its own thread serves every line on that thread, named after the loop, across 40 idle spells")
    func ownThreadServesEveryTurn() throws {
        let loop = try EventLoop(label: "own-serve", ownThread: true)
        let noting = ThreadNoting()
        // Each line after the loop went back to waiting: a turn each, begun by a wake-up.
        try writeLines(40, everyMicroseconds: 2_000, to: loop, noting) {
            try #require(within5s { noting.all.count == 40 }, "\(noting.all.count) of 40 lines within 5 s")
        }
        // With a Dispatch source instead, libdispatch's worker threads ("own-serve" is nobody's name).
        #expect(Set(noting.all) == ["own-serve"], "\(Set(noting.all))")
        #expect(Self.threads(named: "own-serve") == 1)
    }

    @Test("work queued on a loop that waits on its own thread runs, and runs on the loop's queue")
    func ownThreadRunsQueuedWork() throws {
        let loop = try EventLoop(label: "own-queue", ownThread: true)
        let ran = DispatchSemaphore(value: 0)
        loop.queue.async {
            loop.preconditionOnLoop()
            ran.signal()
        }
        #expect(ran.wait(timeout: .now() + 5) == .success, "queued work did not run within 5 s")
        let woken = DispatchSemaphore(value: 0)
        try loop.onWake { woken.signal() }
        loop.wake()
        #expect(woken.wait(timeout: .now() + 5) == .success, "a wake did not run its handler within 5 s")
    }

    @Test("a loop on its own thread that no one holds is freed, and its thread ends")
    func ownThreadEndsWithItsLoop() throws {
        weak var freed: EventLoop?
        do {
            let loop = try EventLoop(label: "own-freed", ownThread: true)
            freed = loop
            try #require(within5s { Self.threads(named: "own-freed") == 1 }, "no thread named after the loop")
            loop.queue.sync {}
        }
        // The thread lets go of the loop once its wait (at most a second) ends.
        #expect(within5s { freed == nil }, "the loop is still held 5 s after its last holder let go")
        #expect(within5s { Self.threads(named: "own-freed") == 0 }, "the loop's thread still runs")
    }
}
#endif
