import Foundation
import RPCSchema

/// How much the daemon says.
public enum LogLevel: Int, Comparable, Sendable, CaseIterable, CustomStringConvertible {
    case debug, info, warning, error

    public init?(name: String) {
        guard let level = Self.allCases.first(where: { $0.description == name.lowercased() }) else { return nil }
        self = level
    }

    public var description: String {
        switch self {
        case .debug: return "debug"
        case .info: return "info"
        case .warning: return "warning"
        case .error: return "error"
        }
    }

    /// The syslog priority journald reads from a `<N>` line prefix.
    var syslogPriority: Int {
        switch self {
        case .debug: return 7
        case .info: return 6
        case .warning: return 4
        case .error: return 3
        }
    }

    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// A tiny logger (swift-log's shape): one line per event on stderr, messages built only when the
/// level is enabled. Under systemd (`$JOURNAL_STREAM` set) each line starts with `<N>` so journald
/// records its priority and adds its own timestamp.
///
/// Logging never blocks the caller: lines go to the sink's bounded queue and a thread of its own
/// writes them (see `LogSink`). Warnings with a `key` are rate-limited per key.
public struct Logger: Sendable {
    public var level: LogLevel
    private let format: LogFormat
    private let sink: LogSink

    public init(level: LogLevel, environment: [String: String] = ProcessInfo.processInfo.environment, sink: LogSink = .stderr) {
        self.level = level
        self.format = LogFormat(forJournal: environment["JOURNAL_STREAM"] != nil)
        self.sink = sink
    }

    /// Logs `message` at `level`. With a `key` (one cause, from a fixed set such as "oversize",
    /// never per connection), the first line in each window of the sink's `rateWindow` (10 s) is
    /// logged and the rest are counted, then summed up: "… and 4,999 more in the last 10 s".
    public func log(_ level: LogLevel, key: String? = nil, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        // Peer-controlled text reaches messages (names, methods, addresses): one escape for all of it.
        sink.post(level, Echo.escaped(message()), key: key, format: format)
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    /// A warning rate-limited per `key` (see `log(_:key:_:)`).
    public func warning(key: String, _ message: @autoclosure () -> String) { log(.warning, key: key, message()) }

    /// Waits until every line logged so far is written (and rate-limit summaries with them), at
    /// most `timeout` seconds; for the exit paths. False when stderr did not take them in time.
    @discardableResult
    public func flush(timeout: Double = LogSink.exitFlushSeconds) -> Bool { sink.flush(timeout: timeout) }
}

/// How a line looks: `<6>text` for journald, else `2025-01-01T00:00:00.000Z info text`.
struct LogFormat: Sendable {
    var forJournal: Bool

    func line(_ level: LogLevel, _ text: String) -> String {
        forJournal ? "<\(level.syslogPriority)>\(text)\n" : "\(Self.timestamp()) \(level) \(text)\n"
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec), Int(now.tv_nsec / 1_000_000))
    }
}
