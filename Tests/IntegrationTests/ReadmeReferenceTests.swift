import Foundation
import Testing

/// README's command-line reference (the block after `<!-- synopsis -->` under "## Command line"),
/// `rpcd --help` and the parser name the same commands, subcommands and options: a flag the parser
/// takes is in both texts, and a flag either text shows is one the parser takes.
@Suite("README reference")
struct ReadmeReferenceTests {
    /// One way to call a command: `rpcd journal dump [--data-dir DIR] …` has the path
    /// `journal dump` and the options `--data-dir`, `--from-seq`, `--ndjson`.
    struct Form: CustomStringConvertible {
        var path: String
        var options: Set<String>
        var description: String { "rpcd \(path)" }
    }

    // MARK: - The three sources

    static func root() throws -> URL {
        guard let root = packageRoot() else { throw HarnessError("package root not found from \(#filePath)") }
        return root
    }

    /// The lines of README's synopsis block.
    static func synopsis() throws -> [String] {
        let readme = try String(contentsOf: try root().appendingPathComponent("README.md"), encoding: .utf8)
        guard let section = readme.range(of: "\n## Command line\n") else { throw HarnessError("README has no \"## Command line\"") }
        guard let marker = readme.range(of: "<!-- synopsis -->\n```text\n", range: section.upperBound..<readme.endIndex),
            let end = readme.range(of: "\n```", range: marker.upperBound..<readme.endIndex)
        else { throw HarnessError("README's Command line has no <!-- synopsis --> followed by a ```text block") }
        return readme[marker.upperBound..<end.lowerBound].split(separator: "\n").map(String.init)
    }

    /// `rpcd --help`.
    static func help() throws -> String {
        let out = try runProcess(try Binaries.rpcd(), ["--help"])
        guard out.status == 0 else { throw HarnessError("rpcd --help: exit \(String(describing: out.status)), \(out.stderr)") }
        return out.stdout
    }

    /// The `serve` flags the parser has a case for: every `"--…"` on a `case` line of
    /// `CommandLineParser.parseServe`'s `switch flag`.
    static func parserServeFlags() throws -> Set<String> {
        let source = try String(
            contentsOf: try root().appendingPathComponent("Sources/RPCDaemon/CommandLine.swift"), encoding: .utf8)
        guard let start = source.range(of: "static func parseServe("),
            let end = source.range(of: "static let configKeys", range: start.upperBound..<source.endIndex)
        else { throw HarnessError("CommandLine.swift has no parseServe followed by configKeys") }
        let caseLines = source[start.upperBound..<end.lowerBound].split(separator: "\n")
            .filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("case \"--") }
        return Set(caseLines.flatMap { quotedFlags(in: $0) })
    }

    /// The subcommands other than `serve`, as `rpcd` lists them for an unknown one.
    static func subcommands() throws -> [String] {
        let out = try runProcess(try Binaries.rpcd(), ["no-such-command"])
        guard let list = out.stderr.components(separatedBy: "commands: ").last?.components(separatedBy: " (").first else {
            throw HarnessError("rpcd no-such-command did not list the commands: \(out.stderr)")
        }
        return list.components(separatedBy: ", ").filter { $0 != "serve" && !$0.isEmpty }
    }

    /// A subcommand's forms, from its own usage line (`rpcd NAME --help`).
    static func forms(of name: String) throws -> [Form] {
        let out = try runProcess(try Binaries.rpcd(), [name, "--help"])
        guard out.status == 0, let usage = out.stdout.split(separator: "\n").first(where: { $0.hasPrefix("usage: rpcd ") }) else {
            throw HarnessError("rpcd \(name) --help printed no usage line: \(out.stdout) \(out.stderr)")
        }
        return usage.dropFirst("usage: ".count).components(separatedBy: " | rpcd ").map { text in
            let words = (text.hasPrefix("rpcd ") ? String(text.dropFirst(5)) : text).split(separator: " ")
            let path = words.prefix { $0.first?.isLowercase == true && $0.allSatisfy { $0.isLowercase || $0 == "-" } }
            return Form(path: path.joined(separator: " "), options: flags(in: text))
        }
    }

    /// Every `--option` in a subcommand's source file (its parser), `--help` aside.
    static func sourceOptions(of name: String) throws -> Set<String> {
        let type = name.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined() + "Command.swift"
        let sources = try root().appendingPathComponent("Sources/RPCDaemon")
        guard let file = FileManager.default.enumerator(atPath: sources.path)?.compactMap({ $0 as? String })
            .first(where: { ($0 as NSString).lastPathComponent == type })
        else { throw HarnessError("no \(type) under Sources/RPCDaemon for the subcommand \(name)") }
        let source = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
        return Set(quotedFlags(in: source)).subtracting(["--help"])
    }

    // MARK: - Scanning

    /// `--word` tokens of a text (letters, digits and dashes after the two dashes).
    static func flags(in text: some StringProtocol) -> Set<String> {
        var found: Set<String> = []
        var rest = Substring(text)
        while let range = rest.range(of: "--") {
            let before = range.lowerBound == rest.startIndex ? nil : rest[rest.index(before: range.lowerBound)]
            let name = rest[range.upperBound...].prefix { $0.isLowercase || $0.isNumber || $0 == "-" }
            if let first = name.first, first.isLowercase, before.map({ !$0.isLetter && !$0.isNumber && $0 != "-" }) ?? true {
                found.insert("--" + name)
            }
            rest = rest[range.upperBound...]
        }
        return found
    }

    /// `--word` tokens that open a string literal (`"--data-dir"`, `"--auth="`).
    static func quotedFlags(in text: some StringProtocol) -> [String] {
        text.components(separatedBy: "\"--").dropFirst().compactMap { tail in
            let name = tail.prefix { $0.isLowercase || $0.isNumber || $0 == "-" }
            return name.first?.isLowercase == true ? "--" + name : nil
        }
    }

    /// The lines of `text` that show `form`: they start (after indentation) with `rpcd PATH`.
    static func lines(showing form: Form, in lines: [String]) -> [String] {
        lines.map { $0.trimmingCharacters(in: .whitespaces) }.filter { line in
            line == "rpcd \(form.path)" || line.hasPrefix("rpcd \(form.path) ")
        }
    }

    /// The `rpcd serve` lines of the synopsis: the first and its indented continuation lines.
    static func serveLines(_ synopsis: [String]) -> [String] {
        guard let start = synopsis.firstIndex(where: { $0.hasPrefix("rpcd serve") }) else { return [] }
        return [synopsis[start]] + synopsis[(start + 1)...].prefix { $0.hasPrefix(" ") }
    }

    // MARK: - Tests

    @Test("every serve flag the parser takes is in README's synopsis, its table and rpcd --help; both show no other")
    func serveFlags() throws {
        let parser = try Self.parserServeFlags()
        #expect(parser.count >= 20 && parser.contains("--listen") && parser.contains("--line-timeout"), "\(parser.sorted())")

        // The source's case labels are what the binary takes: each asks for its value, none is unknown.
        for flag in parser.sorted() {
            let out = try runProcess(try Binaries.rpcd(), ["serve", flag])
            #expect(out.status == 2 && out.stderr.contains("\(flag) needs a"), "rpcd serve \(flag): \(out.stderr)")
        }

        let synopsis = Self.flags(in: Self.serveLines(try Self.synopsis()).joined(separator: "\n"))
        #expect(parser.subtracting(synopsis).isEmpty, "README's synopsis lacks \(parser.subtracting(synopsis).sorted())")
        #expect(synopsis.subtracting(parser).isEmpty, "README's synopsis shows flags serve does not take: \(synopsis.subtracting(parser).sorted())")

        let readme = try String(contentsOf: try Self.root().appendingPathComponent("README.md"), encoding: .utf8)
        // The first cell of each row of the table under "### rpcd serve": "| `--flag` / `key` | …".
        let tableRows = readme.split(separator: "\n").filter { $0.hasPrefix("| `--") }
        let inTable = Set(tableRows.flatMap { Self.flags(in: $0.split(separator: "|").first ?? "") })
        #expect(parser.subtracting(inTable).isEmpty, "README's table of serve flags lacks \(parser.subtracting(inTable).sorted())")

        let help = try Self.help()
        let options = help.components(separatedBy: "Options of serve:").last ?? ""
        let helpFlags = Set(options.split(separator: "\n").compactMap { line -> String? in
            let word = line.trimmingCharacters(in: .whitespaces).split(separator: " ").first.map(String.init) ?? ""
            return word.hasPrefix("--") ? word : nil
        })
        #expect(parser.subtracting(helpFlags).isEmpty, "rpcd --help lacks \(parser.subtracting(helpFlags).sorted())")
        #expect(helpFlags.subtracting(parser).isEmpty, "rpcd --help shows flags serve does not take: \(helpFlags.subtracting(parser).sorted())")
    }

    @Test("every subcommand and each of its options is in README's synopsis and in rpcd --help, with no others")
    func subcommands() throws {
        let names = try Self.subcommands()
        for expected in ["auth", "call", "check-config", "journal", "repair"] {
            #expect(names.contains(expected), "rpcd lists \(names)")
        }
        let synopsis = try Self.synopsis()
        let help = try Self.help().split(separator: "\n").map(String.init)
        var shown: [String] = []  // every form the two texts must show
        for name in names {
            let forms = try Self.forms(of: name)
            // The usage is the parser's: every option its source reads is in one of its forms.
            let inUsage = forms.reduce(into: Set<String>()) { $0.formUnion($1.options) }
            let read = try Self.sourceOptions(of: name)
            #expect(read.subtracting(inUsage).isEmpty, "rpcd \(name)'s usage lacks \(read.subtracting(inUsage).sorted()), which it reads")
            for form in forms {
                shown.append(form.path)
                for (text, label) in [(synopsis, "README's synopsis"), (help, "rpcd --help")] {
                    let lines = Self.lines(showing: form, in: text)
                    guard !lines.isEmpty else {
                        Issue.record("\(label) does not show \(form)")
                        continue
                    }
                    let options = Self.flags(in: lines.joined(separator: "\n"))
                    #expect(form.options.subtracting(options).isEmpty, "\(label): \(form) lacks \(form.options.subtracting(options).sorted())")
                    #expect(options.subtracting(form.options).isEmpty,
                        "\(label): \(form) shows \(options.subtracting(form.options).sorted()), which it does not take")
                }
            }
        }
        // And the synopsis shows nothing else: each line is serve, a form above, or a top-level flag.
        for line in synopsis where line.hasPrefix("rpcd ") {
            let words = line.dropFirst(5).split(separator: " ")
            let path = words.prefix { $0.first?.isLowercase == true && $0.allSatisfy { $0.isLowercase || $0 == "-" } }.joined(separator: " ")
            #expect(path == "serve" || shown.contains(path) || ["--version", "--help"].contains(String(words.first ?? "")),
                "README's synopsis shows `\(line)`, which rpcd does not have")
        }
        for flag in ["--version", "--help"] {
            #expect(synopsis.contains("rpcd \(flag)"), "README's synopsis lacks rpcd \(flag)")
            #expect(help.contains { $0.trimmingCharacters(in: .whitespaces).hasPrefix("rpcd \(flag)") }, "rpcd --help lacks rpcd \(flag)")
            #expect(try runProcess(try Binaries.rpcd(), [flag]).status == 0, "rpcd \(flag)")
        }
    }

    @Test("README's Operating it names every key of config/rpcd.conf")
    func configKeys() throws {
        let root = try Self.root()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "\n## Operating it\n").dropFirst().first?.components(separatedBy: "\n## ").first)
        let conf = try String(contentsOf: root.appendingPathComponent("config/rpcd.conf"), encoding: .utf8)
        let keys = conf.split(separator: "\n").compactMap { line -> String? in
            guard !line.hasPrefix("#"), let equals = line.firstIndex(of: "=") else { return nil }
            return line[..<equals].trimmingCharacters(in: .whitespaces)
        }
        #expect(keys.count >= 20)
        for key in keys { #expect(section.contains("`\(key)`"), "README's Operating it does not name `\(key)`") }
    }

    @Test("the scanners find flags and forms as the tests above rely on")
    func scanners() {
        #expect(Self.flags(in: "rpcd x [--data-dir DIR] [--from-seq N] a--b ---c") == ["--data-dir", "--from-seq"])
        #expect(Self.quotedFlags(in: #"case "--a", "--b-c": x; hasPrefix("--d=") "no --e""#) == ["--a", "--b-c", "--d"])
        let form = Form(path: "journal dump", options: [])
        #expect(Self.lines(showing: form, in: ["  rpcd journal dump [--x]", "rpcd journal dumpling", "rpcd journal check"]) == ["rpcd journal dump [--x]"])
        #expect(Self.serveLines(["rpcd serve [--a]", "           [--b]", "rpcd call"]) == ["rpcd serve [--a]", "           [--b]"])
    }
}
