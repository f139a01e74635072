/// Subcommands other than `serve`, by name. Each lives in a file of its own and parses its own
/// arguments; it returns the exit status (2 for usage errors, with one line on stderr).
enum Subcommands {
    static let all: [String: @Sendable ([String]) -> Int32] = [
        "auth": AuthCommand.run,
        "call": CallCommand.run,
        "check-config": CheckConfigCommand.run,
        "journal": JournalCommand.run,
        "repair": RepairCommand.run,
    ]
}
