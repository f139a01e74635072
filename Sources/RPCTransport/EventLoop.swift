import Dispatch

/// A serial queue that serves many connections, with one read buffer they share.
///
/// Connections are spread over a few loops (one per core) instead of one queue each: a read buffer
/// per loop, not per connection, keeps idle connections small.
public final class EventLoop: @unchecked Sendable {
    // @unchecked: `readBuffer` is only used on `queue`, which is serial.
    public let queue: DispatchQueue
    /// Its place in its group (0 for a loop on its own).
    public let index: Int
    let readBuffer: UnsafeMutableRawBufferPointer

    public init(label: String, index: Int = 0, readBufferBytes: Int = 64 * 1024) {
        queue = DispatchQueue(label: label)
        self.index = index
        readBuffer = .allocate(byteCount: readBufferBytes, alignment: 16)
    }

    deinit { readBuffer.deallocate() }

    public func preconditionOnLoop() { dispatchPrecondition(condition: .onQueue(queue)) }
}

/// A fixed set of loops handed out round-robin.
public final class EventLoopGroup: @unchecked Sendable {
    // @unchecked: `next` is only touched by `nextLoop()`, called from the one accept queue.
    public let loops: [EventLoop]
    private var next = 0

    public init(count: Int, label: String = "rpcd.loop") {
        loops = (0..<max(1, count)).map { EventLoop(label: "\(label).\($0)", index: $0) }
    }

    public func nextLoop() -> EventLoop {
        let loop = loops[next % loops.count]
        next &+= 1
        return loop
    }
}
