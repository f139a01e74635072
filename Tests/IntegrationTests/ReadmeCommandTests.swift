import Foundation
import Testing

/// README's runnable commands work where a newcomer runs them: before "Install as a service" puts
/// rpcd on the PATH, a shell block says `swift run rpcd`, never a bare `rpcd`.
@Suite("README commands")
struct ReadmeCommandTests {
    @Test("shell blocks before the install section never start a command with a bare rpcd")
    func noBareRpcdBeforeInstall() throws {
        let root = try #require(packageRoot())
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let beforeInstall = readme.components(separatedBy: "## Install as a service").first ?? ""
        var inShellBlock = false
        var offenders: [String] = []
        for line in beforeInstall.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inShellBlock = !inShellBlock && (line == "```sh" || line == "```bash")
                continue
            }
            let command = line.hasPrefix("$ ") ? line.dropFirst(2) : line[...]
            if inShellBlock && command.hasPrefix("rpcd ") { offenders.append(String(line)) }
        }
        #expect(offenders.isEmpty, "use `swift run rpcd` before the install section: \(offenders)")
    }
}
