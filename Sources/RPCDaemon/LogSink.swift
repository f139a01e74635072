import Foundation

/// Where log lines go: a bounded queue in memory, written to the fd by a thread of its own.
///
/// A daemon whose stderr nobody reads must keep serving: `post` never touches the fd, it appends
/// to the queue (or, when `maxQueuedBytes` are waiting, drops the line and counts it) and
/// returns. The writer thread may block in `write(2)` for as long as the reader likes; when it
/// gets through again it logs "dropped N log lines". Lines with a key are rate-limited per key:
/// the first in each `rateWindow` is queued, the rest counted and summed up when the window
/// ends ("… and 4,999 more in the last 10 s, the last: …").
public final class LogSink: @unchecked Sendable {
    // @unchecked: every `var` is guarded by `condition`; `fd` and the limits are immutable;
    // `writeLock` serialises whole writes to `fd` (the writer thread's and `write`'s).
    private let fd: Int32
    /// Lines waiting past this many bytes are dropped (and counted).
    let maxQueuedBytes: Int
    /// Seconds of each rate-limit window.
    let rateWindow: Double
    private let condition = NSCondition()
    private let writeLock = NSLock()
    private var queued: [String] = []
    private var queuedBytes = 0
    private var dropped = 0
    private var writing = false
    private var writerStarted = false
    /// Set by `flush`: the writer sums up every open rate-limit window now, not when it ends.
    private var summariesNow = false
    /// The format of the last line posted, for the sink's own lines.
    private var format = LogFormat(forJournal: false)
    private var windows: [String: Window] = [:]

    /// One key's rate-limit window: opened by a line that was logged.
    private struct Window {
        var start: UInt64
        var level: LogLevel
        var suppressed = 0
        var last = ""
    }

    /// How long the exit paths wait for stderr to take what is queued.
    public static let exitFlushSeconds = 2.0

    public init(fd: Int32, maxQueuedBytes: Int = 256 << 10, rateWindow: Double = 10) {
        self.fd = fd
        self.maxQueuedBytes = maxQueuedBytes
        self.rateWindow = rateWindow
    }

    public static let stderr = LogSink(fd: 2)

    /// Writes `line` now, blocking until the fd took it: for commands (check-config, call, repair)
    /// and last words before `_exit`, never on a queue that serves peers (that is `Logger`'s path).
    public func write(_ line: String) {
        writeLock.withLock { Self.writeAll(Array(line.utf8), to: fd) }
    }

    /// Rate-limit windows open at once; keys may name a peer's host, so past this the rest share one.
    static let maxWindows = 1024

    /// Queues one line; returns at once whatever the fd does.
    func post(_ level: LogLevel, _ text: String, key: String?, format: LogFormat) {
        let now = DispatchTime.now().uptimeNanoseconds
        condition.lock()
        defer { condition.unlock() }
        self.format = format
        var key = key
        if let named = key, windows[named] == nil, windows.count >= Self.maxWindows { key = "(more sources)" }
        if let key {
            if var window = windows[key], Double(now &- window.start) < rateWindow * 1e9 {
                window.suppressed += 1
                window.last = text
                windows[key] = window
                return
            }
            if let ended = windows[key], ended.suppressed > 0 { enqueue(summary(ended)) }
            windows[key] = Window(start: now, level: level)
        }
        enqueue(format.line(level, text))
    }

    /// Waits until everything posted so far is written, at most `timeout` seconds. False on timeout.
    @discardableResult
    public func flush(timeout: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        summariesNow = true
        startWriterIfNeeded()
        condition.broadcast()
        while summariesNow || writing || !queued.isEmpty || dropped > 0 {
            if !condition.wait(until: deadline) { return false }
        }
        return true
    }

    /// With `condition` held.
    private func enqueue(_ line: String) {
        let bytes = line.utf8.count
        guard queuedBytes + bytes <= maxQueuedBytes else {
            dropped += 1
            return
        }
        queued.append(line)
        queuedBytes += bytes
        startWriterIfNeeded()
        condition.signal()
    }

    /// With `condition` held.
    private func startWriterIfNeeded() {
        guard !writerStarted else { return }
        writerStarted = true
        let thread = Thread { [self] in runWriter() }
        thread.name = "rpcd.log"
        thread.start()
    }

    /// With `condition` held. "… and 4,999 more in the last 10 s, the last: <message>"
    private func summary(_ window: Window) -> String {
        format.line(
            window.level,
            "… and \(Self.grouped(window.suppressed)) more in the last \(ConfigValue.render(seconds: rateWindow)) s, the last: \(window.last)")
    }

    /// The writer thread: takes everything queued, writes it (blocking here, and only here), repeats.
    private func runWriter() {
        while true {
            condition.lock()
            var batch: [String] = []
            while true {
                let now = DispatchTime.now().uptimeNanoseconds
                batch = queued
                queued = []
                queuedBytes = 0
                if dropped > 0 {
                    batch.append(format.line(.warning, "dropped \(Self.grouped(dropped)) log lines: stderr was not being read fast enough"))
                    dropped = 0
                }
                batch += takeSummaries(now: now, all: summariesNow)
                summariesNow = false
                if !batch.isEmpty { break }
                condition.broadcast()  // a flush waiting for an empty queue
                if let due = nextSummaryDue() {
                    _ = condition.wait(until: Date(timeIntervalSinceNow: max(0, Double(due &- now) / 1e9)))
                } else {
                    condition.wait()
                }
            }
            writing = true
            condition.unlock()
            let bytes = Array(batch.joined().utf8)
            writeLock.withLock { Self.writeAll(bytes, to: fd) }
            condition.lock()
            writing = false
            condition.broadcast()
            condition.unlock()
        }
    }

    /// With `condition` held: summaries of the windows that ended (or of all, for a flush), which
    /// close; a window that ended with nothing suppressed just closes.
    private func takeSummaries(now: UInt64, all: Bool) -> [String] {
        var lines: [String] = []
        for (key, window) in windows where all || Double(now &- window.start) >= rateWindow * 1e9 {
            if window.suppressed > 0 { lines.append(summary(window)) }
            if all && window.suppressed > 0 {
                windows[key]?.suppressed = 0  // stays open: the next line of the window is still counted
            } else {
                windows[key] = nil
            }
        }
        return lines
    }

    /// With `condition` held: when the first open window with something to sum up ends.
    private func nextSummaryDue() -> UInt64? {
        windows.values.filter { $0.suppressed > 0 }.map { $0.start &+ UInt64(rateWindow * 1e9) }.min()
    }

    /// Writes every byte, retrying EINTR and waiting out EAGAIN (a non-blocking stderr); gives up
    /// on other errors (a closed stderr must not stop the daemon).
    private static func writeAll(_ bytes: [UInt8], to fd: Int32) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Foundation.write(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset)
            }
            if n > 0 {
                offset += n
            } else if n < 0 && errno == EINTR {
                continue
            } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                var pending = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&pending, 1, 1000)
            } else {
                return
            }
        }
    }

    /// 4999 -> "4,999".
    static func grouped(_ n: Int) -> String {
        let digits = Array(String(n.magnitude))
        var out = n < 0 ? "-" : ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return out
    }
}
