import Foundation

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
func parseNetcatSessions(readme: String) throws -> [NetcatSession] {
    let lines = readme.components(separatedBy: "\n").map {
        $0.hasSuffix("\r") ? String($0.dropLast()) : $0
    }
    var sessions: [NetcatSession] = []
    var i = 0
    var foundMarker = false
    while i < lines.count {
        guard lines[i].trimmingCharacters(in: .whitespaces) == "<!-- netcat-session -->" else {
            i += 1
            continue
        }
        foundMarker = true
        i += 1
        while i < lines.count && lines[i].trimmingCharacters(in: .whitespaces).isEmpty { i += 1 }
        guard i < lines.count, lines[i].trimmingCharacters(in: .whitespaces).hasPrefix("```") else {
            throw HarnessError("README: `<!-- netcat-session -->` must be followed by a fenced ``` block")
        }
        i += 1
        var current: NetcatSession?
        while i < lines.count && !lines[i].trimmingCharacters(in: .whitespaces).hasPrefix("```") {
            let line = lines[i]
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            i += 1
            if trimmed.isEmpty { continue }
            if trimmed.hasPrefix("$") {
                if trimmed.hasPrefix("$ nc") {
                    if let done = current { sessions.append(done) }
                    current = NetcatSession()
                }
                continue
            }
            guard current != nil else {
                throw HarnessError("README netcat block: JSON line before any `$ nc` line: \(line)")
            }
            if try isCounterRequest(line) {
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
        throw HarnessError("README.md has no `<!-- netcat-session -->` line followed by a fenced netcat session")
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
