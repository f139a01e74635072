import Dispatch
import Foundation
#if canImport(Testing)
import Testing
#endif

// Linux only, like the tests: task executors need macOS 15 where the package builds for 13, and
// `swift build` builds this target too (and a toolchain may offer `Testing` to test targets only).
#if os(Linux)
/// Runs a task's jobs on a serial queue of its own instead of the concurrency pool.
///
/// Most integration tests are synchronous: each holds one of the pool's threads (two, on two
/// cores) while it waits on a socket or a process, for up to a minute. An async test that awaits
/// on the pool is queued behind them at every resumption, 30 s and more in a full run, so a
/// client task could not send its line before the fake peer's read timed out. A test that
/// awaits a peer, a timer or a client runs on one of these instead (`.ownExecutor`).
public final class DedicatedExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `queue` is immutable and thread-safe.
    private let queue = DispatchQueue(label: "rpcd.tests.dedicated-executor")

    public init() {}

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }

    /// The executor of the test running (`.ownExecutor`), if it has one.
    @TaskLocal public static var current: DedicatedExecutor?
}

#if canImport(Testing)
/// A test, or every test of a suite, runs on a `DedicatedExecutor` of its own. Tasks it starts
/// with `spawn` run there too (a plain `Task {}` does not inherit an executor preference).
public struct OwnExecutorTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        guard testCase != nil else { return try await function() }
        let executor = DedicatedExecutor()
        try await DedicatedExecutor.$current.withValue(executor) {
            try await withTaskExecutorPreference(executor) { try await function() }
        }
    }
}

extension Trait where Self == OwnExecutorTrait {
    /// See `OwnExecutorTrait`.
    public static var ownExecutor: Self { Self() }
}
#endif

/// `Task { body }` on the running test's own executor (`.ownExecutor`), or on the pool without one.
@discardableResult
public func spawn<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) -> Task<T, any Error> {
    Task(executorPreference: DedicatedExecutor.current) { try await body() }
}

/// `Task { body }` for a body that cannot throw, on the running test's own executor.
@discardableResult
public func spawn<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> Task<T, Never> {
    Task(executorPreference: DedicatedExecutor.current) { await body() }
}
#endif

/// Runs a blocking `body` on a thread of its own and awaits it: the concurrency pool (two threads
/// on two cores) stays free for the client under test.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
