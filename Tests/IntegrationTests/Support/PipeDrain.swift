import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Drains the read end of a pipe continuously on a background thread into a locked buffer, so the
/// child process never blocks on a full pipe. Waiters can block until the text satisfies a predicate.
///
/// @unchecked Sendable: `bytes` and `finished` are only touched under `condition`.
final class PipeDrain: @unchecked Sendable {
    private let condition = NSCondition()
    private var bytes: [UInt8] = []
    private var finished = false
    /// While set, the thread stops reading (after the read it is in), so the writer's pipe fills.
    private var paused = false
    /// Keep at most this many bytes: the head (where the `listening on` lines are) and the tail.
    private let cap: Int
    static let defaultCap = 8 << 20

    /// Takes ownership of `pipe`'s read end; the thread closes nothing, the Pipe object (kept alive by
    /// the thread) closes its handles when the thread ends at EOF. Past `cap` bytes the middle is
    /// dropped (a test that reads all of a large output raises it).
    init(_ pipe: Pipe, cap: Int = PipeDrain.defaultCap) {
        self.cap = max(cap, 2 << 20)
        let thread = Thread { [self] in
            let fd = pipe.fileHandleForReading.fileDescriptor
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                condition.lock()
                while paused { condition.wait() }
                condition.unlock()
                let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                condition.lock()
                bytes.append(contentsOf: chunk[0..<n])
                if bytes.count > cap {
                    // Drop a slice from the middle, keep the first MiB and the most recent output.
                    let keepHead = 1 << 20
                    bytes.removeSubrange(keepHead..<(keepHead + (bytes.count - cap) + (1 << 20)))
                }
                condition.broadcast()
                condition.unlock()
            }
            condition.lock()
            finished = true
            condition.broadcast()
            condition.unlock()
            _ = pipe  // keep the handles open until EOF
        }
        thread.start()
    }

    /// Stops reading (a stderr nobody reads); `resume()` reads again.
    func pause() {
        condition.lock()
        paused = true
        condition.unlock()
    }

    func resume() {
        condition.lock()
        paused = false
        condition.broadcast()
        condition.unlock()
    }

    var text: String {
        condition.lock()
        defer { condition.unlock() }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Reached EOF (the writer side is closed everywhere).
    var isFinished: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finished
    }

    /// Waits until `predicate(text)` is true (returns true) or EOF / timeout (returns false).
    func wait(timeout: Double, until predicate: (String) -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if predicate(String(decoding: bytes, as: UTF8.self)) { return true }
            if finished { return false }
            if !condition.wait(until: deadline) {
                return predicate(String(decoding: bytes, as: UTF8.self))
            }
        }
    }

    /// Waits for EOF, at most `timeout` seconds.
    @discardableResult
    func waitForEOF(timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !finished {
            if !condition.wait(until: deadline) { break }
        }
        return finished
    }
}
