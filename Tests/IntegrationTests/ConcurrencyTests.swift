import Foundation
import Testing

@Suite("many clients")
struct ConcurrencyTests {
    @Test("200 concurrent connections each create 50 users; listUsers then returns all 10000, sorted")
    func twoHundredConnections() throws {
        try withDaemon { daemon in
            let port = daemon.port
            let connections = 200
            let perConnection = 50
            let failures = Locked<[String]>([])
            let connected = Locked(0)
            let finished = runOnThreads(connections, timeout: 120) { t in
                do {
                    let c = try LineClient(port: port, timeout: 30)
                    // Hold every connection open at once before anyone starts.
                    connected.withLock { $0 += 1 }
                    let watch = Stopwatch()
                    while connected.current < connections && watch.seconds < 20 { usleep(1_000) }
                    for i in 0..<perConnection {
                        let id = String(format: "c%03d-%02d", t, i)
                        let reply = try c.request(Wire.createUser(id, id, "N\(t)", "\(id)@example.com"))
                        if reply != Wire.createUserResult(id, id, "N\(t)", "\(id)@example.com") {
                            failures.withLock { $0.append("\(id): \(reply.prefix(200))") }
                        }
                    }
                } catch {
                    failures.withLock { $0.append("connection \(t): \(error)") }
                }
            }
            #expect(finished, "not all 200 client threads finished within 120 s")
            #expect(connected.current == connections)
            let failed = failures.current
            #expect(failed.isEmpty, "\(failed.count) failures, first: \(failed.prefix(3))")

            let c = try LineClient(port: port, timeout: 30)
            let reply = try Reply(try c.request(#"{"id":"all","method":"user.listUsers"}"#))
            let ids = try #require(reply.listIDs("users"), "\(reply.line.prefix(300))")
            #expect(ids.count == connections * perConnection)
            #expect(ids == ids.sorted(by: { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }), "listUsers must be sorted by id")
            #expect(Set(ids).count == ids.count, "duplicate ids in listUsers")
            #expect(!reply.hasNext)
        }
    }
}
