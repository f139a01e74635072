import Foundation
import Testing

@Suite("README")
struct ReadmeSessionTests {
    @Test("the README netcat session, run with the real nc against the real daemon, prints exactly the README's replies")
    func netcatSession() throws {
        guard let nc = Binaries.onPath("nc") else {
            Issue.record("`nc` is not installed: install netcat-openbsd (apt-get install netcat-openbsd); CI installs it")
            return
        }
        let root = try #require(packageRoot(), "no Package.swift above \(#filePath)")
        let readmeURL = root.appendingPathComponent("README.md")
        guard let readme = try? String(contentsOf: readmeURL, encoding: .utf8) else {
            Issue.record("README.md not found at \(readmeURL.path)")
            return
        }
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
            for (n, session) in sessions.enumerated() {
                let input = session.requests.map { $0 + "\n" }.joined()
                let out = try runProcess(URL(fileURLWithPath: nc), ["-N", "127.0.0.1", "\(daemon.port)"], stdin: input, timeout: 10)
                #expect(out.status == 0, "nc session \(n + 1): exit \(String(describing: out.status)), stderr: \(out.stderr)")
                var got = out.stdout.components(separatedBy: "\n")
                if got.last == "" { got.removeLast() }
                #expect(got.count == session.expectedReplies.count, "nc session \(n + 1): \(got.count) reply lines, README shows \(session.expectedReplies.count)")
                for (i, expected) in session.expectedReplies.enumerated() {
                    let actual = i < got.count ? got[i] : "<missing>"
                    #expect(actual == expected, "nc session \(n + 1), reply \(i + 1)")
                }
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
