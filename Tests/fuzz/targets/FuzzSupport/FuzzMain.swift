import Foundation

/// The signature libFuzzer calls: one input, 0 when it was handled (a failed check traps instead).
public typealias FuzzTest = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt

#if FUZZING
// libFuzzer's entry point for programs that keep their own `main` (SwiftPM links every executable
// with `main` aliased to the module's entry point, so libFuzzer's own `main` cannot be used).
// Declared by hand: the package has no C target to carry a header for it.
@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ test: FuzzTest
) -> CInt
#endif

/// Runs a fuzz target. Built by `Tests/fuzz/run.sh` (with `-sanitize=fuzzer,address -DFUZZING`)
/// it is libFuzzer: every libFuzzer flag and corpus argument works. Built by a plain `swift build`
/// it runs each file named on the command line (or each file in a named directory) once, so a
/// crasher can be replayed without libFuzzer: `swift run FuzzDispatcher Tests/fuzz/crashers/dispatcher`.
public enum FuzzMain {
    public static func run(_ test: FuzzTest) -> Never {
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv, test))
        #else
        let name = (CommandLine.arguments.first ?? "fuzz").split(separator: "/").last.map(String.init) ?? "fuzz"
        let paths = CommandLine.arguments.dropFirst()
        guard !paths.isEmpty else {
            FileHandle.standardError.write(Data("usage: \(name) FILE|DIR...  (runs each input once; Tests/fuzz/run.sh fuzzes)\n".utf8))
            exit(2)
        }
        var count = 0
        for path in paths {
            for file in files(at: path) {
                guard let data = FileManager.default.contents(atPath: file) else {
                    FileHandle.standardError.write(Data("\(name): cannot read \(file)\n".utf8))
                    exit(1)
                }
                let bytes = [UInt8](data)
                _ = bytes.withUnsafeBufferPointer { test($0.baseAddress, $0.count) }
                count += 1
            }
        }
        print("\(name): \(count) inputs ran, every check held")
        exit(0)
        #endif
    }

    /// `path` itself, or the regular files directly inside it when it is a directory, sorted.
    private static func files(at path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            return [path]
        }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { path + "/" + $0 }
    }
}

/// Stops the run with `message` when a checked property does not hold: libFuzzer sees a crash and
/// saves the input.
@inline(__always)
public func fuzzCheck(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("fuzz check failed: \(message())") }
}
