import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Connection loss as the client reports it (`.notSent`, `.outcomeUnknown`) and hides it (a
/// `RetryPolicy`), and the first connect that waits for the daemon (issue 13).
@Suite("RPCClient retry and connection loss", .ownExecutor)
struct ClientRetryTests {
    static let retrying = RPCClientOptions(retry: RetryPolicy())

    @Test("a mutation in flight when the connection drops: .outcomeUnknown with its key; the next call .notSent at once")
    func outcomeUnknownThenNotSent() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let create = spawn { try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(60)) }
        let sent = try ClientKeyTests.request(try await offPool { try peer.readLine() })
        peer.closePeer()
        let result = await create.result
        guard case .failure(let error as RPCClientError) = result, case .outcomeUnknown(_, let method, let id, let key, _) = error else {
            Issue.record("expected .outcomeUnknown, got \(result)")
            return
        }
        #expect(method == CreateUser.method && id == sent.id)
        #expect(key != nil && key == sent.key && error.key == sent.key)
        #expect(error.description.contains("sending it again with key \"\(sent.key ?? "")\""), "\(error)")

        let started = Date()
        do {
            _ = try await client.call(GetUser(userId: "u1"), timeout: .seconds(60))
            Issue.record("expected .notSent")
        } catch let error as RPCClientError {
            guard case .notSent(_, let method, _, let reason) = error else {
                Issue.record("expected .notSent, got \(error)")
                return
            }
            #expect(method == GetUser.method && reason.hasPrefix("not connected: "), "\(reason)")
        }
        // At once, not after its timeout (the bound is loose: the whole suite shares two cores).
        #expect(Date().timeIntervalSince(started) < 20)
    }

    @Test("calls whose bytes never left when the connection drops are .notSent; the ones before them .outcomeUnknown")
    func unwrittenCallsAreNotSent() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port)
        defer { client.close() }
        try await offPool { try peer.accept() }
        // ~32 MiB of requests to a peer that reads none: the kernel's buffers take a few MiB, the
        // rest stays in the client's output buffer.
        let name = String(repeating: "n", count: 4000)
        let calls = (0..<8000).map { CreateUser(id: "u\($0)", name: name, email: "a@x") }
        let batch = spawn { await client.batch(calls, timeout: .seconds(30)) }
        _ = try await offPool { try peer.readLine(timeout: 20) }  // writing has begun
        try await Task.sleep(for: .milliseconds(300))  // the kernel's buffers fill
        peer.closePeer()  // unread data: the client sees a reset
        let results = await batch.value
        var kinds: [String] = []
        for result in results {
            switch result {
            case .failure(.outcomeUnknown(_, _, _, let key, _)) where key != nil: kinds.append("unknown")
            case .failure(.notSent): kinds.append("notSent")
            default: kinds.append("other: \(result)")
            }
        }
        let unknown = kinds.prefix { $0 == "unknown" }.count
        let notSent = kinds.dropFirst(unknown).prefix { $0 == "notSent" }.count
        #expect(unknown > 0 && notSent > 0, "\(unknown) outcomeUnknown, \(notSent) notSent; first: \(kinds.prefix(2))")
        // Written ones first, then never written ones: nothing else, in call order.
        #expect(unknown + notSent == calls.count, "\(kinds.filter { $0.hasPrefix("other") }.prefix(3))")
    }

    @Test("with a retry policy, calls in flight are sent again on the next connection: same ids, same keys, same order")
    func resentAfterDrop() async throws {
        let peer = try FakePeer()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: Self.retrying)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let batch = spawn {
            await client.batch(
                CreateUser(id: "u1", name: "Ada", email: "a@x"), GetUser(userId: "u1"), DeleteUser(userId: "u1"),
                timeout: .seconds(10))
        }
        let first = try await offPool { try (0..<3).map { _ in try peer.readLine() } }
        peer.closePeer()
        try await offPool { try peer.accept() }
        let second = try await offPool { try (0..<3).map { _ in try peer.readLine() } }
        #expect(second == first)
        let ids = try first.map { try ClientKeyTests.request($0).id }
        try peer.send(#"{"id":"\#(ids[0])","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"# + "\n")
        try peer.send(#"{"id":"\#(ids[1])","method":"user.getUserResult","param":{"id":"u1","name":"Ada","email":"a@x"}}"# + "\n")
        try peer.send(#"{"id":"\#(ids[2])","method":"user.deleteUserResult","param":{"deleted":"u1"}}"# + "\n")
        let (created, got, deleted) = await batch.value
        #expect(try created.get().id == "u1" && got.get().id == "u1" && deleted.get().deleted == "u1")
    }

    @Test("with a retry policy, an unkeyed mutation in flight is not sent again: .outcomeUnknown without a key")
    func unkeyedNotResent() async throws {
        let peer = try FakePeer()
        let options = RPCClientOptions(keyGenerator: nil, retry: RetryPolicy())
        let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: options)
        defer { client.close() }
        try await offPool { try peer.accept() }
        let delete = spawn { try await client.call(DeleteUser(userId: "u1"), timeout: .seconds(10)) }
        _ = try await offPool { try peer.readLine() }
        peer.closePeer()
        let result = await delete.result
        guard case .failure(RPCClientError.outcomeUnknown(_, _, _, nil, _)) = result else {
            Issue.record("expected .outcomeUnknown without a key, got \(result)")
            return
        }
    }

    @Test("a retried call that finds no daemon within its timeout: .outcomeUnknown if it was sent, .notSent if not")
    func retryWithinTheTimeout() async throws {
        let daemon = try DaemonProcess()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port, options: Self.retrying)
        defer { client.close() }
        try daemon.pause()
        // Long enough that the drop below always comes first, even under the thread sanitizer.
        let sent = spawn { try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(12)) }
        try await daemon.waitForUnreadRequest()
        daemon.stop()  // the create was written; no daemon comes back
        let hold = try PortHold(port: daemon.port)
        defer { withExtendedLifetime(hold) {} }
        try await Task.sleep(for: .milliseconds(100))
        let started = Date()
        let never = await spawn { try await client.call(GetUser(userId: "u1"), timeout: .milliseconds(500)) }.result
        let elapsed = Date().timeIntervalSince(started)
        #expect(elapsed > 0.4 && elapsed < 20, "\(elapsed) s")
        guard case .failure(RPCClientError.notSent(_, _, _, let why)) = never else {
            Issue.record("expected .notSent, got \(never)")
            return
        }
        #expect(why.contains("within its timeout of 0.5 s"), "\(why)")
        let first = await sent.result
        guard case .failure(RPCClientError.outcomeUnknown(_, _, _, let key?, let reason)) = first else {
            Issue.record("expected .outcomeUnknown with a key, got \(first)")
            return
        }
        #expect(!key.isEmpty && reason.contains("within its timeout of 12 s"), "\(reason)")
    }

    @Test("the first connect waits for a daemon that starts later (a reconnect or retry policy)")
    func firstConnectWaits() async throws {
        let port = try freeLoopbackPort()
        let started = Date()
        let connecting = spawn { try await RPCClient.connect(host: "127.0.0.1", port: port, options: Self.retrying) }
        try await Task.sleep(for: .milliseconds(600))
        let box = Locked<DaemonProcess?>(nil)
        try await offPool { try box.withLock { $0 = try DaemonProcess(listen: ["127.0.0.1:\(port)"]) } }
        let daemon = try #require(box.current)
        defer { daemon.stop() }
        let client = try await connecting.value
        defer { client.close() }
        #expect(Date().timeIntervalSince(started) >= 0.6)
        #expect(try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x")).id == "u1")
    }

    @Test("the first connect with a policy gives up after connectTimeout with .connectFailed; cancelling it stops it")
    func firstConnectGivesUp() async throws {
        let port = try freeLoopbackPort()
        // Timed on the suite's own executor (`.ownExecutor`): on the concurrency pool, the task
        // that gave up could wait many seconds to resume while other tests block the pool (95 s
        // under the thread sanitizer), and that wait is the harness's, not the client's.
        let options = RPCClientOptions(connectTimeout: .milliseconds(700), retry: RetryPolicy())
        let started = Date()
        do {
            _ = try await RPCClient.connect(host: "127.0.0.1", port: port, options: options)
            Issue.record("expected .connectFailed")
        } catch let error as RPCClientError {
            guard case .connectFailed(_, let reason) = error else {
                Issue.record("expected .connectFailed, got \(error)")
                return
            }
            #expect(reason.contains("tries in 0.7 s"), "\(reason)")
        }
        let elapsed = Date().timeIntervalSince(started)
        // Not the 60 s below; loose for a loaded machine.
        #expect(elapsed > 0.4 && elapsed < 30, "\(elapsed) s")

        let patient = RPCClientOptions(connectTimeout: .seconds(60), retry: RetryPolicy())
        let connecting = spawn { try await RPCClient.connect(host: "127.0.0.1", port: port, options: patient) }
        try await Task.sleep(for: .milliseconds(200))
        let cancelled = Date()
        connecting.cancel()
        await #expect(throws: RPCClientError.self) { try await connecting.value }
        let stopped = Date()
        #expect(stopped.timeIntervalSince(cancelled) < 30)
    }

    @Test("a create in flight to a daemon killed before it read it is sent again after the restart and succeeds")
    func createSurvivesKill() async throws {
        let daemons = try RestartableDaemon()
        let client = try await RPCClient.connect(host: "127.0.0.1", port: daemons.port, options: Self.retrying)
        defer { client.close() }
        _ = try await client.call(CreateUser(id: "u0", name: "Zed", email: "z@x"))
        try daemons.current.pause()  // written to the socket, never read
        let create = spawn { try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(20)) }
        let read = spawn { try await client.call(GetUser(userId: "u0"), timeout: .seconds(20)) }
        try await daemons.current.waitForUnreadRequest()
        try await Task.sleep(for: .milliseconds(200))
        try await offPool { try daemons.killAndRestart(after: 0.3) }
        #expect(try await create.value.id == "u1")
        #expect(try await read.value.name == "Zed")
        #expect(try await client.call(ListUsers()).map(\.id) == ["u0", "u1"])
    }

    @Test("reads from 4 tasks go on across 3 kill -9 and restarts: every read returns")
    func readsSurviveRestarts() async throws {
        let daemons = try RestartableDaemon()
        let setup = try await RPCClient.connect(host: "127.0.0.1", port: daemons.port)
        _ = await setup.batch((0..<10).map { CreateUser(id: "u\($0)", name: "N\($0)", email: "\($0)@x") })
        setup.close()
        let stop = Locked(false)
        let reads = Locked(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for task in 0..<4 {
                group.addTask {
                    let client = try await RPCClient.connect(host: "127.0.0.1", port: daemons.port, options: Self.retrying)
                    defer { client.close() }
                    var i = task
                    while !stop.current {
                        let (user, page) = await client.batch(GetUser(userId: "u\(i % 10)"), ListUsers(limit: 5), timeout: .seconds(20))
                        #expect(try user.get().name == "N\(i % 10)")
                        #expect(try page.get().count == 5)
                        reads.withLock { $0 += 2 }
                        i += 1
                    }
                }
            }
            group.addTask {
                for _ in 0..<3 {
                    try await Task.sleep(for: .milliseconds(300))
                    try await offPool { try daemons.killAndRestart() }
                }
                try await Task.sleep(for: .milliseconds(300))
                stop.withLock { $0 = true }
            }
            try await group.waitForAll()
        }
        #expect(reads.current > 20, "\(reads.current) reads")
    }

    @Test(
        "a keyed create applied but whose reply was lost with its connection: the retry gets the first result, not conflict")
    func appliedThenRetried() async throws {
        try await withDaemonAsync { daemon in
            // The client talks to a fake peer; the test carries its lines to the real daemon by hand.
            let peer = try FakePeer()
            let client = try await RPCClient.connect(host: "127.0.0.1", port: peer.port, options: Self.retrying)
            defer { client.close() }
            try await offPool { try peer.accept() }
            let create = spawn { try await client.call(CreateUser(id: "u1", name: "Ada", email: "a@x"), timeout: .seconds(10)) }
            let first = try await offPool { try peer.readLine() }
            let port = daemon.port
            let applied = try await offPool { () throws -> String? in
                let upstream = try LineClient(port: port)
                try upstream.sendLine(first)
                return try upstream.readLine()
            }
            #expect(applied?.contains("user.createUserResult") == true, "\(applied ?? "nil")")
            peer.closePeer()  // applied, but the reply is lost with the connection
            // The client reconnects after its policy's backoff; under a loaded suite that passed 5 s.
            try await offPool { try peer.accept(timeout: TestPace.seconds(30)) }
            let second = try await offPool { try peer.readLine() }
            #expect(second == first)
            let replayed = try await offPool { () throws -> String? in
                let upstream = try LineClient(port: port)
                try upstream.sendLine(second)
                return try upstream.readLine()
            }
            #expect(replayed == applied)
            try peer.send((replayed ?? "") + "\n")
            #expect(try await create.value == User(id: "u1", name: "Ada", email: "a@x"))
        }
    }
}

/// The real daemon on one fixed port and data directory, which the test kills (SIGKILL) and
/// starts again: clients reconnect to the same address and find the same data.
final class RestartableDaemon: @unchecked Sendable {
    // @unchecked: `daemons` is only touched under `lock`.
    let port: Int
    let dataDir: URL
    private let extraArguments: [String]
    private let lock = NSLock()
    /// Every daemon started, the current one last; the first owns (and removes) the data directory.
    private var daemons: [DaemonProcess]

    init(extraArguments: [String] = []) throws {
        port = try freeLoopbackPort()
        let first = try DaemonProcess(listen: ["127.0.0.1:\(port)"], extraArguments: extraArguments)
        dataDir = first.dataDir
        daemons = [first]
        self.extraArguments = extraArguments
    }

    var current: DaemonProcess { lock.withLock { daemons[daemons.count - 1] } }
    var restarts: Int { lock.withLock { daemons.count - 1 } }

    /// kill -9, wait `seconds`, start again on the same port and data directory. Blocking.
    func killAndRestart(after seconds: Double = 0) throws {
        let old = current
        old.stop()
        if seconds > 0 { usleep(UInt32(seconds * 1e6)) }
        let next = try DaemonProcess(listen: ["127.0.0.1:\(port)"], extraArguments: extraArguments, dataDir: dataDir)
        lock.withLock { daemons.append(next) }
    }

    deinit {
        for daemon in daemons.reversed() { daemon.stop() }
    }
}
