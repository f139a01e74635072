import Foundation
import Testing

/// The rules of the source layout that a grep can check: unchecked code stays in its rooms, and the
/// entities import no system module.
@Suite("Source layout")
struct SourceLayoutTests {
    /// The files that may turn off Swift's checks, each stating its invariant once: the confined
    /// state of loops and connections, the syscall layer, the store's shards and the JSON scanner.
    static let uncheckedRooms: Set<String> = [
        "Sources/RPCTransport/Confined.swift",
        "Sources/RPCTransport/Syscalls.swift",
        "Sources/RPCEntities/Records.swift",
        "Sources/RPCSchema/JSONParser.swift",
    ]
    static let uncheckedConstructs = ["@exclusivity(unchecked)", "Unmanaged", "_withUnsafeGuaranteedRef", "UnsafeMutablePointer", "UnsafePointer"]

    static func swiftFiles(under folder: String) throws -> [(path: String, text: String)] {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        let base = root.appendingPathComponent(folder)
        guard let walker = FileManager.default.enumerator(atPath: base.path) else { throw HarnessError("cannot list \(base.path)") }
        var files: [(String, String)] = []
        for case let relative as String in walker where relative.hasSuffix(".swift") {
            let text = try String(contentsOf: base.appendingPathComponent(relative), encoding: .utf8)
            files.append(("\(folder)/\(relative)", text))
        }
        return files.sorted { $0.0 < $1.0 }
    }

    @Test("unchecked constructs live in four files outside rpcbench")
    func uncheckedCodeStaysInItsRooms() throws {
        let files = try Self.swiftFiles(under: "Sources").filter { !$0.path.hasPrefix("Sources/rpcbench/") }
        #expect(files.count > 50, "found only \(files.count) Swift files under Sources")
        let offenders = files.filter { file in Self.uncheckedConstructs.contains { file.text.contains($0) } }.map(\.path)
        #expect(Set(offenders).isSubset(of: Self.uncheckedRooms), "unchecked code outside its rooms: \(offenders.filter { !Self.uncheckedRooms.contains($0) })")
        #expect(Self.uncheckedRooms.count <= 4)
    }

    @Test("RPCEntities imports neither Dispatch, Glibc nor Foundation")
    func entitiesArePure() throws {
        for file in try Self.swiftFiles(under: "Sources/RPCEntities") {
            for line in file.text.split(separator: "\n") where line.hasPrefix("import ") {
                #expect(!["import Dispatch", "import Glibc", "import Foundation"].contains(String(line)), "\(file.path): \(line)")
            }
        }
    }
}
