import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// LINUX-SOCKETS.md: `accept` failing with EMFILE must not spin (the listener stays readable).
/// The daemon sheds connections it has no fd for, keeps serving the ones it has, and recovers
/// once fds are free again.
@Suite("file descriptor limit") struct FileDescriptorLimitTests {
    @Test("out of fds: connections are shed, no busy loop, service resumes")
    func emfile() throws {
        try withDaemon { daemon in
            let limit = try runProcess(
                URL(fileURLWithPath: "/usr/bin/prlimit"), ["--pid", "\(daemon.pid)", "--nofile=48:48"], timeout: 10)
            try #require(limit.status == 0, "prlimit failed: \(limit.stderr)")
            let keeper = try LineClient(port: daemon.port)
            #expect(try keeper.request(#"{"id":"k","method":"user.listUsers"}"#).contains("listUsersResult"))

            // Far more connections than the daemon has fds for.
            var clients: [LineClient] = []
            for _ in 0..<120 {
                if let client = try? LineClient(port: daemon.port, timeout: 2) { clients.append(client) }
            }
            let ticksBefore = daemon.cpuTicks() ?? 0
            Thread.sleep(forTimeInterval: 1.0)
            let ticksAfter = daemon.cpuTicks() ?? 0
            // A spinning accept loop burns a whole core (100 ticks/s); shedding costs next to nothing.
            #expect(ticksAfter - ticksBefore < 50, "daemon used \(ticksAfter - ticksBefore) ticks in 1 s while out of fds")
            #expect(daemon.stderrEventually(contains: "out of file descriptors"))

            // The connection it already had still works.
            #expect(try keeper.request(#"{"id":"k2","method":"user.listUsers"}"#).contains("listUsersResult"))

            // Free the fds: new connections are served again.
            for client in clients { client.close() }
            clients.removeAll()
            var served = false
            for _ in 0..<50 where !served {
                Thread.sleep(forTimeInterval: 0.1)
                if let client = try? LineClient(port: daemon.port, timeout: 2),
                    let reply = try? client.request(#"{"id":"n","method":"user.listUsers"}"#)
                {
                    served = reply.contains("listUsersResult")
                }
            }
            #expect(served, "no new connection was served after fds were freed")
        }
    }
}
