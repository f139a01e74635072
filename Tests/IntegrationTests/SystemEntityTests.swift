import Foundation
import RPCEntities
import RPCSchema
import Testing

/// The `system` entity over the real socket.
struct SystemEntityTests {
    @Test func pingAnswersVersionAndUptime() throws {
        try withDaemon { daemon in
            let client = try LineClient(port: daemon.port)
            let reply = try Reply(client.request(#"{"id":"p","method":"system.ping","param":{}}"#))
            #expect(reply.method == "system.pingResult" && reply.id == "p", "\(reply.line)")
            #expect(reply.param?["version"] is String)
            #expect((reply.param?["uptimeSeconds"] as? Double).map { $0 >= 0 } == true, "\(reply.line)")
            expectError(try client.request(#"{"id":"x","method":"system.ping","param":{"a":1}}"#), code: "invalidParams", id: "x")
            expectError(try client.request(#"{"id":"y","method":"system.nope"}"#), code: "methodNotFound", id: "y")
        }
    }

    /// `system.describe` lists exactly what the dispatcher's table accepts (plus the system methods).
    @Test func describeEqualsTheDispatcherTable() throws {
        try withDaemon { daemon in
            let client = try LineClient(port: daemon.port)
            let reply = try Reply(client.request(#"{"id":"d","method":"system.describe"}"#))
            #expect(reply.method == "system.describeResult", "\(reply.line)")
            let entities = try #require(reply.param?["entities"] as? [[String: Any]])
            var described: [String: [RPCField]] = [:]
            var mutations: [String: Bool] = [:]
            for entity in entities {
                let name = try #require(entity["name"] as? String)
                for method in try #require(entity["methods"] as? [[String: Any]]) {
                    let key = "\(name).\(try #require(method["name"] as? String))"
                    described[key] = try #require(method["params"] as? [[String: Any]]).map {
                        RPCField(name: $0["name"] as? String ?? "?", type: $0["type"] as? String ?? "?", optional: $0["optional"] as? Bool ?? false)
                    }
                    mutations[key] = method["mutation"] as? Bool
                }
            }
            var expected: [String: [RPCField]] = [:]
            for entry in Dispatcher().table.entries { expected[entry.method.description] = entry.fields }
            for call in [SystemPing.self, SystemDescribe.self, SystemStats.self] as [any RPCCall.Type] {
                expected[call.method.description] = call.fields
            }
            #expect(described == expected)
            #expect(mutations["user.createUser"] == true && mutations["user.getUser"] == false)
            // Every described method is accepted (no methodNotFound).
            for method in described.keys.sorted() where !method.hasPrefix("system.") {
                let answer = try Reply(client.request(#"{"id":"m","method":"\#(method)","param":{}}"#))
                #expect(answer.errorCode != "methodNotFound", "\(method): \(answer.line)")
            }
        }
    }

    @Test func statsCountWhatWasSent() throws {
        try withDaemon { daemon in
            let first = try LineClient(port: daemon.port)
            var sent = 0
            for i in 0..<5 {
                let line = Wire.createUser("c\(i)", "u\(i)", "N", "n@example.com")
                sent += line.utf8.count + 1
                #expect(try Reply(first.request(line)).method == "user.createUserResult")
            }
            for i in 0..<3 {
                let line = Wire.getUser("g\(i)", "nobody")
                sent += line.utf8.count + 1
                expectError(try first.request(line), code: "notFound")
            }
            sent += 9
            expectError(try first.request("not json"), code: "parseError")
            first.close()

            let second = try LineClient(port: daemon.port)
            _ = try second.request(#"{"id":"p","method":"system.ping"}"#)
            let reply = try Reply(second.request(#"{"id":"s","method":"system.stats"}"#))
            #expect(reply.method == "system.statsResult", "\(reply.line)")
            let stats = try #require(reply.param)
            let methods = Dictionary(
                uniqueKeysWithValues: (stats["methods"] as? [[String: Any]] ?? []).map {
                    ($0["method"] as? String ?? "?", ($0["requests"] as? Int ?? -1, $0["errors"] as? Int ?? -1))
                })
            #expect(methods["user.createUser"]?.0 == 5 && methods["user.createUser"]?.1 == 0, "\(reply.line)")
            #expect(methods["user.getUser"]?.0 == 3 && methods["user.getUser"]?.1 == 3, "\(reply.line)")
            #expect(methods["(invalid)"]?.0 == 1 && methods["(invalid)"]?.1 == 1, "\(reply.line)")
            #expect(methods["system.ping"]?.0 == 1, "\(reply.line)")
            #expect(methods["system.stats"]?.0 == 1, "\(reply.line)")
            #expect(stats["requests"] as? Int == 11 && stats["errors"] as? Int == 4, "\(reply.line)")
            let connections = try #require(stats["connections"] as? [String: Any])
            #expect(connections["total"] as? Int == 2 && connections["current"] as? Int == 1, "\(reply.line)")
            #expect((stats["bytesIn"] as? Int ?? 0) >= sent, "\(reply.line)")
            #expect((stats["bytesOut"] as? Int ?? 0) > 0, "\(reply.line)")
            let journal = try #require(stats["journal"] as? [String: Any])
            #expect(journal["lastFsyncMicroseconds"] is Int, "\(reply.line)")
            // One create at a time, each answered after its fsync (`--fsync always`): five batches
            // of one record, an fsync each.
            #expect(journal["batches"] as? Int == 5 && journal["records"] as? Int == 5, "\(reply.line)")
            #expect(journal["fsyncs"] as? Int == 5, "\(reply.line)")
            // Five journaled creates, one line each of at least the request's length.
            let journalBytes = journal["bytes"] as? Int ?? 0
            let onDisk = (try? FileManager.default.attributesOfItem(atPath: daemon.dataDir.appendingPathComponent("journal.jsonl").path)[.size] as? Int) ?? -1
            #expect(journalBytes > 5 * 60 && journalBytes == onDisk, "stats say \(journalBytes) bytes, the file has \(onDisk): \(reply.line)")
            #expect(stats["uptimeSeconds"] is Double)
            // No compaction ran, so no copy of the state reads a shard: the five creates went into
            // the shards. A copy of the recovered state left alive at startup (serve's own, until
            // `consume`) made every write an overlay entry, for good.
            let state = try #require(stats["state"] as? [String: Any])
            #expect(state["users"] as? Int == 5 && state["buildings"] as? Int == 0, "\(reply.line)")
            #expect(state["overlaid"] as? Int == 0, "\(reply.line)")
        }
    }

    /// `loops`: one entry per event loop, in order, each with the turns that served its
    /// connections; a loop's serving and lingering time fit in the daemon's uptime.
    @Test func statsTellEachLoopsTime() throws {
        try withDaemon(extraArguments: ["--event-loops", "2"]) { daemon in
            // Connections go to the loops in turn: one each.
            let clients = try (0..<2).map { _ in try LineClient(port: daemon.port) }
            for (n, client) in clients.enumerated() {
                for i in 0..<20 { _ = try client.request(Wire.getUser("g\(n)-\(i)", "nobody")) }
            }
            let reply = try Reply(clients[0].request(#"{"id":"s","method":"system.stats"}"#))
            let stats = try #require(reply.param)
            let uptime = try #require(stats["uptimeSeconds"] as? Double)
            let loops = try #require(stats["loops"] as? [[String: Any]], "\(reply.line)")
            #expect(loops.count == 2, "\(reply.line)")
            for loop in loops {
                let turns = loop["turns"] as? Int ?? -1
                let serving = loop["servingSeconds"] as? Double ?? -1
                let lingering = loop["lingeringSeconds"] as? Double ?? -1
                #expect(turns >= 1, "each loop served 20 requests: \(reply.line)")
                #expect(serving > 0 && lingering >= 0, "\(reply.line)")
                #expect(serving + lingering <= uptime + 0.01, "a loop's time past the uptime: \(reply.line)")
                let polling = loop["pollingSeconds"] as? Double ?? -1
                #expect(polling >= 0 && polling <= lingering + 1e-6, "polling is part of lingering: \(reply.line)")
            }
            for client in clients { client.close() }
        }
    }

    /// `busy_poll`: a loop whose peer sends one request at a time, and so waits most of each turn,
    /// polls for the next request before it sleeps (`pollingSeconds` grows); with `--busy-poll 0`
    /// it never polls. A peer that waits ~1 ms between requests makes every turn mostly waiting.
    @Test(arguments: [(["--busy-poll", "200us"], true), (["--busy-poll", "0"], false)])
    func waitingLoopPollsBeforeSleeping(_ arguments: [String], polls: Bool) throws {
        try withDaemon(extraArguments: arguments) { daemon in
            let client = try LineClient(port: daemon.port)
            for i in 0..<100 {
                _ = try client.request(Wire.getUser("p\(i)", "nobody"))
                usleep(1_000)
            }
            let reply = try Reply(client.request(#"{"id":"s","method":"system.stats"}"#))
            let loop = try #require((reply.param?["loops"] as? [[String: Any]])?.first, "\(reply.line)")
            let polling = try #require(loop["pollingSeconds"] as? Double, "\(reply.line)")
            let lingering = try #require(loop["lingeringSeconds"] as? Double, "\(reply.line)")
            if polls {
                // At least ~100 polls of up to 200 µs, each ended by its timeout or the next request.
                #expect(polling > 0.002 && polling <= lingering + 1e-6, "\(reply.line)")
            } else {
                #expect(polling == 0 && lingering > 0, "\(reply.line)")
            }
            client.close()
        }
    }
}
