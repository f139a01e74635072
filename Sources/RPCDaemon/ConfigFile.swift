/// The text of a settings file, split into `key = value` entries: `#` starts a comment (at the
/// start of a line, or after a blank inside one), blank lines are skipped, a value may be quoted
/// with `"…"` to keep a `#` or surrounding blanks. Knows nothing about which keys exist.
struct ConfigFile: Sendable, Equatable {
    struct Entry: Sendable, Equatable {
        var key: String
        var value: String
        /// 1-based line number.
        var line: Int
    }

    /// A problem at a line of a file, printed as `FILE:LINE: message`.
    struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        var file: String
        var line: Int
        var message: String
        var description: String { "\(file):\(line): \(message)" }
    }

    var path: String
    var entries: [Entry] = []
    /// Lines that are not `key = value`.
    var problems: [Problem] = []

    init(path: String, text: String) {
        self.path = path
        var number = 0
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            let line = Self.stripComment(raw.hasSuffix("\r") ? raw.dropLast() : raw)
            if line.isEmpty { continue }
            guard let equals = line.firstIndex(of: "=") else {
                problems.append(Problem(file: path, line: number, message: "expected `key = value`, found \"\(line)\""))
                continue
            }
            let key = line[..<equals].trimmingBlanks()
            var value = line[line.index(after: equals)...].trimmingBlanks()
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            guard !key.isEmpty else {
                problems.append(Problem(file: path, line: number, message: "no key before `=`"))
                continue
            }
            entries.append(Entry(key: key, value: value, line: number))
        }
    }

    /// Drops a `#` comment unless it is inside quotes; trims blanks.
    private static func stripComment(_ line: Substring) -> String {
        var inQuotes = false
        var previous: Character = " "
        var end = line.endIndex
        for index in line.indices {
            let c = line[index]
            if c == "\"" { inQuotes.toggle() }
            if c == "#", !inQuotes, previous == " " || previous == "\t" {
                end = index
                break
            }
            previous = c
        }
        return line[..<end].trimmingBlanks()
    }
}

extension StringProtocol {
    func trimmingBlanks() -> String {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" }
        guard let first = firstIndex(where: { !blank($0) }), let last = lastIndex(where: { !blank($0) }) else { return "" }
        return String(self[first...last])
    }
}
