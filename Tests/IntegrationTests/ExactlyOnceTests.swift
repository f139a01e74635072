import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Idempotency keys: a keyed mutation is applied once, and every retry gets the first outcome.
@Suite("exactly once: idempotency keys")
struct ExactlyOnceTests {
    static func keyedCreate(_ rid: String, key: String, id: String = "k1", name: String = "Kay") -> String {
        #"{"id":"\#(rid)","method":"user.createUser","param":{"id":"\#(id)","name":"\#(name)","email":"k@example.com"},"key":"\#(key)"}"#
    }

    static func stats(_ port: Int) throws -> [String: Any] {
        let c = try LineClient(port: port)
        return try Reply(c.request(#"{"id":"s","method":"system.stats"}"#)).param ?? [:]
    }

    @Test("the same keyed create twice, on one connection and on another: applied once, both get the original result")
    func sameKeyTwice() throws {
        try withDaemon { daemon in
            let a = try LineClient(port: daemon.port)
            let first = try a.request(Self.keyedCreate("1", key: "order-1"))
            #expect(first == Wire.createUserResult("1", "k1", "Kay", "k@example.com"), "\(first)")
            #expect(try a.request(Self.keyedCreate("2", key: "order-1")) == Wire.createUserResult("2", "k1", "Kay", "k@example.com"))
            let b = try LineClient(port: daemon.port)
            #expect(try b.request(Self.keyedCreate("3", key: "order-1")) == Wire.createUserResult("3", "k1", "Kay", "k@example.com"))
            // Without a key the same create is a conflict: the key, not luck, made the retries succeed.
            expectError(try b.request(Wire.createUser("4", "k1", "Kay", "k@example.com")), code: "conflict", id: "4")
            let idempotency = try Self.stats(daemon.port)["idempotency"] as? [String: Any]
            #expect(idempotency?["hits"] as? Int == 2 && idempotency?["keys"] as? Int == 1, "\(String(describing: idempotency))")
        }
    }

    @Test("the same key with another param or method is keyReused; an error outcome is remembered too")
    func keyReused() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            _ = try c.request(Self.keyedCreate("1", key: "k"))
            let other = try c.request(Self.keyedCreate("2", key: "k", name: "Other"))
            #expect(expectError(other, code: "keyReused", id: "2")?.errorMessage?.contains("new key") == true, "\(other)")
            let otherMethod = try c.request(#"{"id":"3","method":"user.deleteUser","param":{"userId":"k1"},"key":"k"}"#)
            expectError(otherMethod, code: "keyReused", id: "3")
            // A keyed create that conflicts: its retry gets the same conflict, even after u1 is gone.
            _ = try c.request(Wire.createUser("4", "u1", "U", "u@example.com"))
            expectError(try c.request(Self.keyedCreate("5", key: "dup", id: "u1", name: "U")), code: "conflict", id: "5")
            _ = try c.request(#"{"id":"6","method":"user.deleteUser","param":{"userId":"u1"}}"#)
            expectError(try c.request(Self.keyedCreate("7", key: "dup", id: "u1", name: "U")), code: "conflict", id: "7")
            // Reads ignore keys? No: a key on a read is accepted and has no effect.
            #expect(try c.request(#"{"id":"8","method":"user.getUser","param":{"userId":"k1"},"key":"k"}"#).contains("getUserResult"))
        }
    }

    @Test("after a restart and after a compaction, a retry still gets the original result")
    func survivesRestartAndCompaction() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("rpcd-keys-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: dir) }
        var daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "4096"], dataDir: dir)
        var c = try LineClient(port: daemon.port)
        #expect(try c.request(Self.keyedCreate("1", key: "before-restart")) == Wire.createUserResult("1", "k1", "Kay", "k@example.com"))
        daemon.terminate()
        #expect(daemon.waitForExit(timeout: 10) == 0)

        daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "4096"], dataDir: dir)
        c = try LineClient(port: daemon.port)
        #expect(try c.request(Self.keyedCreate("2", key: "before-restart")) == Wire.createUserResult("2", "k1", "Kay", "k@example.com"),
            "the key was rebuilt from the journal")
        // Enough records to compact the journal into a snapshot.
        for i in 0..<60 { _ = try c.request(Wire.createUser("f\(i)", "filler\(i)", "Filler", "f@example.com")) }
        let snapshot = dir.appendingPathComponent("snapshot.jsonl").path
        let watch = Stopwatch()
        while !FileManager.default.fileExists(atPath: snapshot) && watch.seconds < 10 { usleep(50_000) }
        #expect(FileManager.default.fileExists(atPath: snapshot))
        daemon.terminate()
        #expect(daemon.waitForExit(timeout: 10) == 0)

        daemon = try DaemonProcess(extraArguments: ["--compact-after-bytes", "4096"], dataDir: dir)
        defer { daemon.stop() }
        c = try LineClient(port: daemon.port)
        #expect(try c.request(Self.keyedCreate("3", key: "before-restart")) == Wire.createUserResult("3", "k1", "Kay", "k@example.com"),
            "the key was rebuilt from the snapshot")
    }

    @Test("a retry that arrives while the first attempt waits for its fsync waits for the same outcome")
    func retryDuringFsync() throws {
        try withDaemon(environment: ["RPCD_TEST_FSYNC_DELAY_MS": "600"]) { daemon in
            let a = try LineClient(port: daemon.port)
            let b = try LineClient(port: daemon.port)
            try a.sendLine(Self.keyedCreate("a", key: "slow"))
            usleep(100_000)
            try b.sendLine(Self.keyedCreate("b", key: "slow"))
            // Neither is answered before the fsync covering the one application.
            #expect(b.isSilent(for: 0.2), "the retry was answered before the first attempt was durable")
            #expect(try a.expectLine() == Wire.createUserResult("a", "k1", "Kay", "k@example.com"))
            #expect(try b.expectLine() == Wire.createUserResult("b", "k1", "Kay", "k@example.com"))
        }
    }

    @Test("a key longer than 128 bytes, or not a string, is invalidRequest")
    func badKeys() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let long = String(repeating: "k", count: 129)
            expectError(try c.request(Self.keyedCreate("1", key: long)), code: "invalidRequest", id: "1")
            expectError(try c.request(#"{"id":"2","method":"user.deleteUser","param":{"userId":"x"},"key":7}"#), code: "invalidRequest", id: "2")
            #expect(try c.request(Self.keyedCreate("3", key: String(repeating: "k", count: 128))).contains("createUserResult"))
        }
    }

    @Test("the window is bounded by count and by age, oldest first; an evicted key runs again")
    func windowEviction() throws {
        try withDaemon(extraArguments: ["--idempotency-keys", "2", "--idempotency-window", "1s"]) { daemon in
            let c = try LineClient(port: daemon.port)
            for (i, key) in ["a", "b", "c"].enumerated() {
                #expect(try c.request(Self.keyedCreate("\(i)", key: key, id: "e\(i)")).contains("createUserResult"))
            }
            // "a" was the oldest of three with room for two: its retry runs again and conflicts.
            expectError(try c.request(Self.keyedCreate("3", key: "a", id: "e0")), code: "conflict", id: "3")
            #expect(try c.request(Self.keyedCreate("4", key: "c", id: "e2")).contains("createUserResult"))
            let counts = try Self.stats(daemon.port)["idempotency"] as? [String: Any]
            #expect((counts?["evictions"] as? Int ?? 0) >= 1, "\(String(describing: counts))")
            // Past the 1 s window, "c" is forgotten too.
            usleep(1_300_000)
            expectError(try c.request(Self.keyedCreate("5", key: "c", id: "e2")), code: "conflict", id: "5")
        }
    }
}
