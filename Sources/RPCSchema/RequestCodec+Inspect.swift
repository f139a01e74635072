extension RequestCodec {
    /// Whether a line written by `encode` is an `error.error` counter-request, without parsing it:
    /// the id comes first, then the method (the fixed key order of the wire contract), so only the
    /// id string is scanned. For statistics.
    public static func isErrorReply(_ line: [UInt8]) -> Bool {
        let idPrefix = Array(#"{"id":""#.utf8)
        guard line.count > idPrefix.count, line.starts(with: idPrefix) else { return false }
        var index = idPrefix.count
        while index < line.count, line[index] != UInt8(ascii: "\"") {
            index += line[index] == UInt8(ascii: "\\") ? 2 : 1
        }
        let rest = line[min(index + 1, line.count)...]
        return rest.starts(with: canonicalErrorMethod) || rest.starts(with: seedErrorMethod)
    }

    private static let canonicalErrorMethod = Array(#","method":"error.error""#.utf8)
    private static let seedErrorMethod = Array(#","method":{"error":{"_0":"error"}}"#.utf8)
}
