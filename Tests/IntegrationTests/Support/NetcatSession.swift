import Foundation
import Testing

/// One `$ nc ...` session from the README: the request lines fed to nc, and the reply lines nc
/// must print, in order.
struct NetcatSession {
    var requests: [String] = []
    var expectedReplies: [String] = []
}

/// Parses every fenced block that follows a `<!-- netcat-session -->` line. Inside a block, each
/// line starting with `$ nc` starts a new session; other `$` lines and blank lines are skipped;
/// every other line must be JSON: a counter-request (method ending in `Result` or `error.error`, in
/// canonical or seed form) is an expected reply, anything else is a request.
///
/// With `marker: "<!-- feed-session -->"` and `isReply: isFeedOutput` the same reads the change
/// feed's session, where the journal lines a subscriber receives (they carry `"seq"`) are output too.
func parseNetcatSessions(
    readme: String, marker: String = "<!-- netcat-session -->", command: String = "$ nc",
    isReply: (String) throws -> Bool = isCounterRequest
) throws -> [NetcatSession] {
    let lines = readme.components(separatedBy: "\n").map {
        $0.hasSuffix("\r") ? String($0.dropLast()) : $0
    }
    var sessions: [NetcatSession] = []
    var i = 0
    var foundMarker = false
    while i < lines.count {
        guard lines[i].trimmingCharacters(in: .whitespaces) == marker else {
            i += 1
            continue
        }
        foundMarker = true
        i += 1
        while i < lines.count && lines[i].trimmingCharacters(in: .whitespaces).isEmpty { i += 1 }
        guard i < lines.count, lines[i].trimmingCharacters(in: .whitespaces).hasPrefix("```") else {
            throw HarnessError("README: `\(marker)` must be followed by a fenced ``` block")
        }
        i += 1
        var current: NetcatSession?
        while i < lines.count && !lines[i].trimmingCharacters(in: .whitespaces).hasPrefix("```") {
            let line = lines[i]
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            i += 1
            if trimmed.isEmpty { continue }
            if trimmed.hasPrefix("$") {
                if trimmed.hasPrefix(command) {
                    if let done = current { sessions.append(done) }
                    current = NetcatSession()
                }
                continue
            }
            guard current != nil else {
                throw HarnessError("README netcat block: JSON line before any `$ nc` line: \(line)")
            }
            if try isReply(line) {
                current!.expectedReplies.append(line)
            } else {
                current!.requests.append(line)
            }
        }
        if i >= lines.count { throw HarnessError("README: unterminated netcat-session fenced block") }
        i += 1  // closing fence
        if let done = current { sessions.append(done) }
    }
    if !foundMarker {
        throw HarnessError("README.md has no `\(marker)` line followed by a fenced netcat session")
    }
    return sessions
}

/// Whether a README JSON line is a counter-request (an expected reply).
func isCounterRequest(_ line: String) throws -> Bool {
    guard let data = line.data(using: .utf8),
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
    else { throw HarnessError("README netcat block: line is neither `$ nc ...` nor a JSON object: \(line)") }
    switch object["method"] {
    case let method as String:
        return method.hasSuffix("Result") || method == "error.error"
    case let seed as [String: Any]:
        if seed["error"] != nil { return true }
        return seed.values.contains { (($0 as? [String: Any])?["_0"] as? String)?.hasSuffix("Result") == true }
    default:
        return false
    }
}

/// Whether a README line of the feed session is output: a counter-request, or a journal line
/// (`"seq"`) that a subscriber receives.
func isFeedOutput(_ line: String) throws -> Bool {
    if try isCounterRequest(line) { return true }
    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
    return object?["seq"] != nil
}

/// `nc` from PATH, or nil after recording an issue that says how to install it.
func netcatOrIssue(sourceLocation: SourceLocation = #_sourceLocation) -> String? {
    if let nc = Binaries.onPath("nc") { return nc }
    Issue.record("`nc` is not installed: install netcat-openbsd (apt-get install netcat-openbsd); CI installs it", sourceLocation: sourceLocation)
    return nil
}

/// README.md's text, or nil after recording an issue.
func readmeOrIssue(sourceLocation: SourceLocation = #_sourceLocation) -> String? {
    guard let root = packageRoot() else {
        Issue.record("no Package.swift above \(#filePath)", sourceLocation: sourceLocation)
        return nil
    }
    let url = root.appendingPathComponent("README.md")
    guard let text = try? String(contentsOf: url, encoding: .utf8) else {
        Issue.record("README.md not found at \(url.path)", sourceLocation: sourceLocation)
        return nil
    }
    return text
}
