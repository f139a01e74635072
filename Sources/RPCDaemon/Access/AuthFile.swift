import RPCSchema
import RPCTransport

/// The auth file (`auth_file`): who may authenticate with `system.auth`, and with which role.
///
/// One principal per line, `NAME ROLE SECRET-HASH`, fields separated by blanks; `#` starts a
/// comment (at the start of a line or after a blank); blank lines are skipped.
/// - NAME: 1 to 64 of `A-Z a-z 0-9 . _ -`, each name once;
/// - ROLE: `read`, `write`, `replicate` or `admin` (`RPCRole`);
/// - SECRET-HASH: SHA-256 of the token's UTF-8 bytes, 64 lowercase hex digits; or
///   `cert:NAME`: a TLS peer whose verified client certificate carries NAME as its subject's CN
///   or a DNS name is this principal without `system.auth` (it has no token).
///
/// `rpcd auth add NAME ROLE` writes such lines; the token itself is never stored. Every problem
/// is reported as `FILE:LINE: message`, all of them at once.
struct AuthFile: Sendable, Equatable {
    struct Principal: Sendable, Equatable {
        var name: String
        var role: RPCRole
        /// SHA-256 of the token (32 bytes); empty for a certificate principal.
        var secretHash: [UInt8]
        /// The certificate name (CN or DNS name) of a `cert:` principal; nil for a token's.
        var certificateName: String? = nil
        /// 1-based line in the file.
        var line: Int
    }

    /// What is wrong with a file: one `FILE:LINE: message` (or `FILE: message`) per line.
    struct Problems: Error, Sendable, Equatable, CustomStringConvertible {
        var lines: [String]
        var description: String { lines.joined(separator: "\n") }
    }

    static let maxNameLength = 64
    static let format = "NAME ROLE SECRET-HASH"

    var path: String
    /// By name.
    private(set) var principals: [String: Principal] = [:]

    var names: [String] { principals.keys.sorted() }

    /// Reads and checks the file at `path` (through `FileIO`, so through `Syscall`), its owner and
    /// mode too (`SecretFile`); `warn` hears of a file others may read.
    static func load(path: String, warn: (String) -> Void) throws(Problems) -> AuthFile {
        guard let bytes = try SecretFile.authFile.read(path, warn: warn) else {
            throw Problems(lines: ["\(path): no such auth file; create it with rpcd auth add NAME ROLE --file \(path), or fix auth_file"])
        }
        return try AuthFile(path: path, bytes: bytes)
    }

    /// Parses `bytes`, naming `path` in problems.
    init(path: String, bytes: [UInt8]) throws(Problems) {
        self.path = path
        var problems: [String] = []
        var number = 0
        for raw in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            number += 1
            let line = raw.last == UInt8(ascii: "\r") ? raw.dropLast() : raw[...]
            let text = String(decoding: line, as: UTF8.self)
            guard text.utf8.elementsEqual(line) else {
                problems.append("\(path):\(number): not UTF-8 text; write \(Self.format), e.g. with rpcd auth add NAME ROLE")
                continue
            }
            let fields = Self.fields(text)
            if fields.isEmpty { continue }
            switch Self.principal(fields, line: number) {
            case .failure(let message):
                problems.append("\(path):\(number): \(message)")
            case .success(let principal):
                if let first = principals[principal.name] {
                    problems.append("\(path):\(number): name \"\(principal.name)\" is already on line \(first.line); keep one line per name")
                } else {
                    principals[principal.name] = principal
                }
            }
        }
        guard problems.isEmpty else { throw Problems(lines: problems) }
    }

    /// The role of `name` if `token` is its secret; nil otherwise. The token is hashed and the hash
    /// compared in constant time, and an unknown name is compared against a dummy hash the same
    /// way, so the time taken tells neither how much of a token matched nor whether a name exists.
    /// Names match byte for byte: `String`'s `==` (and so a dictionary's lookup) takes U+212A
    /// KELVIN SIGN for `K`, which would let a look-alike authenticate and be logged as itself.
    func authenticate(name: String, token: String) -> (name: String, role: RPCRole)? {
        let presented = Token.hash(token)
        let principal = principals[name].flatMap { $0.name.utf8.elementsEqual(name.utf8) && $0.certificateName == nil ? $0 : nil }
        let matches = ConstantTime.equal(presented, principal?.secretHash ?? Self.dummyHash)
        guard let principal, matches else { return nil }
        return (principal.name, principal.role)
    }

    /// The principal a verified client certificate names: the first `cert:` line whose name is
    /// one of `names` (its CN and DNS names), byte for byte.
    func principal(forCertificateNames names: [String]) -> (name: String, role: RPCRole)? {
        guard !names.isEmpty else { return nil }
        let match = principals.values.filter { principal in
            guard let wanted = principal.certificateName else { return false }
            return names.contains { $0.utf8.elementsEqual(wanted.utf8) }
        }.min { $0.line < $1.line }
        return match.map { ($0.name, $0.role) }
    }

    /// A hash no token has (it is not any token's SHA-256 that anyone knows), compared against
    /// when the name is unknown.
    private static let dummyHash = SHA256.hash(Array("rpcd: no principal has this name".utf8))

    /// The line `rpcd auth add` appends for `name` with `token`.
    static func line(name: String, role: RPCRole, token: String) -> String {
        "\(name) \(role.rawValue) \(Hex.encode(Token.hash(token)))"
    }

    /// Why `name` cannot be a principal's name, or nil if it can.
    static func nameProblem(_ name: String) -> String? {
        let allowed = { (byte: UInt8) -> Bool in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                return true
            default:
                return false
            }
        }
        guard (1...maxNameLength).contains(name.utf8.count), name.utf8.allSatisfy(allowed) else {
            return "name \"\(Echo.text(name, maxBytes: 80))\" is not 1 to \(maxNameLength) of A-Z a-z 0-9 . _ -; pick a name like app-1"
        }
        return nil
    }

    /// Why `text` is not a role, with a did-you-mean; nil if it is one.
    static func role(_ text: String) -> Result<RPCRole, Message> {
        if let role = RPCRole.allCases.first(where: { $0.rawValue.utf8.elementsEqual(text.utf8) }) { return .success(role) }
        let hint = Suggestion.hint(for: text, among: RPCRole.allCases.map(\.rawValue))
        // A long value may be a token pasted into the wrong column: problems get logged, so it is not repeated.
        let shown = text.utf8.count <= 16 ? "role \"\(text)\"" : "the role (\(text.utf8.count) characters)"
        return .failure(Message("\(shown) is not one of \(RPCRole.names)\(hint)"))
    }

    struct Message: Error, Equatable, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// One line's fields, without its comment.
    private static func fields(_ line: String) -> [Substring] {
        var kept: [Substring] = []
        for field in line.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
            if field.hasPrefix("#") { break }
            kept.append(field)
        }
        return kept
    }

    private static func principal(_ fields: [Substring], line: Int) -> Result<Principal, Message> {
        guard fields.count == 3 else {
            return .failure(Message("expected \(format) (3 fields), found \(fields.count); rpcd auth add NAME ROLE writes such lines (NAME ROLE cert:CN for a TLS client certificate)"))
        }
        let name = String(fields[0])
        if let problem = nameProblem(name) { return .failure(Message(problem)) }
        let role: RPCRole
        switch Self.role(String(fields[1])) {
        case .success(let value): role = value
        case .failure(let message): return .failure(message)
        }
        let hex = fields[2]
        if hex.hasPrefix("cert:") {
            let certificateName = String(hex.dropFirst(5))
            guard !certificateName.isEmpty, certificateName.utf8.count <= 255 else {
                return .failure(Message("cert: of \"\(name)\" needs the certificate's CN or DNS name after it, e.g. cert:app.example.com"))
            }
            return .success(Principal(name: name, role: role, secretHash: [], certificateName: certificateName, line: line))
        }
        guard hex.utf8.count == 2 * SHA256.byteCount, let hash = Hex.decode(lowercase: hex) else {
            let what = Hex.decode(lowercase: hex.lowercased()) != nil && hex.utf8.count == 64
                ? "has uppercase digits; write it in lowercase"
                : "is not 64 lowercase hex digits (SHA-256 of the token; found \(hex.utf8.count) characters)"
            return .failure(Message("the secret hash of \"\(name)\" \(what); rpcd auth add writes it"))
        }
        return .success(Principal(name: name, role: role, secretHash: hash, line: line))
    }
}
