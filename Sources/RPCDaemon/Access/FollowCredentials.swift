import RPCClient

/// The credentials a follower sends to its leader (`follow_auth_file`): a file holding one line
/// `NAME:TOKEN` (the name and the token `rpcd auth add NAME replicate` printed on the leader),
/// besides `#` comment lines and blank lines. The token is read from a file, never from the
/// command line, where `ps` would show it, and never logged: problems name the file and the line.
enum FollowCredentials {
    static let format = "NAME:TOKEN"

    /// Reads and checks the file at `path`, its owner and mode too (`SecretFile`); `warn` hears of
    /// a file others may read.
    static func load(path: String, warn: (String) -> Void) throws(AuthFile.Problems) -> RPCCredentials {
        guard let bytes = try SecretFile.followCredentials.read(path, warn: warn) else {
            throw AuthFile.Problems(lines: [
                "\(path): no such file; write the leader's principal there as \(format) (rpcd auth add NAME replicate on the leader prints the token)",
            ])
        }
        return try parse(path: path, bytes: bytes)
    }

    /// Parses `bytes`, naming `path` in problems (never the token).
    static func parse(path: String, bytes: [UInt8]) throws(AuthFile.Problems) -> RPCCredentials {
        var found: (name: String, token: String, line: Int)?
        var problems: [String] = []
        var number = 0
        for raw in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            number += 1
            let decoded = String(decoding: raw, as: UTF8.self)
            let text = (decoded.hasSuffix("\r") ? String(decoded.dropLast()) : decoded).trimmingBlanks()
            if text.isEmpty || text.hasPrefix("#") { continue }
            guard decoded.utf8.elementsEqual(raw), let colon = text.firstIndex(of: ":") else {
                problems.append("\(path):\(number): expected \(format) (UTF-8, on one line), e.g. follower-1:<the token>")
                continue
            }
            let name = String(text[..<colon])
            let token = String(text[text.index(after: colon)...])
            if let problem = AuthFile.nameProblem(name) {
                problems.append("\(path):\(number): \(problem)")
            } else if token.isEmpty || token.contains(where: { $0 == " " || $0 == "\t" }) {
                problems.append("\(path):\(number): the token after \"\(name):\" is empty or has blanks; paste the token rpcd auth add printed")
            } else if let first = found {
                problems.append("\(path):\(number): a second \(format) line (the first is line \(first.line)); keep one")
            } else {
                found = (name, token, number)
            }
        }
        guard problems.isEmpty else { throw AuthFile.Problems(lines: problems) }
        guard let found else {
            throw AuthFile.Problems(lines: ["\(path): holds no \(format) line; write the leader's principal there"])
        }
        return .token(name: found.name, secret: found.token)
    }
}
