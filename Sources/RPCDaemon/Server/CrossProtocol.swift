import RPCSchema

/// Lines that are not ours but another protocol's: an HTTP request line or header. A web page can
/// make the operator's browser send `POST /` with a `text/plain` body (an HTML form needs no
/// script), so a daemon that skips the lines it cannot parse would run the JSON in the body
/// (Redis closes on `POST` and `Host:` for the same reason). Such a line ends its connection.
enum CrossProtocol {
    /// A header a browser sends with every request; matched case-insensitively, before its colon.
    private static let headers: [[UInt8]] = [
        "host", "origin", "referer", "user-agent", "content-type", "content-length", "accept", "connection", "cookie",
    ].map { Array($0.utf8) }

    /// True when `line` starts like `METHOD SP /target` or ends with ` HTTP/1.x`, or is a header
    /// above. Only lines that start with a letter are looked at: a request starts with `{`.
    static func isHTTP(_ line: UnsafeRawBufferPointer) -> Bool {
        guard let first = line.first, isLetter(first) else { return false }
        if line.count >= 9 {
            let tail = line[(line.count - 9)...]
            if tail.starts(with: " HTTP/1.".utf8) || tail.starts(with: " HTTP/2.".utf8) { return true }
        }
        var index = 0
        while index < line.count, index < 20, isUpper(line[index]) || line[index] == UInt8(ascii: "-") { index += 1 }
        if index > 0, index + 1 < line.count, line[index] == UInt8(ascii: " ") {
            let target = line[index + 1]
            if target == UInt8(ascii: "/") || target == UInt8(ascii: "*") { return true }
        }
        guard let colon = line.prefix(32).firstIndex(of: UInt8(ascii: ":")) else { return false }
        let name = line[..<colon].map { isUpper($0) ? $0 | 0x20 : $0 }
        return headers.contains(name)
    }

    /// The answer to an HTTP request that opens a connection: a 400 whose body says what rpcd
    /// speaks and how to reach it (what `curl http://HOST:PORT/` then shows).
    static func badRequest(listener: String) -> [UInt8] {
        let body = "rpcd speaks newline-delimited JSON over TCP, not HTTP: connect with nc \(listener.replacingColon) "
            + "and send one request per line, e.g. {\"id\":\"1\",\"method\":\"system.ping\",\"param\":{}}\n"
        let head = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
        return Array((head + body).utf8)
    }

    private static func isLetter(_ byte: UInt8) -> Bool { isUpper(byte) || (byte >= 0x61 && byte <= 0x7A) }
    private static func isUpper(_ byte: UInt8) -> Bool { byte >= 0x41 && byte <= 0x5A }
}

extension String {
    /// `127.0.0.1:7878` as nc takes it (`127.0.0.1 7878`; `[::1]:7878` as `::1 7878`).
    fileprivate var replacingColon: String {
        guard let colon = lastIndex(of: ":"), !hasPrefix("unix:") else { return self }
        var host = self[..<colon]
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        return "\(host) \(self[index(after: colon)...])"
    }
}
