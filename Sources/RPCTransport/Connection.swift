import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a connection tells its owner. Every call arrives on the connection's loop queue.
public protocol ConnectionDelegate: AnyObject, Sendable {
    /// One complete line, without its terminator. Valid only during the call.
    func connection(_ connection: Connection, didReceive line: UnsafeRawBufferPointer)
    /// A line longer than the frame limit; its bytes are being discarded.
    func connection(_ connection: Connection, didReceiveOversizeLine length: Int)
    /// The connection is closed and its fd released.
    func connectionDidClose(_ connection: Connection, reason: Connection.CloseReason)
}

/// One TCP peer: a non-blocking fd driven by a read and a write Dispatch source on a loop queue,
/// a line framer, and a bounded outbound buffer whose replies leave in the order they were reserved.
public final class Connection: @unchecked Sendable {
    // @unchecked: every `var` below is touched only on `loop.queue` (checked with dispatchPrecondition).

    public enum CloseReason: Sendable, Equatable, CustomStringConvertible {
        /// The peer half-closed and every reply was sent.
        case finished
        /// The peer reset or the socket failed.
        case error(String)
        /// The peer did not read its replies and the output passed the cap.
        case outputOverflow(Int)
        /// Closed by the owner (shutdown, idle timeout, overload).
        case closedByServer(String)

        public var description: String {
            switch self {
            case .finished: return "peer finished"
            case .error(let message): return message
            case .outputOverflow(let bytes): return "peer stopped reading; \(bytes) bytes of replies pending passed the output cap"
            case .closedByServer(let why): return why
            }
        }
    }

    public struct Limits: Sendable {
        public var maxFrameBytes: Int
        public var maxOutputBytes: Int
        public init(maxFrameBytes: Int = 1 << 20, maxOutputBytes: Int = 8 << 20) {
            self.maxFrameBytes = maxFrameBytes
            self.maxOutputBytes = maxOutputBytes
        }
    }

    public let id: UInt64
    public let loop: EventLoop
    public let peer: SocketAddress?
    public let limits: Limits
    public var queue: DispatchQueue { loop.queue }
    /// The owner's per-connection state (e.g. the wire form of the first request).
    public var context: AnyObject?
    /// Uptime (in nanoseconds) of the last complete line; for idle timeouts.
    public private(set) var lastLineAt: UInt64
    /// Bytes read from and sent to the peer (for statistics). Read on the loop queue.
    public private(set) var bytesIn: UInt64 = 0
    public private(set) var bytesOut: UInt64 = 0

    private let fd: Int32
    private weak var delegate: (any ConnectionDelegate)?
    private var framer: LineFramer
    private var outbound = OutboundBuffer()
    private var readSource: (any DispatchSourceRead)?
    private var writeSource: (any DispatchSourceWrite)?
    private var writeSourceResumed = false
    /// Sources whose cancel handler has not run yet; the fd is closed when this reaches 0.
    private var liveSources = 0
    private var readClosed = false
    private var fdClosed = false
    private var closeReason: CloseReason?
    /// Replies that must wait for an earlier reserved one: oldest first.
    private var held: [(slot: UInt64, bytes: [UInt8]?)] = []
    private var heldBytes = 0
    private var nextSlot: UInt64 = 0

    /// Takes ownership of `fd` (non-blocking). Call `start()` to begin reading.
    public init(fd: Int32, id: UInt64, peer: SocketAddress?, loop: EventLoop, limits: Limits, delegate: any ConnectionDelegate) {
        self.fd = fd
        self.id = id
        self.peer = peer
        self.loop = loop
        self.limits = limits
        self.delegate = delegate
        self.framer = LineFramer(maxFrameBytes: limits.maxFrameBytes)
        self.lastLineAt = DispatchTime.now().uptimeNanoseconds
    }

    deinit {
        assert(closeReason != nil || liveSources == 0, "connection \(id) released with its fd open")
    }

    public var isClosed: Bool { closeReason != nil }

    /// Starts the read source. Call once, from anywhere; work happens on the loop queue.
    public func start() {
        queue.async { self.startOnLoop() }
    }

    private func startOnLoop() {
        loop.preconditionOnLoop()
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        read.setEventHandler { [unowned self] in self.readable() }
        read.setCancelHandler { [self] in self.sourceCancelled() }
        let write = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        write.setEventHandler { [unowned self] in self.writable() }
        write.setCancelHandler { [self] in self.sourceCancelled() }
        readSource = read
        writeSource = write
        liveSources = 2
        read.resume()
    }

    // MARK: - Reading

    private func readable() {
        loop.preconditionOnLoop()
        // A few reads per event, then yield to the other connections of this loop (level-triggered: we come back).
        for _ in 0..<4 where closeReason == nil && !readClosed {
            let result: IOResult<Int>
            do {
                result = try Syscall.read(fd, into: loop.readBuffer)
            } catch {
                close(.error(error.code == ECONNRESET ? "connection reset by peer" : "\(error)"))
                return
            }
            guard case .processed(let n) = result else { break }
            if n == 0 {
                peerFinished()
                break
            }
            bytesIn &+= UInt64(n)
            // The weak delegate is loaded once per read, and the clock read once per read that completed a line.
            guard let delegate else { break }
            var completedLine = false
            framer.feed(UnsafeRawBufferPointer(rebasing: loop.readBuffer[0..<n])) { frame in
                guard closeReason == nil else { return }
                completedLine = true
                switch frame {
                case .line(let line): delegate.connection(self, didReceive: line)
                case .tooLarge(let length): delegate.connection(self, didReceiveOversizeLine: length)
                }
            }
            if completedLine { lastLineAt = DispatchTime.now().uptimeNanoseconds }
            if n < loop.readBuffer.count { break }
        }
        flush()
    }

    /// Stops reading, sends every reply already owed, then closes (graceful shutdown). Call from anywhere.
    public func finish() {
        queue.async { [self] in
            guard closeReason == nil, !readClosed else { return }
            peerFinished()
            flush()
        }
    }

    /// EOF: stop reading, finish the replies, then close.
    private func peerFinished() {
        readClosed = true
        readSource?.cancel()
        readSource = nil
        closeIfFinished()
    }

    // MARK: - Writing

    /// Queues a reply after every earlier one. Call on the loop queue; it is sent when the current
    /// batch of lines is done (or now, outside a read event).
    public func send(_ bytes: [UInt8]) {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        if held.isEmpty {
            outbound.append(bytes)
        } else {
            held.append((slot: nextSlot, bytes: bytes))
            nextSlot &+= 1
            heldBytes += bytes.count
        }
        checkOutputCap()
    }

    /// Queues a reply written in place into the outbound buffer (no copy) when nothing is held.
    public func send(_ body: (inout [UInt8]) -> Void) {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        if held.isEmpty {
            outbound.append(body)
            checkOutputCap()
        } else {
            var bytes: [UInt8] = []
            body(&bytes)
            send(bytes)
        }
    }

    /// Reserves the next place in the reply order for a reply that is not ready yet (e.g. waiting
    /// for a journal fsync). Replies queued after it wait for it. Fill it with `fill(_:with:)`.
    public func reserve() -> UInt64 {
        loop.preconditionOnLoop()
        let slot = nextSlot
        nextSlot &+= 1
        held.append((slot: slot, bytes: nil))
        return slot
    }

    /// Fills a reserved place, and sends every reply that no longer waits. Call on the loop queue.
    public func fill(_ slot: UInt64, with bytes: [UInt8]) {
        loop.preconditionOnLoop()
        guard closeReason == nil, let index = held.firstIndex(where: { $0.slot == slot }) else { return }
        held[index].bytes = bytes
        heldBytes += bytes.count
        var ready = 0
        while ready < held.count, let bytes = held[ready].bytes {
            outbound.append(bytes)
            heldBytes -= bytes.count
            ready += 1
        }
        held.removeFirst(ready)
        checkOutputCap()
        flush()
    }

    /// Writes what can be written now; arms the write source for the rest.
    public func flush() {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        let result: OutboundBuffer.FlushResult
        do {
            result = try outbound.flush { bytes throws(Errno) in
                let sent = try Syscall.send(fd, bytes)
                if case .processed(let n) = sent { bytesOut &+= UInt64(n) }
                return sent
            }
        } catch {
            let reset = error.code == EPIPE || error.code == ECONNRESET
            close(.error(reset ? "peer closed before reading its replies" : "\(error)"))
            return
        }
        switch result {
        case .pending:
            if !writeSourceResumed {
                writeSourceResumed = true
                writeSource?.resume()
            }
        case .flushed:
            // A resumed write source with nothing to write spins: EPOLLOUT is level-triggered.
            if writeSourceResumed {
                writeSourceResumed = false
                writeSource?.suspend()
            }
            closeIfFinished()
        }
    }

    private func writable() {
        loop.preconditionOnLoop()
        flush()
    }

    private func checkOutputCap() {
        let pending = outbound.count + heldBytes
        if pending > limits.maxOutputBytes { close(.outputOverflow(pending)) }
    }

    // MARK: - Closing

    private func closeIfFinished() {
        if readClosed && held.isEmpty && outbound.isEmpty && closeReason == nil { close(.finished) }
    }

    /// Closes now, dropping unsent replies. Idempotent. Call on the loop queue.
    public func close(_ reason: CloseReason) {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        closeReason = reason
        held.removeAll()
        heldBytes = 0
        readSource?.cancel()
        readSource = nil
        if let write = writeSource {
            write.cancel()
            // A suspended source must be resumed to be released; cancelled first, so its handler never runs.
            if !writeSourceResumed { write.resume() }
            writeSource = nil
        }
        if liveSources == 0 { finishClose() }
    }

    /// Sends what is pending (up to what the peer takes now), then closes: for a last error line.
    public func closeAfterFlush(_ reason: CloseReason) {
        loop.preconditionOnLoop()
        flush()
        close(reason)
    }

    private func sourceCancelled() {
        loop.preconditionOnLoop()
        liveSources -= 1
        if liveSources == 0 && closeReason != nil { finishClose() }
    }

    /// Only after both cancel handlers ran: no stale epoll registration can outlive the fd.
    private func finishClose() {
        guard let reason = closeReason, !fdClosed else { return }
        fdClosed = true
        Syscall.close(fd)
        delegate?.connectionDidClose(self, reason: reason)
        delegate = nil
        context = nil
    }
}
