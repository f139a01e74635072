import Foundation
import RPCClient
import RPCSchema
import TestSupport
import Testing

/// README's "Use it from Swift": its code is the example program, which is built only on the
/// library product's targets and talks to the real daemon.
@Suite("README: Use it from Swift", .ownExecutor)
struct ReadmeClientTests {
    func root() throws -> URL {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        return root
    }

    /// The ```swift blocks of the "## Use it from Swift" section, in order.
    func swiftBlocks() throws -> [String] {
        let readme = try String(contentsOf: try root().appendingPathComponent("README.md"), encoding: .utf8)
        guard let start = readme.range(of: "## Use it from Swift\n") else { throw HarnessError("README has no \"## Use it from Swift\"") }
        let section = readme[start.upperBound...].components(separatedBy: "\n## ")[0]
        return section.components(separatedBy: "```swift\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
    }

    @Test("the section comes before \"## Command line\"")
    func placement() throws {
        let readme = try String(contentsOf: try root().appendingPathComponent("README.md"), encoding: .utf8)
        let use = try #require(readme.range(of: "## Use it from Swift"))
        let cli = try #require(readme.range(of: "## Command line"))
        #expect(use.lowerBound < cli.lowerBound)
    }

    @Test("its first block is Sources/rpc-example/main.swift, verbatim")
    func exampleIsTheReadme() throws {
        let main = try String(contentsOf: try root().appendingPathComponent("Sources/rpc-example/main.swift"), encoding: .utf8)
        #expect(try swiftBlocks().first == main)
    }

    @Test("its RPCService block is the one compiled in RPCClientTests")
    func serviceSnippetIsCompiled() throws {
        let test = try String(contentsOf: try root().appendingPathComponent("Tests/RPCClientTests/ReadmeServiceTests.swift"), encoding: .utf8)
        let compiled = test.components(separatedBy: "// README begin\n")[1].components(separatedBy: "// README end")[0]
        func lines(_ text: String) -> [String] {
            text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        let blocks = try swiftBlocks()
        // The example, the RPCService block, and "Adding an entity" (checked by ThirdEntityTests).
        #expect(blocks.count == 3)
        #expect(lines(blocks.first { $0.contains("RPCService.unimplemented") } ?? "") == lines(compiled))
    }

    @Test("the example program, built only on the library product, talks to the daemon, and runs again on the same data")
    func exampleRuns() throws {
        try withDaemon { daemon in
            let first = try runProcess(try Binaries.locate("rpc-example"), ["127.0.0.1:\(daemon.port)"], timeout: 20)
            #expect(first.status == 0, "stderr: \(first.stderr)")
            #expect(first.stdout == """
                have Ada; 1 user(s)
                not found: no user "nobody"; user.listUsers shows the existing ids
                added Hall
                b9: no building "b9"; building.listBuildings shows the existing ids

                """)
            // A second run finds u1 and b1 (the README session and ./data persist them): no crash.
            let second = try runProcess(try Binaries.locate("rpc-example"), ["127.0.0.1:\(daemon.port)"], timeout: 20)
            #expect(second.status == 0, "stderr: \(second.stderr)")
            #expect(second.stdout.hasPrefix("have Ada; 1 user(s)\n"), "\(second.stdout)")
            #expect(second.stdout.contains("b1: building \"b1\" exists already"), "\(second.stdout)")
        }
    }

    @Test("without a daemon the example prints one line and exits 1 (no crash)")
    func exampleWithoutDaemon() throws {
        let out = try runProcess(try Binaries.locate("rpc-example"), ["127.0.0.1:1"], timeout: 20)
        #expect(out.status == 1, "stdout: \(out.stdout) stderr: \(out.stderr)")
        #expect(out.stdout.hasPrefix("rpc-example: ") && out.stdout.split(separator: "\n").count == 1, "\(out.stdout)")
    }

    /// A call type the client has never seen: the client needs no code for a new method.
    struct FlyUser: RPCCall {
        typealias Reply = User
        static let method = RPCMethod("user", "flyUser")
        var userId: String
    }

    @Test("a new RPCCall type is callable without client code (here the daemon does not know it)")
    func newMethodNeedsNoClientCode() async throws {
        try await withDaemonAsync { daemon in
            let client = try await RPCClient.connect(host: "127.0.0.1", port: daemon.port)
            defer { client.close() }
            try await expectServerError(.methodNotFound, FlyUser.method) { try await client.call(FlyUser(userId: "u1")) }
        }
    }
}
