#if os(Linux)
import CRPCLinux
#endif

/// The process heap (glibc's malloc).
enum Heap {
    /// Gives the kernel back the pages of freed heap blocks, in every arena. glibc returns only
    /// the top of a heap by itself, so the temporaries of a replay or of a snapshot (texts parsed
    /// on another thread, sort buffers, the records received) stayed resident after they were
    /// freed: a third more than the records held. Takes tens of milliseconds on a heap of hundreds
    /// of megabytes, and holds each arena's lock meanwhile: only after those large, rare jobs.
    static func releaseFreed() {
        #if os(Linux)
        _ = crpc_release_free_heap()
        #endif
    }
}
