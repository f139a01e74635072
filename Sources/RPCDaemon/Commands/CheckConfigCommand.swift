/// `rpcd check-config FILE`: exit 0 and print the effective settings, or exit 2 with one
/// `FILE:LINE: message` per problem on stderr (2, like `rpcd serve` for the same file, and usage errors).
/// The auth file (`auth_file`) and a follower's credentials (`follow_auth_file`) it names are
/// checked the same way, owner and mode included; a warning (a file others may read) is a `#` note.
/// `$CREDENTIALS_DIRECTORY/auth` is not checked: that is `rpcd auth check FILE`'s.
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
        let options: ServeOptions
        do {
            options = try Config.load(path: path)
        } catch {
            for line in error.lines { LogSink.stderr.write("\(line)\n") }
            return 2
        }
        // The files it names are checked too (never printing a token or a hash).
        var notes: [String] = []
        var problems: [String] = []
        let warn = { (warning: String) in notes.append("# warning: \(warning)") }
        if let authFile = options.authFile {
            do {
                let file = try AuthFile.load(path: authFile, warn: warn)
                notes.append("# auth_file \(authFile): OK; \(file.principals.count) principal(s): \(file.names.joined(separator: ", "))")
            } catch {
                problems += error.lines
            }
        }
        if let followAuthFile = options.followAuthFile {
            do {
                if case .token(let name, _) = try FollowCredentials.load(path: followAuthFile, warn: warn) {
                    notes.append("# follow_auth_file \(followAuthFile): OK; authenticates as \(name)")
                }
            } catch {
                problems += error.lines
            }
        }
        guard problems.isEmpty else {
            for line in problems { LogSink.stderr.write("\(line)\n") }
            return 2
        }
        print("# \(path): OK; effective settings (command-line flags of `rpcd serve` override these):")
        print(Config.render(options), terminator: "")
        for note in notes { print(note) }
        return 0
    }
}
