// swift-tools-version:6.0
import PackageDescription

// rpcd: a TCP RPC daemon. No package dependencies, by design: Foundation, Glibc, Dispatch and the
// standard library only, and OpenSSL 3 from the system for TLS. Dependencies between modules point one way:
//   RPCSchema <- RPCEntities <- RPCDaemon <- rpcd
//   CRPCLinux, COpenSSL <- RPCTransport <- RPCClient, RPCDaemon (which also takes getrandom from CRPCLinux)
//   CRPCLinux <- RPCEntities (the CPU's CRC-32C instruction, the monotonic clock, memchr and the
//   state's adaptive mutex: RPCEntities imports neither Dispatch nor Glibc)
let package = Package(
    name: "rpcd",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "rpcd", targets: ["rpcd"]),
        .executable(name: "rpcbench", targets: ["rpcbench"]),
        // What a peer imports: the wire types (RPCSchema) and the client (RPCClient).
        .library(name: "RPC", targets: ["RPCSchema", "RPCClient"]),
    ],
    targets: [
        .target(name: "RPCSchema"),
        .target(name: "RPCEntities", dependencies: ["RPCSchema", "CRPCLinux"]),
        // Linux headers Glibc's module leaves out (epoll), and the CPU's CRC-32C instruction.
        .target(name: "CRPCLinux"),
        // OpenSSL 3, the one C library rpcd takes on: TLS for listeners, the client and followers.
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .target(name: "RPCTransport", dependencies: ["CRPCLinux", "COpenSSL"]),
        .target(name: "RPCClient", dependencies: ["RPCSchema", "RPCTransport"]),
        .target(name: "RPCDaemon", dependencies: ["RPCSchema", "RPCEntities", "RPCTransport", "RPCClient", "CRPCLinux"]),
        .executableTarget(name: "rpcd", dependencies: ["RPCDaemon"]),
        .executableTarget(name: "rpcbench", dependencies: ["RPCSchema", "RPCEntities", "RPCTransport", "CRPCLinux"]),
        .testTarget(name: "RPCSchemaTests", dependencies: ["RPCSchema"]),
        .testTarget(name: "RPCEntitiesTests", dependencies: ["RPCSchema", "RPCEntities"]),
        .testTarget(name: "RPCTransportTests", dependencies: ["RPCTransport"]),
        .testTarget(name: "RPCDaemonTests", dependencies: ["RPCDaemon", "RPCTransport"]),
        // Starts the real binaries (rpcd, rpcbench) over real TCP.
        .testTarget(
            name: "IntegrationTests", dependencies: ["RPCSchema", "RPCEntities", "RPCClient", "TestSupport", "COpenSSL", "CounterEntity"]),
        // A third entity declared outside Sources, and the daemon that registers it (ThirdEntityTests).
        .target(name: "CounterEntity", dependencies: ["RPCSchema", "RPCEntities"], path: "Tests/CounterEntity"),
        .executableTarget(name: "counterd", dependencies: ["RPCDaemon", "RPCEntities", "CounterEntity"], path: "Tests/counterd"),
        // Uses only the library product's targets (RPC): its main.swift is README's "Use it from Swift".
        .executableTarget(name: "rpc-example", dependencies: ["RPCSchema", "RPCClient"]),
        .testTarget(name: "RPCClientTests", dependencies: ["RPCSchema", "RPCClient", "TestSupport"]),
        // What the test targets share: running a test off the concurrency pool.
        .target(name: "TestSupport", path: "Tests/Support"),
        // Fuzz targets (Tests/fuzz/run.sh builds them with libFuzzer; a plain build replays files).
        .target(name: "FuzzSupport", path: "Tests/fuzz/targets/FuzzSupport"),
        .executableTarget(name: "FuzzFramer", dependencies: ["FuzzSupport", "RPCTransport"], path: "Tests/fuzz/targets/FuzzFramer"),
        .executableTarget(name: "FuzzDecoder", dependencies: ["FuzzSupport", "RPCSchema"], path: "Tests/fuzz/targets/FuzzDecoder"),
        .executableTarget(
            name: "FuzzDispatcher", dependencies: ["FuzzSupport", "RPCSchema", "RPCEntities"], path: "Tests/fuzz/targets/FuzzDispatcher"),
        .executableTarget(name: "FuzzJournal", dependencies: ["FuzzSupport", "RPCEntities"], path: "Tests/fuzz/targets/FuzzJournal"),
    ],
    swiftLanguageModes: [.v6]
)
