import Foundation
import TestSupport
import Testing

/// The `RPC` library product as an outside package uses it (issue 13): a package that depends on
/// this one by path and on `.product(name: "RPC", package: "rpcd")` builds, connects and calls;
/// and the transport's types are not in its scope.
///
/// The outside package and its build live in `.build/ext-consumer/` of this package (never
/// committed), so a second run rebuilds only what changed. The build runs under `nice`, since it
/// shares the cores with the other tests.
@Suite("the RPC product from an outside package", .serialized)
struct ClientProductTests {
    static let main = """
        import RPCClient
        import RPCSchema

        let address = CommandLine.arguments[1]
        let client = try await RPCClient.connect(to: address, options: RPCClientOptions(retry: RetryPolicy()))
        let ada = try await client.call(CreateUser(id: "u1", name: "Ada", email: "ada@example.com"), key: "ext-u1")
        _ = try await client.call(CreateUser(id: "u2", name: "Bo", email: "bo@example.com"), timeout: .seconds(5))
        var pages: [UserPage] = []
        for try await page in client.pages(ListUsers(limit: 1), timeout: .none) { pages.append(page) }
        do {
            _ = try await client.call(GetUser(userId: "nobody"), timeout: .after(.seconds(5)))
        } catch let error as RPCClientError where error.code == .notFound {
            print("notFound")
        }
        print("\\(ada.name), \\(pages.count) pages, last next \\(pages.last?.next ?? "none")")
        client.close()

        """

    /// Names from RPCTransport a consumer of `RPC` must not see without importing it.
    static let leak = """
        let a = SocketAddress(parsing: "127.0.0.1:1")
        let b: Connection? = nil
        let c: Errno? = nil

        """

    struct Layout {
        let package: URL
        let scratch: URL
        let sources: URL

        init(root: URL) throws {
            let base = root.appendingPathComponent(".build/ext-consumer")
            package = base.appendingPathComponent("package")
            scratch = base.appendingPathComponent("build")
            sources = package.appendingPathComponent("Sources/ext-consumer")
            let fm = FileManager.default
            try fm.createDirectory(at: sources, withIntermediateDirectories: true)
            // A path dependency's identity is its last path component: name it rpcd, as a clone is.
            let deps = base.appendingPathComponent("deps")
            try fm.createDirectory(at: deps, withIntermediateDirectories: true)
            let link = deps.appendingPathComponent("rpcd")
            if (try? fm.destinationOfSymbolicLink(atPath: link.path)) != root.path {
                try? fm.removeItem(at: link)
                try fm.createSymbolicLink(at: link, withDestinationURL: root)
            }
            let manifest = """
                // swift-tools-version:6.0
                import PackageDescription

                let package = Package(
                    name: "ext-consumer",
                    dependencies: [.package(path: "\(link.path)")],
                    targets: [
                        .executableTarget(name: "ext-consumer", dependencies: [.product(name: "RPC", package: "rpcd")]),
                    ]
                )

                """
            try write(manifest, to: package.appendingPathComponent("Package.swift"))
        }

        /// On a thread of its own: a first build takes half a minute, which must not hold one of
        /// the concurrency pool's threads (two on two cores) from the other tests.
        func build() async throws -> ProcessOutcome {
            let arguments = ["nice", "-n", "19", "swift", "build", "--package-path", package.path, "--scratch-path", scratch.path]
            return try await offPool { try runProcess(URL(fileURLWithPath: "/usr/bin/env"), arguments, timeout: 900) }
        }

        /// Writes only when the text changed, so an unchanged file is not rebuilt.
        func write(_ text: String, to url: URL) throws {
            if (try? String(contentsOf: url, encoding: .utf8)) == text { return }
            try text.write(to: url, atomically: true, encoding: .utf8)
        }
    }

    @Test("README's \"Use it from Swift\" shows that dependency, by URL or by path")
    func readmeShowsTheDependency() throws {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let start = try #require(readme.range(of: "## Use it from Swift\n"))
        let section = readme[start.upperBound...].components(separatedBy: "\n## ")[0]
        for text in [#".product(name: "RPC", package: "rpcd")"#, ".package(url: ", ".package(path: "] {
            #expect(section.contains(text), "\(text)")
        }
    }

    @Test("a package depending on .product(name: \"RPC\", package: \"rpcd\") builds, connects and calls; RPCTransport is not in its scope")
    func outsidePackage() async throws {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        let layout = try Layout(root: root)
        let leakFile = layout.sources.appendingPathComponent("Leak.swift")

        try layout.write(Self.leak, to: leakFile)
        let leaked = try await layout.build()
        try FileManager.default.removeItem(at: leakFile)
        #expect(leaked.status != 0, "the transport's types compiled in a consumer that did not import RPCTransport")
        for name in ["SocketAddress", "Connection", "Errno"] {
            #expect(leaked.stdout.contains("cannot find '\(name)' in scope") || leaked.stdout.contains("cannot find type '\(name)' in scope"),
                "\(name): \(leaked.stdout.suffix(2000))")
        }

        try layout.write(Self.main, to: layout.sources.appendingPathComponent("main.swift"))
        let built = try await layout.build()
        #expect(built.status == 0, "stdout: \(built.stdout.suffix(3000))\nstderr: \(built.stderr.suffix(2000))")
        guard built.status == 0 else { return }
        #expect(!built.stdout.contains("warning:"), "\(built.stdout.suffix(3000))")

        try await withDaemonAsync { daemon in
            let binary = layout.scratch.appendingPathComponent("debug/ext-consumer")
            let port = daemon.port
            let run = try await offPool { try runProcess(binary, ["127.0.0.1:\(port)"], timeout: 30) }
            #expect(run.status == 0, "stderr: \(run.stderr.suffix(2000))")
            #expect(run.stdout == "notFound\nAda, 2 pages, last next none\n")
        }
    }
}
