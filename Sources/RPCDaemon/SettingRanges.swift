/// The values every numeric setting may take. Flags, the config file, `check-config`, `--help`,
/// config/rpcd.conf and README all state these; a value outside is a usage error at start (exit 2),
/// never a trap later (a timeout of 1e300 s once reached `UInt64(seconds * 1e9)`).
enum SettingRanges {
    /// Longest request line. Below 64 bytes not even `system.ping` fits.
    static let maxFrameBytes = 64...(64 << 20)
    /// Replies buffered for a peer that does not read.
    static let maxOutputBytes = (1 << 10)...(1 << 30)
    /// Unfinished request lines all peers together may hold (at least one maximal line per loop).
    static let maxInputBytes = (1 << 20)...(1 << 40)
    /// Idempotency keys remembered (0: keys are accepted but not remembered).
    static let idempotencyKeys = 0...100_000_000
    /// Seconds an idempotency key is remembered.
    static let idempotencyWindow = 1.0...(30 * 86_400.0)
    /// 0 means no limit.
    static let maxConnections = 0...1_000_000
    /// Threads serving connections; 0 means automatic.
    static let eventLoops = 0...256
    /// Journal size that starts a compaction (small values are for tests that compact often).
    static let compactAfterBytes = (4 << 10)...(1 << 40)
    /// Seconds the journal writer waits for more mutations before an fsync; 0 (none) is allowed
    /// besides this range. At most 0.1 s: every durable reply waits this long on top of its fsync.
    static let groupCommitDelay = 0.0001...0.1
    /// Seconds a waiting loop polls before it sleeps; 0 (never) is allowed besides this range. At
    /// most 1 ms: that much CPU after each request of a peer that sends one at a time.
    static let busyPoll = 0.000_001...0.001
    /// Seconds; 0 (never) is allowed besides this range.
    static let idleTimeout = 0.001...(30 * 86_400.0)
    /// Followers that must journal a mutation before it is acknowledged (a leader feeds 128 at most).
    static let minSyncReplicas = 0...127
    /// Seconds a mutation waits for them.
    static let syncTimeout = 0.01...3600.0
    /// Seconds a member's coordinator lease lasts.
    static let leaderTTL = 2.0...60.0
    /// Records a follower may lag and still be elected.
    static let maxFailoverLag = 0...1_000_000_000
    /// Seconds `rpcd call` waits for the connection and the reply together.
    static let callTimeout = 0.001...(30 * 86_400.0)

    /// `64 to 67108864 bytes (64 B to 64 MiB)`
    static func describe(bytes range: ClosedRange<Int>) -> String {
        "\(range.lowerBound) to \(range.upperBound) bytes (\(human(bytes: range.lowerBound)) to \(human(bytes: range.upperBound)))"
    }

    /// `0 (never) or 0.001 to 2592000 seconds (1 ms to 30 days)`
    static func describe(seconds range: ClosedRange<Double>, zero: String?) -> String {
        let span = "\(ConfigValue.render(seconds: range.lowerBound)) to \(ConfigValue.render(seconds: range.upperBound)) seconds "
            + "(\(human(seconds: range.lowerBound)) to \(human(seconds: range.upperBound)))"
        return zero.map { "0 (\($0)) or \(span)" } ?? span
    }

    /// `0 (no limit) to 1000000`
    static func describe(count range: ClosedRange<Int>, zero: String?) -> String {
        let low = range.lowerBound == 0 ? zero.map { "0 (\($0))" } ?? "0" : "\(range.lowerBound)"
        return "\(low) to \(range.upperBound)"
    }

    /// 67108864 -> `64 MiB`; a number that is no whole unit stays in bytes.
    static func human(bytes: Int) -> String {
        for (name, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] where bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return "\(bytes >> shift) \(name)"
        }
        return "\(bytes) B"
    }

    /// 2592000 -> `30 days`, 0.001 -> `1 ms`.
    static func human(seconds: Double) -> String {
        if seconds < 0.001 { return "\(ConfigValue.render(seconds: (seconds * 1e6).rounded())) µs" }
        if seconds < 1 { return "\(ConfigValue.render(seconds: seconds * 1000)) ms" }
        for (name, length) in [("days", 86_400.0), ("h", 3600), ("min", 60)] where seconds >= length && seconds.truncatingRemainder(dividingBy: length) == 0 {
            return "\(ConfigValue.render(seconds: seconds / length)) \(name)"
        }
        return "\(ConfigValue.render(seconds: seconds)) s"
    }
}

extension ConfigValue {
    /// Bytes (`1048576`, `64KiB`, `1MiB`, `1GiB`, `1TiB`; also `K`, `M`, `G`, `T`) within `range`,
    /// or why not: a reason that follows the setting's name and value in a message.
    static func bytes(_ text: String, in range: ClosedRange<Int>) -> Result<Int, Problem> {
        let allowed = "allowed: \(SettingRanges.describe(bytes: range))"
        var number = Substring(text)
        var factor = 1
        for (suffix, scale) in byteUnits where text.hasSuffix(suffix) {
            number = text.dropLast(suffix.count)
            factor = scale
            break
        }
        let digits = number.first == "-" || number.first == "+" ? number.dropFirst() : number
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return .failure(Problem("is not a whole number of bytes (e.g. 1048576 or 1MiB); \(allowed)"))
        }
        // Too many digits for Int, or a product past it, is out of range like any other big number.
        guard let n = Int(number), case (let product, false) = n.multipliedReportingOverflow(by: factor), range.contains(product) else {
            return .failure(Problem("is out of range; \(allowed)"))
        }
        return .success(product)
    }

    /// A whole number within `range`; `zero` says what 0 means, for the message.
    static func count(_ text: String, in range: ClosedRange<Int>, zero: String?) -> Result<Int, Problem> {
        let allowed = "allowed: \(SettingRanges.describe(count: range, zero: zero))"
        let digits = text.first == "-" || text.first == "+" ? Substring(text).dropFirst() : Substring(text)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
            return .failure(Problem("is not a whole number; \(allowed)"))
        }
        guard let n = Int(text), range.contains(n) else { return .failure(Problem("is out of range; \(allowed)")) }
        return .success(n)
    }

    /// A duration (`300`, `1.5`, `500ms`, `30s`, `5m`, `1h`) in seconds within `range`, or exactly 0
    /// when `zero` says what 0 means. NaN, infinities and negative values are refused.
    static func seconds(_ text: String, in range: ClosedRange<Double>, zero: String?) -> Result<Double, Problem> {
        let allowed = "allowed: \(SettingRanges.describe(seconds: range, zero: zero))"
        guard let (value, scale) = durationParts(text) else {
            return .failure(Problem("is not a duration like 300, 30s, 5m or 1h; \(allowed)"))
        }
        let seconds = value * scale
        if seconds == 0 && zero != nil { return .success(0) }
        guard seconds.isFinite, range.contains(seconds) else { return .failure(Problem("is out of range; \(allowed)")) }
        return .success(seconds)
    }

    /// Why a value is refused, e.g. `is out of range; allowed: 0 to 1000000`.
    struct Problem: Error, Equatable {
        var reason: String
        init(_ reason: String) { self.reason = reason }
    }
}
