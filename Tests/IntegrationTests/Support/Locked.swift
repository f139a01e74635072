import Foundation

/// A value guarded by a lock, shared between test threads.
/// @unchecked Sendable: every access to `value` happens under `lock`.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }

    var current: Value { withLock { $0 } }
}

/// Runs `body(i)` for `i` in `0..<count`, each on its own thread (so blocking socket calls really
/// run concurrently, unlike `concurrentPerform`, which is bounded by the core count), and waits
/// for all of them. Returns false if they did not all finish within `timeout` seconds.
@discardableResult
func runOnThreads(_ count: Int, timeout: Double = 60, _ body: @escaping @Sendable (Int) -> Void) -> Bool {
    let group = DispatchGroup()
    for i in 0..<count {
        group.enter()
        let thread = Thread {
            body(i)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    return group.wait(timeout: .now() + timeout) == .success
}

/// Waits until `condition` holds, checking it every `every` seconds, for at most `timeout`.
func eventually(timeout: Double = 10, every: Double = 0.05, _ condition: () throws -> Bool) rethrows -> Bool {
    let watch = Stopwatch()
    while watch.seconds < timeout {
        if try condition() { return true }
        usleep(UInt32(every * 1_000_000))
    }
    return try condition()
}

/// Starts `body` on a background thread; `wait(timeout:)` returns its result once it finished.
final class BackgroundJob<T: Sendable>: @unchecked Sendable {
    // @unchecked Sendable: `result` is only touched under `condition`.
    private let condition = NSCondition()
    private var result: T?

    init(_ body: @escaping @Sendable () -> T) {
        let thread = Thread { [self] in
            let value = body()
            condition.lock()
            result = value
            condition.broadcast()
            condition.unlock()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// nil if the job did not finish within `timeout` seconds.
    func wait(timeout: Double) -> T? {
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock()
        defer { condition.unlock() }
        while result == nil {
            if !condition.wait(until: deadline) { break }
        }
        return result
    }
}

/// A monotonic stopwatch.
struct Stopwatch {
    private let start = DispatchTime.now().uptimeNanoseconds
    var seconds: Double { Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9 }
}
