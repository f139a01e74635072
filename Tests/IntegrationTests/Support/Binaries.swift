import Foundation
#if canImport(Glibc)
import Glibc
#endif

struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Where the binaries under test live.
///
/// `RPCD_BIN` (a path to the `rpcd` executable, or to the directory holding it) wins; otherwise the
/// directory of the running test executable, where SwiftPM on Linux puts `rpcd` and `rpcbench` next
/// to `<pkg>PackageTests.xctest`.
enum Binaries {
    static func rpcd() throws -> URL { try locate("rpcd") }
    static func rpcbench() throws -> URL { try locate("rpcbench") }

    static func locate(_ name: String) throws -> URL {
        let fm = FileManager.default
        var candidates: [String] = []
        if let env = ProcessInfo.processInfo.environment["RPCD_BIN"], !env.isEmpty {
            var isDir: ObjCBool = false
            if fm.fileExists(atPath: env, isDirectory: &isDir), isDir.boolValue {
                candidates.append((env as NSString).appendingPathComponent(name))
            } else if name == "rpcd" {
                candidates.append(env)
            } else {
                candidates.append(((env as NSString).deletingLastPathComponent as NSString).appendingPathComponent(name))
            }
        } else {
            let exe = selfExecutablePath()
            candidates.append(((exe as NSString).deletingLastPathComponent as NSString).appendingPathComponent(name))
            // Darwin-style bundles: <dir>/<pkg>PackageTests.xctest/Contents/MacOS/<exe>
            if let range = exe.range(of: ".xctest/") {
                let bundle = String(exe[..<range.lowerBound]) + ".xctest"
                candidates.append(((bundle as NSString).deletingLastPathComponent as NSString).appendingPathComponent(name))
            }
        }
        for path in candidates where fm.isExecutableFile(atPath: path) {
            return URL(fileURLWithPath: path)
        }
        throw HarnessError(
            "\(name) binary not found (looked at \(candidates.joined(separator: ", "))). Build it first with "
                + "`swift build --build-tests`, or set RPCD_BIN to the rpcd executable or its directory.")
    }

    /// `/proc/self/exe` resolved.
    static func selfExecutablePath() -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        if n > 0 {
            return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return CommandLine.arguments.first ?? ""
    }

    /// Finds an executable on PATH.
    static func onPath(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            let candidate = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}

/// The package root (the directory holding Package.swift), found by walking up from this file.
func packageRoot(from file: String = #filePath) -> URL? {
    var dir = URL(fileURLWithPath: file).deletingLastPathComponent()
    while dir.path != "/" {
        if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) {
            return dir
        }
        dir = dir.deletingLastPathComponent()
    }
    return nil
}
