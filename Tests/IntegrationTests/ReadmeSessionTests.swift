import Foundation
import Testing

@Suite("README")
struct ReadmeSessionTests {
    @Test("the README netcat session, run with the real nc against the real daemon, prints exactly the README's replies")
    func netcatSession() throws {
        guard let nc = netcatOrIssue() else { return }
        guard let readme = readmeOrIssue() else { return }
        let sessions = try parseNetcatSessions(readme: readme)
        #expect(!sessions.isEmpty, "the netcat-session block has no `$ nc` line")

        // The acceptance criteria: the session shows create, get, list, an error and the seed form.
        let requests = sessions.flatMap(\.requests).joined(separator: "\n")
        let replies = sessions.flatMap(\.expectedReplies)
        #expect(requests.contains("createUser"), "the README session should create something")
        #expect(requests.contains("getUser") || requests.contains("getBuilding"), "the README session should get something")
        #expect(requests.contains("listUsers") || requests.contains("listBuildings"), "the README session should list")
        #expect(replies.contains { $0.contains("error") }, "the README session should show an error")
        #expect(requests.contains(#""_0""#), "the README session should show the seed form")

        try withDaemon { daemon in
            for (n, session) in sessions.enumerated() { try Self.run(session, number: n + 1, nc: nc, port: daemon.port) }
        }
    }

    /// Feeds a session's requests to `nc -N` and checks it prints exactly the README's replies.
    static func run(
        _ session: NetcatSession, number n: Int, nc: String, port: Int, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let input = session.requests.map { $0 + "\n" }.joined()
        let out = try runProcess(URL(fileURLWithPath: nc), ["-N", "127.0.0.1", "\(port)"], stdin: input, timeout: 10)
        #expect(out.status == 0, "nc session \(n): exit \(String(describing: out.status)), stderr: \(out.stderr)", sourceLocation: sourceLocation)
        var got = out.stdout.components(separatedBy: "\n")
        if got.last == "" { got.removeLast() }
        #expect(got.count == session.expectedReplies.count, "nc session \(n): \(got.count) reply lines, README shows \(session.expectedReplies.count)",
            sourceLocation: sourceLocation)
        for (i, expected) in session.expectedReplies.enumerated() {
            let actual = i < got.count ? got[i] : "<missing>"
            #expect(actual == expected, "nc session \(n), reply \(i + 1)", sourceLocation: sourceLocation)
        }
    }

    @Test("the README change feed session: one nc subscribes and stays open, another makes changes, the first prints exactly the README's lines")
    func feedSession() throws {
        guard let nc = netcatOrIssue() else { return }
        guard let readme = readmeOrIssue() else { return }
        let sessions = try parseNetcatSessions(readme: readme, marker: "<!-- feed-session -->", isReply: isFeedOutput)
        let subscriber = try #require(sessions.first)
        #expect(sessions.count >= 2, "the feed session needs a subscriber and a session that makes changes")
        #expect(subscriber.requests.first?.contains("replication.subscribe") == true, "\(subscriber.requests)")
        let ownReplies = try subscriber.expectedReplies.filter(isCounterRequest).count
        #expect(subscriber.expectedReplies.count > ownReplies, "the subscriber should show journal lines")

        try withDaemon { daemon in
            let feed = try NetcatProcess(nc: nc, port: daemon.port)
            defer { feed.stop() }
            for line in subscriber.requests { try feed.type(line) }
            feed.waitForLines(ownReplies)
            for (n, session) in sessions.dropFirst().enumerated() { try Self.run(session, number: n + 2, nc: nc, port: daemon.port) }
            let got = feed.waitForLines(subscriber.expectedReplies.count)
            usleep(200_000)
            #expect(feed.lines == got, "the subscriber printed more than the README shows: \(feed.lines)")
            #expect(got.count == subscriber.expectedReplies.count, "nc session 1: \(got.count) lines, README shows \(subscriber.expectedReplies.count): \(got)")
            for (i, expected) in subscriber.expectedReplies.enumerated() {
                #expect((i < got.count ? got[i] : "<missing>") == expected, "nc session 1 (the subscriber), line \(i + 1)")
            }
        }
    }

    @Test("the netcat-session parser splits requests from replies in both forms")
    func parser() throws {
        let readme = """
            # rpcd
            <!-- netcat-session -->
            ```console
            $ nc -N 127.0.0.1 7878
            {"id":"1","method":"user.createUser","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}
            {"id":"1","method":"user.createUserResult","param":{"id":"u1","name":"Ada","email":"ada@example.com"}}
            {"id":"2","method":"user.getUser","param":{"userId":"zz"}}
            {"id":"2","method":"error.error","param":{"errorMessage":"no user zz","code":"notFound"}}
            $ nc -N 127.0.0.1 7878
            {"id":"3","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"u1"}}}}
            {"id":"3","method":{"user":{"_0":"getUserResult"}},"param":{"user":{"getUserResult":{"id":"u1","name":"Ada","email":"ada@example.com"}}}}
            {"id":"4","method":{"user":{"_0":"getUser"}},"param":{"user":{"getUser":{"userId":"zz"}}}}
            {"id":"4","method":{"error":{"_0":"error"}},"param":{"error":{"error":{"errorMessage":"no user zz","code":"notFound"}}}}
            ```
            after
            """
        let sessions = try parseNetcatSessions(readme: readme)
        #expect(sessions.count == 2)
        #expect(sessions.first?.requests.count == 2)
        #expect(sessions.first?.expectedReplies.count == 2)
        #expect(sessions.last?.requests.first?.contains(#""_0":"getUser""#) == true)
        #expect(sessions.last?.expectedReplies.count == 2)
        #expect(throws: HarnessError.self) { try parseNetcatSessions(readme: "# no session here") }
    }
}
