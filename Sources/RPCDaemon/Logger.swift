import Foundation

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
public struct Logger: Sendable {
    public var level: LogLevel
    private let forJournal: Bool
    private let sink: LogSink

    public init(level: LogLevel, environment: [String: String] = ProcessInfo.processInfo.environment, sink: LogSink = .stderr) {
        self.level = level
        self.forJournal = environment["JOURNAL_STREAM"] != nil
        self.sink = sink
    }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        let text = message().replacingOccurrences(of: "\n", with: " ")
        if forJournal {
            sink.write("<\(level.syslogPriority)>\(text)\n")
        } else {
            sink.write("\(Self.timestamp()) \(level) \(text)\n")
        }
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }

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

/// Where log lines go: one locked write per line, so lines from different queues never interleave.
public final class LogSink: @unchecked Sendable {
    // @unchecked: `write` holds `lock` for the whole write.
    private let lock = NSLock()
    private let fd: Int32

    public init(fd: Int32) { self.fd = fd }
    public static let stderr = LogSink(fd: 2)

    public func write(_ line: String) {
        lock.lock()
        defer { lock.unlock() }
        let bytes = Array(line.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Foundation.write(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset)
            }
            if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
        }
    }
}
