/// What a load speaks: the bytes of each request and the check of each reply line. rpcd, Redis and
/// the floor each have one, so they share one load generator; `LoadThread` is generic over it, so
/// the hot loop calls them directly (specialized, no closure or existential per request). Sendable:
/// one value is shared by every load thread.
protocol LoadProtocol: Sendable {
    /// Appends request `seq` of connection `conn`, with its line end, to `out`.
    func appendRequest(conn: Int, seq: Int, into out: inout [UInt8])
    /// Judges `line` (without its `\n`), the reply to request `seq` of connection `conn`
    /// (replies come back in request order).
    func check(reply line: UnsafeRawBufferPointer, conn: Int, seq: Int) -> ReplyVerdict
}

enum ReplyVerdict {
    case ok
    /// A well-formed reply saying the request failed.
    case error
    /// A reply that is not the one to this request.
    case mismatch
}

/// rpcd's requests, built from fixed parts so the hot loop only appends an id and a number.
/// Replies are matched by their id (the first field, compared without decoding the line).
struct RPCDLoad: LoadProtocol {
    let workload: Options.Workload
    let users: Int
    let runTag: String
    /// Creates carry `"key":"k<tag>-<conn>-<seq>"` (exactly-once keys).
    var keyed = false

    func appendRequest(conn: Int, seq: Int, into out: inout [UInt8]) {
        out.append(contentsOf: #"{"id":"c"#.utf8)
        appendNumber(conn, &out)
        out.append(UInt8(ascii: "-"))
        appendNumber(seq, &out)
        if workload.creates(seq: seq) {
            out.append(contentsOf: #"","method":"user.createUser","param":{"id":"b"#.utf8)
            out.append(contentsOf: runTag.utf8)
            out.append(UInt8(ascii: "-"))
            appendNumber(conn, &out)
            out.append(UInt8(ascii: "-"))
            appendNumber(seq, &out)
            out.append(contentsOf: #"","name":"Bench","email":"bench@example.com"}"#.utf8)
            if keyed {
                out.append(contentsOf: #","key":"k"#.utf8)
                out.append(contentsOf: runTag.utf8)
                out.append(UInt8(ascii: "-"))
                appendNumber(conn, &out)
                out.append(UInt8(ascii: "-"))
                appendNumber(seq, &out)
                out.append(UInt8(ascii: "\""))
            }
            out.append(UInt8(ascii: "}"))
        } else {
            out.append(contentsOf: #"","method":"user.getUser","param":{"userId":"bench-u"#.utf8)
            appendNumber(workload.existingKey(conn: conn, seq: seq, users: users), &out)
            out.append(contentsOf: #""}}"#.utf8)
        }
        out.append(UInt8(ascii: "\n"))
    }

    func check(reply line: UnsafeRawBufferPointer, conn: Int, seq: Int) -> ReplyVerdict {
        // {"id":"c<conn>-<seq>"
        var at = 0
        guard Self.match(Self.idPrefix, in: line, at: &at), Self.match(conn, in: line, at: &at),
            Self.match(UInt8(ascii: "-"), in: line, at: &at), Self.match(seq, in: line, at: &at),
            Self.match(UInt8(ascii: "\""), in: line, at: &at)
        else { return .mismatch }
        // ,"method":"user.getUserResult" (or the create's), or ,"method":"error.error": rpcd writes
        // a reply's method right after its id, so the rest of the line is not scanned.
        var method = at
        if Self.match(workload.creates(seq: seq) ? Self.createResult : Self.getResult, in: line, at: &at) { return .ok }
        return Self.match(Self.errorMethod, in: line, at: &method) ? .error : .mismatch
    }

    private static let idPrefix = Array(#"{"id":"c"#.utf8)
    private static let getResult = Array(#","method":"user.getUserResult""#.utf8)
    private static let createResult = Array(#","method":"user.createUserResult""#.utf8)
    private static let errorMethod = Array(#","method":"error.error""#.utf8)

    private static func match(_ bytes: [UInt8], in line: UnsafeRawBufferPointer, at: inout Int) -> Bool {
        guard line.count - at >= bytes.count else { return false }
        for byte in bytes {
            guard line[at] == byte else { return false }
            at += 1
        }
        return true
    }

    private static func match(_ byte: UInt8, in line: UnsafeRawBufferPointer, at: inout Int) -> Bool {
        guard at < line.count, line[at] == byte else { return false }
        at += 1
        return true
    }

    /// Matches the decimal digits of `n` (≥ 0) without building them.
    private static func match(_ n: Int, in line: UnsafeRawBufferPointer, at: inout Int) -> Bool {
        var digits = 1
        var rest = n / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        guard line.count - at >= digits else { return false }
        rest = n
        for i in stride(from: at + digits - 1, through: at, by: -1) {
            guard line[i] == UInt8(ascii: "0") + UInt8(rest % 10) else { return false }
            rest /= 10
        }
        at += digits
        return true
    }
}

/// Redis's equivalent of the load: `SET key{n} value` as an inline command for every request (over the
/// users' keys where rpcd gets a user, a fresh key where it creates one); every reply must be `+OK`.
struct RedisLoad: LoadProtocol {
    let workload: Options.Workload
    let users: Int
    let conns: Int

    func appendRequest(conn: Int, seq: Int, into out: inout [UInt8]) {
        out.append(contentsOf: "SET key".utf8)
        let key = workload.creates(seq: seq) ? users + seq * conns + conn : workload.existingKey(conn: conn, seq: seq, users: users)
        appendNumber(key, &out)
        out.append(contentsOf: " value\r\n".utf8)
    }

    func check(reply line: UnsafeRawBufferPointer, conn: Int, seq: Int) -> ReplyVerdict {
        let count = line.last == UInt8(ascii: "\r") ? line.count - 1 : line.count
        return count == 3 && line[0] == UInt8(ascii: "+") && line[1] == UInt8(ascii: "O") && line[2] == UInt8(ascii: "K") ? .ok : .error
    }
}

/// The floor's load: rpcd's request lines, and any line back counts (the floor answers each line
/// with one fixed line and parses nothing).
struct FloorLoad: LoadProtocol {
    let requests: RPCDLoad

    func appendRequest(conn: Int, seq: Int, into out: inout [UInt8]) {
        requests.appendRequest(conn: conn, seq: seq, into: &out)
    }

    func check(reply line: UnsafeRawBufferPointer, conn: Int, seq: Int) -> ReplyVerdict { .ok }
}

extension Options.Workload {
    /// Whether request `seq` of this workload writes (mixed: one in ten).
    func creates(seq: Int) -> Bool { self == .create || (self == .mixed && seq % 10 == 0) }

    /// The existing key (user number) a read of request `seq` on connection `conn` uses.
    func existingKey(conn: Int, seq: Int, users: Int) -> Int { (seq &* 7919 &+ conn) % users }
}

@inline(__always) func appendNumber(_ n: Int, _ out: inout [UInt8]) {
    if n >= 10 { appendNumber(n / 10, &out) }
    out.append(UInt8(ascii: "0") + UInt8(n % 10))
}

/// How many times `needle` occurs in `haystack` (a plain byte scan: no String, no Foundation).
func countOccurrences(of needle: [UInt8], in haystack: UnsafeRawBufferPointer) -> Int {
    guard haystack.count >= needle.count, let first = needle.first else { return 0 }
    var found = 0
    var start = 0
    while start <= haystack.count - needle.count {
        if haystack[start] == first && needle.indices.allSatisfy({ haystack[start + $0] == needle[$0] }) {
            found += 1
            start += needle.count
        } else {
            start += 1
        }
    }
    return found
}
