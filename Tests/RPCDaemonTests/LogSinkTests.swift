import Foundation
import Testing
@testable import RPCDaemon

/// Logging never blocks the caller, drops and counts past its bound, and rate-limits by key
/// (issue 10, item 6). A pipe stands in for stderr.
@Suite struct LogSinkTests {
    /// A pipe whose read end is read from when the test says so, by a thread of its own.
    final class Pipe2: @unchecked Sendable {
        // @unchecked: `bytes` and `draining` are guarded by `lock`.
        let read: Int32
        let write: Int32
        private let lock = NSLock()
        private var bytes: [UInt8] = []
        private var draining = false

        init() {
            var fds: [Int32] = [0, 0]
            pipe(&fds)
            read = fds[0]
            write = fds[1]
        }

        var text: String { lock.withLock { String(decoding: bytes, as: UTF8.self) } }

        /// From now on, a thread reads everything written.
        func startDraining() {
            guard lock.withLock({ () -> Bool in defer { draining = true }; return !draining }) else { return }
            Thread { [self] in
                var chunk = [UInt8](repeating: 0, count: 1 << 16)
                while true {
                    let n = chunk.withUnsafeMutableBytes { Foundation.read(read, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { return }
                    lock.withLock { bytes += chunk[0..<n] }
                }
            }.start()
        }

        /// Reads (starting the drain) until `predicate(text)` holds or `timeout` seconds pass.
        @discardableResult
        func read(timeout: Double, until predicate: (String) -> Bool) -> Bool {
            startDraining()
            let deadline = Date(timeIntervalSinceNow: timeout)
            while !predicate(text) {
                if Date() >= deadline { return false }
                usleep(10_000)
            }
            return true
        }
    }

    /// Runs `body` on another thread; true when it finished within `seconds`.
    private func completes(within seconds: Double, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        return done.wait(timeout: .now() + seconds) == .success
    }

    @Test func loggingToAnUnreadPipeNeverBlocksAndCountsWhatItDropped() {
        let pipe = Pipe2()
        let log = Logger(level: .debug, environment: [:], sink: LogSink(fd: pipe.write, maxQueuedBytes: 64 << 10))
        let filler = String(repeating: "x", count: 200)
        // 20,000 lines of 200+ bytes: far more than the pipe (64 KiB) and the queue (64 KiB) hold.
        #expect(completes(within: 5) { for n in 0..<20_000 { log.info("line \(n) \(filler)") } }, "logging blocked")
        #expect(!log.flush(timeout: 0.2), "nothing reads the pipe, so a flush cannot finish")
        // Once read, the writer gets through everything queued and says how many lines were dropped.
        pipe.startDraining()
        #expect(log.flush(timeout: 20), "the queue did not drain once the pipe was read")
        #expect(pipe.read(timeout: 5) { $0.contains("dropped ") && $0.contains(" log lines") }, "\(pipe.text.suffix(500))")
        #expect(pipe.text.contains("line 0 ") && pipe.text.split(separator: "\n").count < 20_000)
        let dropped = pipe.text.split(separator: "\n").first { $0.contains("dropped ") }.map(String.init) ?? ""
        #expect(dropped.contains(" warning dropped "), "\(dropped)")
        // And it keeps logging afterwards.
        log.info("after the flood")
        #expect(pipe.read(timeout: 5) { $0.contains("after the flood") })
    }

    @Test func repeatedWarningsFromOneCauseAreSummedUp() {
        let pipe = Pipe2()
        let log = Logger(level: .info, environment: [:], sink: LogSink(fd: pipe.write, rateWindow: 2))
        for n in 0..<5000 {
            log.warning(key: "oversize", "connection \(n): discarded a line over 64 bytes")
            if n == 10 { log.warning("an unkeyed warning is never held back") }
        }
        #expect(pipe.read(timeout: 5) { $0.contains("… and 4,999 more in the last 2 s, the last: connection 4999: discarded") },
            "\(pipe.text)")
        let lines = pipe.text.split(separator: "\n")
        #expect(lines.count == 3, "first line, the unkeyed one, the summary: \(pipe.text)")
        #expect(lines.first?.hasSuffix(" warning connection 0: discarded a line over 64 bytes") == true, "\(pipe.text)")
        #expect(lines.contains { $0.hasSuffix("an unkeyed warning is never held back") })
        // A new window starts with a line in full; another key has its own window.
        log.warning(key: "oversize", "connection 5000: discarded a line over 64 bytes")
        log.warning(key: "listener", "accept failed: EMFILE")
        #expect(pipe.read(timeout: 5) { $0.contains("connection 5000: discarded") && $0.contains("accept failed: EMFILE") })
    }

    @Test func flushWritesWhatIsQueuedAndTheOpenSummaries() {
        let pipe = Pipe2()
        let log = Logger(level: .info, environment: ["JOURNAL_STREAM": "8:1"], sink: LogSink(fd: pipe.write, rateWindow: 3600))
        for n in 0..<3 { log.warning(key: "k", "repeat \(n)") }
        log.info("stopped")
        #expect(log.flush(timeout: 5))
        #expect(pipe.read(timeout: 1) { $0.contains("<6>stopped\n") })
        #expect(pipe.text.contains("<4>repeat 0\n") && pipe.text.contains("<4>… and 2 more in the last 3600 s, the last: repeat 2\n"),
            "\(pipe.text)")
    }

    @Test func numbersAreGroupedByThousands() {
        #expect(LogSink.grouped(0) == "0" && LogSink.grouped(999) == "999" && LogSink.grouped(1000) == "1,000")
        #expect(LogSink.grouped(4999) == "4,999" && LogSink.grouped(1_234_567) == "1,234,567" && LogSink.grouped(-12345) == "-12,345")
    }
}
