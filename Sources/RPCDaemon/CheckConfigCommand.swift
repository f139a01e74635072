/// `rpcd check-config FILE`: exit 0 and print the effective settings, or exit 2 with one
/// `FILE:LINE: message` per problem on stderr (2, like `rpcd serve` for the same file, and usage errors).
enum CheckConfigCommand {
    static let usage = "usage: rpcd check-config FILE (checks a settings file, e.g. /etc/rpcd/rpcd.conf)"

    static func run(_ arguments: [String]) -> Int32 {
        if arguments == ["--help"] || arguments == ["-h"] {
            print(usage)
            return 0
        }
        guard arguments.count == 1, let path = arguments.first, !path.hasPrefix("-") else {
            LogSink.stderr.write("rpcd: \(usage)\n")
            return 2
        }
        do {
            let options = try Config.load(path: path)
            print("# \(path): OK; effective settings (command-line flags of `rpcd serve` override these):")
            print(Config.render(options), terminator: "")
            return 0
        } catch {
            for line in error.lines { LogSink.stderr.write("\(line)\n") }
            return 2
        }
    }
}
