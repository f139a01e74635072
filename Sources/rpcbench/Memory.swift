import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `--memory N`: what a record costs in memory. A spawned rpcd (`--fsync none`) takes N users of
/// the shape `{"id":"user-00000001","name":"Person 1","email":"person1@example.com"}`; a Redis
/// without persistence takes the same data as hashes (`HSET user:ID id … name … email …`, which
/// Redis keeps listpack-encoded). Each one's RSS growth over N is its bytes per record. With
/// `uuidIDs` the ids are UUIDs (`uuidID`).
func runMemory(records: Int, uuidIDs: Bool, binary: String) throws -> Never {
    func user(_ n: Int) -> (id: String, name: String, email: String) {
        (uuidIDs ? uuidID(n) : String(format: "user-%08d", n), "Person \(n)", "person\(n)@example.com")
    }
    func settledRSS(_ read: () -> Int) -> Int {
        Thread.sleep(forTimeInterval: 1)
        return read()
    }

    let daemon = try SpawnedDaemon(binary: binary, dataDir: freshDataDir(), extraArguments: ["--fsync", "none"])
    let before = settledRSS(daemon.rssKiB)
    let lines = (1...max(1, records)).map { n -> [UInt8] in
        let u = user(n)
        return Array(#"{"id":"c\#(n)","method":"user.createUser","param":{"id":"\#(u.id)","name":"\#(u.name)","email":"\#(u.email)"}}"#.utf8) + [0x0A]
    }
    var errors = try pipeline(host: "127.0.0.1", port: daemon.port, lines: lines)
    let after = settledRSS(daemon.rssKiB)
    daemon.kill()
    let rpcd = Double(after - before) * 1024 / Double(records)
    print("records            \(records) users {\"id\":\"\(user(1).id)\",\"name\":\"Person 1\",\"email\":\"person1@example.com\"}")
    print("rpcd RSS           \(before) KiB -> \(after) KiB: \(String(format: "%.0f", rpcd)) bytes a record")
    print("RESULT target=rpcd memory_records=\(records) rss_before_kib=\(before) rss_after_kib=\(after) bytes_per_record=\(Int(rpcd)) errors=\(errors)")

    guard let redisBinary = RedisServer.locate() else {
        print("redis-server is not on PATH: no comparison (apt-get install redis-server)")
        exit(errors == 0 ? 0 : 1)
    }
    let redis = try RedisServer(binary: redisBinary, durable: false)
    defer { redis.stop() }
    let redisBefore = settledRSS(redis.rssKiB)
    let commands = (1...max(1, records)).map { n -> [UInt8] in
        let u = user(n)
        let words = ["HSET", "user:\(u.id)", "id", u.id, "name", u.name, "email", u.email]
        var out = "*\(words.count)\r\n"
        for word in words { out += "$\(word.utf8.count)\r\n\(word)\r\n" }
        return Array(out.utf8)
    }
    errors += try pipeline(host: "127.0.0.1", port: redis.port, lines: commands)
    let redisAfter = settledRSS(redis.rssKiB)
    let perRedis = Double(redisAfter - redisBefore) * 1024 / Double(records)
    print("redis RSS          \(redisBefore) KiB -> \(redisAfter) KiB: \(String(format: "%.0f", perRedis)) bytes a record (hashes, listpack)")
    print("RESULT target=redis memory_records=\(records) rss_before_kib=\(redisBefore) rss_after_kib=\(redisAfter) bytes_per_record=\(Int(perRedis)) errors=\(errors)")
    print("RATIO rpcd/redis bytes_per_record=\(String(format: "%.2f", perRedis > 0 ? rpcd / perRedis : 0))")
    redis.stop()
    exit(errors == 0 ? 0 : 1)
}
