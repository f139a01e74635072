/// Bytes waiting to be written to one peer: a value with no I/O of its own (swift-nio
/// `PendingWritesManager`). The connection passes the write in, so partial writes are tested by
/// scripting results.
public struct OutboundBuffer: Sendable {
    private var bytes: [UInt8] = []
    /// Bytes before `start` are already written.
    private var start = 0

    public init() {}

    public var count: Int { bytes.count - start }
    public var isEmpty: Bool { start == bytes.count }

    public mutating func append(_ data: UnsafeRawBufferPointer) {
        compactIfWorthIt()
        bytes.append(contentsOf: data)
    }

    public mutating func append(_ data: [UInt8]) { append(data[...]) }

    public mutating func append(_ data: ArraySlice<UInt8>) {
        compactIfWorthIt()
        bytes.append(contentsOf: data)
    }

    /// Appends in place: `body` writes straight into the buffer (no intermediate copy).
    public mutating func append(_ body: (inout [UInt8]) -> Void) {
        compactIfWorthIt()
        body(&bytes)
    }

    /// Marks `n` bytes as written.
    public mutating func didWrite(_ n: Int) {
        precondition(n >= 0 && n <= count, "wrote \(n) of \(count) pending bytes")
        start += n
        if start == bytes.count {
            // Keep a small buffer for the next burst; give a large one back to the allocator.
            bytes.removeAll(keepingCapacity: bytes.capacity <= 64 * 1024)
            start = 0
        }
    }

    public enum FlushResult: Equatable, Sendable {
        /// Everything was written.
        case flushed
        /// The peer cannot take more now; wait for writability.
        case pending
    }

    /// Writes until empty or the write would block. Errors propagate; the buffer keeps what was not written.
    public mutating func flush<E: Error>(
        using write: (UnsafeRawBufferPointer) throws(E) -> IOResult<Int>
    ) throws(E) -> FlushResult {
        while !isEmpty {
            let attempt: Result<IOResult<Int>, E> = bytes.withUnsafeBytes { raw in
                do throws(E) {
                    return .success(try write(UnsafeRawBufferPointer(rebasing: raw[start...])))
                } catch {
                    return .failure(error)
                }
            }
            switch try attempt.get() {
            case .processed(let n): didWrite(n)
            case .wouldBlock: return .pending
            }
        }
        return .flushed
    }

    /// Drops written bytes once they are the larger part of the storage.
    private mutating func compactIfWorthIt() {
        if start > 0 && start >= bytes.count / 2 {
            bytes.removeSubrange(0..<start)
            start = 0
        }
    }
}
