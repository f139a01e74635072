import Foundation
import RPCSchema
import RPCTransport

/// The settings of `rpcd serve` from a file, layered: flags > file > built-in defaults.
///
/// Which file: `--config FILE`, else `$RPCD_CONFIG`, else `/etc/rpcd/rpcd.conf` if it exists,
/// else none. Every problem is reported as `FILE:LINE: message`.
public enum Config {
    public static let systemPath = "/etc/rpcd/rpcd.conf"

    /// The keys a file may set, in the order `check-config` prints them.
    public static let keys = [
        "listen", "data_dir", "fsync", "group_commit_delay", "compact_after_bytes", "max_frame_bytes", "max_output_bytes", "max_input_bytes",
        "max_connections", "idle_timeout", "line_timeout", "auth_timeout", "max_unauthenticated", "event_loops", "busy_poll", "idempotency_keys", "idempotency_window", "log_level",
    ] + AccessSettings.keys + TLSSettings.keys + ReplicationSettings.keys
    /// Keys that may appear more than once (each adds a value).
    static let repeatable: Set<String> = ["listen"]

    /// Problems found in a file, one `FILE:LINE: message` each.
    public struct Problems: Error, Sendable, CustomStringConvertible {
        public var lines: [String]
        public var description: String { lines.joined(separator: "\n") }
    }

    /// The file `serve` reads when given `options` (from flags) and `environment`; nil for none.
    /// A file named by `--config` or `$RPCD_CONFIG` must exist; the system one is optional.
    static func path(for options: ServeOptions, environment: [String: String]) -> (path: String, required: Bool)? {
        if let path = options.configPath { return (path, true) }
        if let path = environment["RPCD_CONFIG"], !path.isEmpty { return (path, true) }
        return FileManager.default.fileExists(atPath: systemPath) ? (systemPath, false) : nil
    }

    /// The effective settings: defaults, then the file (if any), then the keys set by flags; then,
    /// if neither set `auth_file`, systemd's credential `$CREDENTIALS_DIRECTORY/auth` if it exists.
    public static func effective(
        _ flags: ServeOptions, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(Problems) -> ServeOptions {
        var options = flags
        if let (path, _) = path(for: flags, environment: environment) {
            options = try load(path: path)
            merge(flags, into: &options)
        }
        if options.authFile == nil { options.authFile = AccessSettings.credentialAuthFile(environment: environment) }
        return options
    }

    /// Reads and checks a file on top of the built-in defaults.
    public static func load(path: String) throws(Problems) -> ServeOptions {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw Problems(lines: ["\(path): cannot read the settings file: \(Self.reason(error))"])
        }
        return try parse(ConfigFile(path: path, text: text))
    }

    /// Applies a parsed file to the built-in defaults; collects every problem, not just the first.
    static func parse(_ file: ConfigFile) throws(Problems) -> ServeOptions {
        var options = ServeOptions()
        var problems = file.problems
        var firstSeen: [String: Int] = [:]
        var fileListen: [String] = []
        for entry in file.entries {
            func problem(_ message: String) {
                problems.append(ConfigFile.Problem(file: file.path, line: entry.line, message: message))
            }
            guard keys.contains(entry.key) else {
                let hint = closestKey(to: entry.key).map { "; did you mean \"\($0)\"?" } ?? ""
                problem("unknown key \"\(entry.key)\"\(hint) (keys: \(keys.joined(separator: ", ")))")
                continue
            }
            if let first = firstSeen[entry.key], !repeatable.contains(entry.key) {
                problem("\(entry.key) is set twice (first on line \(first)); keep one")
                continue
            }
            firstSeen[entry.key] = firstSeen[entry.key] ?? entry.line
            if entry.key == "listen" {
                if let message = ConfigValue.checkListen(entry.value) { problem(message) } else { fileListen.append(entry.value) }
                continue
            }
            if let message = apply(entry.key, entry.value, to: &options) { problem(message) }
        }
        if !fileListen.isEmpty { options.listen = fileListen }
        guard problems.isEmpty else { throw Problems(lines: problems.sorted { $0.line < $1.line }.map(\.description)) }
        return options
    }

    /// Sets one non-listen key; returns a message when the value is bad.
    private static func apply(_ key: String, _ value: String, to options: inout ServeOptions) -> String? {
        switch key {
        case "data_dir":
            guard !value.isEmpty else { return "data_dir is empty; give a directory, e.g. /var/lib/rpcd" }
            options.dataDir = value
        case "fsync":
            guard let policy = FsyncPolicy(rawValue: value) else { return "fsync \"\(value)\" is not one of always, everysec, none" }
            options.fsync = policy
        case "max_frame_bytes":
            switch ConfigValue.bytes(value, in: SettingRanges.maxFrameBytes) {
            case .success(let bytes): options.maxFrameBytes = bytes
            case .failure(let problem): return "max_frame_bytes \"\(value)\" \(problem.reason)"
            }
        case "max_output_bytes":
            switch ConfigValue.bytes(value, in: SettingRanges.maxOutputBytes) {
            case .success(let bytes): options.maxOutputBytes = bytes
            case .failure(let problem): return "max_output_bytes \"\(value)\" \(problem.reason)"
            }
        case "max_input_bytes":
            switch ConfigValue.bytes(value, in: SettingRanges.maxInputBytes) {
            case .success(let bytes): options.maxInputBytes = bytes
            case .failure(let problem): return "max_input_bytes \"\(value)\" \(problem.reason)"
            }
        case "idempotency_keys":
            switch ConfigValue.count(value, in: SettingRanges.idempotencyKeys, zero: "remember none") {
            case .success(let n): options.idempotencyKeys = n
            case .failure(let problem): return "idempotency_keys \"\(value)\" \(problem.reason)"
            }
        case "idempotency_window":
            switch ConfigValue.seconds(value, in: SettingRanges.idempotencyWindow, zero: nil) {
            case .success(let seconds): options.idempotencyWindow = seconds
            case .failure(let problem): return "idempotency_window \"\(value)\" \(problem.reason)"
            }
        case "compact_after_bytes":
            switch ConfigValue.bytes(value, in: SettingRanges.compactAfterBytes) {
            case .success(let bytes): options.compactAfterBytes = bytes
            case .failure(let problem): return "compact_after_bytes \"\(value)\" \(problem.reason)"
            }
        case "max_connections":
            switch ConfigValue.count(value, in: SettingRanges.maxConnections, zero: "no limit") {
            case .success(let n): options.maxConnections = n
            case .failure(let problem): return "max_connections \"\(value)\" \(problem.reason)"
            }
        case "event_loops":
            switch ConfigValue.count(value, in: SettingRanges.eventLoops, zero: "half the cores") {
            case .success(let n): options.eventLoops = n
            case .failure(let problem): return "event_loops \"\(value)\" \(problem.reason)"
            }
        case "busy_poll":
            switch ConfigValue.seconds(value, in: SettingRanges.busyPoll, zero: "never") {
            case .success(let seconds): options.busyPoll = seconds
            case .failure(let problem): return "busy_poll \"\(value)\" \(problem.reason)"
            }
        case "group_commit_delay":
            switch ConfigValue.seconds(value, in: SettingRanges.groupCommitDelay, zero: "none") {
            case .success(let seconds): options.groupCommitDelay = seconds
            case .failure(let problem): return "group_commit_delay \"\(value)\" \(problem.reason)"
            }
        case "idle_timeout":
            switch ConfigValue.seconds(value, in: SettingRanges.idleTimeout, zero: "never") {
            case .success(let seconds): options.idleTimeout = seconds
            case .failure(let problem): return "idle_timeout \"\(value)\" \(problem.reason)"
            }
        case "line_timeout":
            switch ConfigValue.seconds(value, in: SettingRanges.idleTimeout, zero: "never") {
            case .success(let seconds): options.lineTimeout = seconds
            case .failure(let problem): return "line_timeout \"\(value)\" \(problem.reason)"
            }
        case "auth_timeout":
            switch ConfigValue.seconds(value, in: SettingRanges.idleTimeout, zero: "never") {
            case .success(let seconds): options.authTimeout = seconds
            case .failure(let problem): return "auth_timeout \"\(value)\" \(problem.reason)"
            }
        case "max_unauthenticated":
            switch ConfigValue.count(value, in: SettingRanges.maxConnections, zero: "automatic") {
            case .success(let n): options.maxUnauthenticated = n
            case .failure(let problem): return "max_unauthenticated \"\(value)\" \(problem.reason)"
            }
        case "log_level":
            guard let level = LogLevel(name: value) else { return "log_level \"\(value)\" is not one of debug, info, warning, error" }
            options.logLevel = level
        case _ where ReplicationSettings.keys.contains(key):
            if let problem = ReplicationSettings.apply(key, value, to: &options) { return "\(key) \"\(value)\" \(problem.reason)" }
        case _ where TLSSettings.keys.contains(key):
            if let problem = TLSSettings.apply(key, value, to: &options) { return "\(key) \"\(value)\" \(problem.reason)" }
        default:
            if let problem = AccessSettings.apply(key, value, to: &options) { return "\(key) \"\(value)\" \(problem.reason)" }
        }
        return nil
    }

    /// Copies every key set by a flag from `flags` over `options`.
    static func merge(_ flags: ServeOptions, into options: inout ServeOptions) {
        for key in flags.setByFlags {
            switch key {
            case "listen": options.listen = flags.listen
            case "data_dir": options.dataDir = flags.dataDir
            case "fsync": options.fsync = flags.fsync
            case "group_commit_delay": options.groupCommitDelay = flags.groupCommitDelay
            case "max_frame_bytes": options.maxFrameBytes = flags.maxFrameBytes
            case "max_output_bytes": options.maxOutputBytes = flags.maxOutputBytes
            case "max_input_bytes": options.maxInputBytes = flags.maxInputBytes
            case "compact_after_bytes": options.compactAfterBytes = flags.compactAfterBytes
            case "idempotency_keys": options.idempotencyKeys = flags.idempotencyKeys
            case "idempotency_window": options.idempotencyWindow = flags.idempotencyWindow
            case "max_connections": options.maxConnections = flags.maxConnections
            case "idle_timeout": options.idleTimeout = flags.idleTimeout
            case "line_timeout": options.lineTimeout = flags.lineTimeout
            case "auth_timeout": options.authTimeout = flags.authTimeout
            case "max_unauthenticated": options.maxUnauthenticated = flags.maxUnauthenticated
            case "event_loops": options.eventLoops = flags.eventLoops
            case "busy_poll": options.busyPoll = flags.busyPoll
            case "log_level": options.logLevel = flags.logLevel
            default:
                if !AccessSettings.merge(key, from: flags, into: &options) && !TLSSettings.merge(key, from: flags, into: &options) {
                    _ = ReplicationSettings.merge(key, from: flags, into: &options)
                }
            }
        }
        options.configPath = flags.configPath
        options.setByFlags = flags.setByFlags
    }

    /// The settings as a file that would produce them.
    public static func render(_ options: ServeOptions) -> String {
        var lines = options.listen.map { "listen = \($0)" }
        lines.append("data_dir = \(options.dataDir)")
        lines.append("fsync = \(options.fsync.rawValue)")
        lines.append("group_commit_delay = \(ConfigValue.render(seconds: options.groupCommitDelay))")
        lines.append("max_frame_bytes = \(options.maxFrameBytes)")
        lines.append("compact_after_bytes = \(options.compactAfterBytes)")
        lines.append("max_output_bytes = \(options.maxOutputBytes)")
        lines.append("max_input_bytes = \(options.maxInputBytes)")
        lines.append("idempotency_keys = \(options.idempotencyKeys)")
        lines.append("idempotency_window = \(ConfigValue.render(seconds: options.idempotencyWindow))")
        lines.append("max_connections = \(options.maxConnections)")
        lines.append("idle_timeout = \(ConfigValue.render(seconds: options.idleTimeout))")
        lines.append("line_timeout = \(ConfigValue.render(seconds: options.lineTimeout))")
        lines.append("auth_timeout = \(ConfigValue.render(seconds: options.authTimeout))")
        lines.append("max_unauthenticated = \(options.maxUnauthenticated)")
        lines.append("event_loops = \(options.eventLoops)")
        lines.append("busy_poll = \(ConfigValue.render(shortSeconds: options.busyPoll))")
        lines.append("log_level = \(options.logLevel)")
        lines += AccessSettings.render(options)
        lines += TLSSettings.render(options)
        lines += ReplicationSettings.render(options)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The valid key nearest to `key`, when it is near enough to be a typo.
    static func closestKey(to key: String) -> String? {
        Suggestion.closest(to: key, among: keys)
    }

    private static func reason(_ error: any Error) -> String {
        let ns = error as NSError
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return ns.code == NSFileReadNoSuchFileError ? "no such file" : ns.localizedDescription
    }
}

/// Value syntaxes shared by the file and the flags (the ranges are in `SettingRanges`).
enum ConfigValue {
    /// `300`, `1.5`, `50us`, `500ms`, `30s`, `5m`, `1h` -> seconds; nil if malformed, negative or not finite.
    static func seconds(_ text: String) -> Double? {
        guard let (value, scale) = durationParts(text), value >= 0, (value * scale).isFinite else { return nil }
        return value * scale
    }

    /// The number and the unit's length in seconds; nil unless the number is finite.
    static func durationParts(_ text: String) -> (value: Double, scale: Double)? {
        let units: [(String, Double)] = [("us", 0.000_001), ("µs", 0.000_001), ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]
        var number = text
        var scale = 1.0
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            number = String(text.dropLast(suffix.count))
            scale = factor
            break
        }
        guard let value = Double(number), value.isFinite else { return nil }
        // Microseconds divided, not multiplied by 1e-6: `50us` is then the same Double as 0.00005.
        return scale < 0.001 ? (value / 1_000_000, 1) : (value, scale)
    }

    static func render(seconds: Double) -> String {
        seconds == seconds.rounded() && seconds < 1e15 ? String(Int(seconds)) : String(seconds)
    }

    /// A duration below a millisecond in whole microseconds (`50us`), else as `render(seconds:)`.
    static func render(shortSeconds seconds: Double) -> String {
        let micros = seconds * 1e6
        return seconds > 0 && seconds < 0.001 && micros == micros.rounded() ? "\(Int(micros))us" : render(seconds: seconds)
    }

    static let byteUnits: [(String, Int)] = [
        ("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40),
        ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40),
    ]

    /// `1048576`, `64KiB`, `1MiB`, `1GiB`, `1TiB` (also `K`, `M`, `G`, `T`) -> bytes; nil if malformed or past Int.
    static func bytes(_ text: String) -> Int? {
        try? bytes(text, in: Int.min...Int.max).get()
    }

    /// A message when `text` is not an address `serve` can listen on.
    static func checkListen(_ text: String) -> String? {
        TLSSettings.parseListen(text) == nil
            ? "listen \"\(text)\" is not an address: use \(TLSSettings.acceptedListenForms)" : nil
    }
}
