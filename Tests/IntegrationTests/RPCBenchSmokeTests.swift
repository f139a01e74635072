import Foundation
import Testing

/// rpcbench runs each workload for a second against a daemon it spawns, with no errors.
/// A smoke test of the tool, not a timed test: figures are not asserted.
@Suite("rpcbench smoke") struct RPCBenchSmokeTests {
    @Test("rpcbench reports zero errors", arguments: ["get", "create", "mixed"])
    func workload(_ workload: String) throws {
        let bench = try Binaries.rpcbench()
        let rpcd = try Binaries.rpcd()
        let outcome = try runProcess(
            bench,
            ["--spawn", rpcd.path, "--workload", workload, "--duration", "1", "--warmup", "0.2",
             "--conns", "4", "--depth", "4", "--users", "50"],
            timeout: 60)
        #expect(outcome.status == 0, "rpcbench failed: \(outcome.stdout)\(outcome.stderr)")
        let result = outcome.stdout.split(separator: "\n").first { $0.hasPrefix("RESULT ") } ?? ""
        #expect(result.contains("workload=\(workload)"), "no RESULT line: \(outcome.stdout)")
        #expect(result.contains(" errors=0"), "\(result)")
        let rps = result.split(separator: " ").first { $0.hasPrefix("rps=") }.flatMap { Int($0.dropFirst(4)) } ?? 0
        #expect(rps > 0, "\(result)")
    }

    @Test("rpcbench fails with exit 2 and one line when it cannot connect")
    func unreachable() throws {
        let outcome = try runProcess(try Binaries.rpcbench(), ["--connect", "127.0.0.1:1", "--duration", "1"], timeout: 30)
        #expect(outcome.status == 2)
        #expect(outcome.stderr.hasPrefix("rpcbench: ") && outcome.stderr.split(separator: "\n").count == 1)
    }
}
