import CRPCLinux

/// The entity state's lock: a glibc adaptive mutex (CRPCLinux), which spins a little (a bounded
/// number of `pause`d tries) before it sleeps in the kernel.
///
/// The state lock is held for about a microsecond per request, by every event loop. A plain mutex
/// (`NSLock`) sleeps on the first miss: under a create load on two cores that cost futex waits,
/// context switches and much of the daemon's CPU in the scheduler. Spinning first turns most
/// misses into a wait of a few hundred nanoseconds.
package final class SpinningLock: @unchecked Sendable {
    // @unchecked: the mutex is the synchronisation.
    private let mutex: OpaquePointer

    package init() { mutex = crpc_adaptive_mutex_create() }

    deinit { crpc_adaptive_mutex_destroy(mutex) }

    @inline(__always) package func lock() { crpc_adaptive_mutex_lock(mutex) }
    @inline(__always) package func unlock() { crpc_adaptive_mutex_unlock(mutex) }

    @inline(__always)
    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }
}
