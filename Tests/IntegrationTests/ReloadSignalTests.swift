import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SIGHUP (issue 10, item 11) used to kill the daemon (the signal's default action). Now it runs
/// the reload hook, says there is nothing to reload, and serving goes on.
@Suite("SIGHUP")
struct ReloadSignalTests {
    @Test("SIGHUP is logged at info and the daemon keeps serving, old and new connections alike")
    func sighupKeepsServing() throws {
        let daemon = try DaemonProcess()
        defer { daemon.stop() }
        let client = try LineClient(port: daemon.port)
        #expect(try client.request(Wire.createUser("1", "u1", "Ada", "a@x")).contains("createUserResult"))
        for round in 1...3 {
            daemon.signal(SIGHUP)
            #expect(PipeWait.until(5) {
                daemon.stderrText.components(separatedBy: "info SIGHUP: nothing to reload; configuration changes need a restart").count > round
            }, "\(daemon.stderrTail())")
            #expect(daemon.isRunning, "SIGHUP stopped the daemon: \(daemon.exitDescription.text)")
            #expect(try client.request(Wire.getUser("g\(round)", "u1")).contains("getUserResult"))
            #expect(try LineClient(port: daemon.port).request(#"{"id":"p","method":"system.ping"}"#).contains("pingResult"))
        }
        // A graceful stop still works afterwards.
        daemon.terminate()
        #expect(daemon.waitForExit(timeout: 5) == 0, "\(daemon.stderrTail())")
    }
}
