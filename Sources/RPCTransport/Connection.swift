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
    /// Output that had to wait for the peer is all sent (only with `notifiesDrain` set): a
    /// producer that stopped at its window may write more.
    func connectionDidDrain(_ connection: Connection)
    /// The TLS handshake finished and the peer's certificate verified (as the context asks).
    func connectionDidEstablishTLS(_ connection: Connection)
    /// Every line of one read was handed to `didReceive`: a delegate that gathers lines may act on
    /// them together now.
    func connectionDidServeRead(_ connection: Connection)
}

extension ConnectionDelegate {
    public func connectionDidDrain(_ connection: Connection) {}
    public func connectionDidEstablishTLS(_ connection: Connection) {}
    public func connectionDidServeRead(_ connection: Connection) {}
}

/// One peer: a non-blocking fd registered with its loop's epoll set, a line framer, and a bounded
/// outbound buffer whose replies leave in the order they were reserved.
public final class Connection: @unchecked Sendable {
    // @unchecked: every `var` below is touched only on `loop.queue` (checked with preconditionOnLoop,
    // or in debug builds only with assertOnLoop on the per-request paths).
    // For the same reason they are `Confined`: no run-time exclusivity check, which is several
    // per read and flush, so per request at one request in flight.

    public enum CloseReason: Sendable, Equatable, CustomStringConvertible {
        /// The peer half-closed and every reply was sent.
        case finished
        /// The peer reset the connection, or closed it before reading its replies: its doing.
        case peerReset(String)
        /// The socket failed for another reason (a system call's error): the daemon closed it.
        case error(String)
        /// The peer did not read its replies and the output passed the cap.
        case outputOverflow(Int)
        /// Closed by the owner (shutdown, idle timeout, overload).
        case closedByServer(String)
        /// Closed by its loop to keep the loop's unfinished input within its budget.
        case shed(String)

        public var description: String {
            switch self {
            case .finished: return "peer finished"
            case .peerReset(let message), .error(let message): return message
            case .outputOverflow(let bytes): return "peer stopped reading; \(bytes) bytes of replies pending passed the output cap"
            case .closedByServer(let why): return why
            case .shed(let why): return why
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

    /// What to do with bytes still queued when the peer resets.
    public enum OnReset: Sendable {
        /// Drop them: nobody is left to answer (a server).
        case drop
        /// Read and deliver them first: they may be the peer's last words, e.g. an error (a client).
        case deliver
    }

    /// Output past which replies are pushed to the socket after each line, not once per read:
    /// a peer that is gone is then noticed after one large reply, not after computing all of them.
    static let eagerFlushBytes = 64 * 1024

    public let id: UInt64
    public let loop: EventLoop
    public let peer: SocketAddress?
    public let limits: Limits
    public var queue: DispatchQueue { loop.queue }
    /// The owner's per-connection state (e.g. the wire form of the first request). Set before
    /// `start()`, read on the loop.
    public var context: AnyObject? {
        get { ownerContext }
        set { ownerContext = newValue }
    }
    /// The fields below, touched only on the owner's queue: see `Confined`.
    private struct Fields {
        var ownerContext: AnyObject?
        var lastActivityAt: UInt64
        var lineStartedAt: UInt64 = 0
        var bytesIn: UInt64 = 0
        var bytesOut: UInt64 = 0
        var delegate: (any ConnectionDelegate)?
        var framer: LineFramer
        var reportedInput: Int = 0
        var outbound: OutboundBuffer = OutboundBuffer()
        var token: UInt64 = 0
        var interest: IOInterest = []
        var readClosed: Bool = false
        var readPaused: Bool = false
        var notifiesDrain: Bool = false
        var exemptFromIdleTimeout: Bool = false
        var closeReason: CloseReason?
        var held: [(slot: UInt64, bytes: [UInt8]?)] = []
        var deferrals: Int = 0
        var finishingReason: CloseReason?
        var heldBytes: Int = 0
        var nextSlot: UInt64 = 0
    }
    private let confined: Confined<Fields>

    /// `context`'s storage.
    private var ownerContext: AnyObject? { _read { yield confined.value.ownerContext } _modify { yield &confined.value.ownerContext } }
    /// Uptime (in nanoseconds) of the last byte read or written; for idle timeouts.
    public private(set) var lastActivityAt: UInt64 { _read { yield confined.value.lastActivityAt } _modify { yield &confined.value.lastActivityAt } }
    /// Uptime (in nanoseconds) when the connection was made; for the authentication timeout.
    public let openedAt: UInt64
    /// Uptime (in nanoseconds) of the read that began the line not ended yet; 0 while no line is
    /// under way. For the line timeout: a peer that dribbles a line's bytes is never idle.
    public private(set) var lineStartedAt: UInt64 { _read { yield confined.value.lineStartedAt } _modify { yield &confined.value.lineStartedAt } }
    /// Bytes read from and sent to the peer (for statistics). Read on the loop queue.
    public private(set) var bytesIn: UInt64 { _read { yield confined.value.bytesIn } _modify { yield &confined.value.bytesIn } }
    public private(set) var bytesOut: UInt64 { _read { yield confined.value.bytesOut } _modify { yield &confined.value.bytesOut } }

    private let fd: Int32
    private let onReset: OnReset
    /// Strong, and let go at close (which ends the cycle with an owner that keeps its
    /// connections). Not `weak`: a weak reference gives the delegate a side table, and every
    /// retain and release of it (a few per line, from every loop) then takes the runtime's slow path.
    private var delegate: (any ConnectionDelegate)? { _read { yield confined.value.delegate } _modify { yield &confined.value.delegate } }
    private var framer: LineFramer { _read { yield confined.value.framer } _modify { yield &confined.value.framer } }
    /// The framer's unfinished input as last reported to the loop's budget.
    private var reportedInput: Int { _read { yield confined.value.reportedInput } _modify { yield &confined.value.reportedInput } }
    private var outbound: OutboundBuffer { _read { yield confined.value.outbound } _modify { yield &confined.value.outbound } }
    /// The loop's name for this fd; 0 until registered.
    private var token: UInt64 { _read { yield confined.value.token } _modify { yield &confined.value.token } }
    private var interest: IOInterest { _read { yield confined.value.interest } _modify { yield &confined.value.interest } }
    private var readClosed: Bool { _read { yield confined.value.readClosed } _modify { yield &confined.value.readClosed } }
    /// The owner asked for no more reads for now (`pauseReading`).
    private var readPaused: Bool { _read { yield confined.value.readPaused } _modify { yield &confined.value.readPaused } }
    /// Call `connectionDidDrain` when output that waited for writability is all sent.
    public var notifiesDrain: Bool { _read { yield confined.value.notifiesDrain } _modify { yield &confined.value.notifiesDrain } }
    /// Never idle (a change feed's subscriber waits quietly for changes).
    public var exemptFromIdleTimeout: Bool { _read { yield confined.value.exemptFromIdleTimeout } _modify { yield &confined.value.exemptFromIdleTimeout } }
    private var closeReason: CloseReason? { _read { yield confined.value.closeReason } _modify { yield &confined.value.closeReason } }
    /// Replies that must wait for an earlier reserved one: oldest first.
    private var held: [(slot: UInt64, bytes: [UInt8]?)] { _read { yield confined.value.held } _modify { yield &confined.value.held } }
    /// Owners that will send replies later in this turn (`beginDeferredReplies`).
    private var deferrals: Int { _read { yield confined.value.deferrals } _modify { yield &confined.value.deferrals } }
    /// Why the connection closes once its output is sent (`closeAfterFlush`).
    private var finishingReason: CloseReason? { _read { yield confined.value.finishingReason } _modify { yield &confined.value.finishingReason } }
    private var heldBytes: Int { _read { yield confined.value.heldBytes } _modify { yield &confined.value.heldBytes } }
    private var nextSlot: UInt64 { _read { yield confined.value.nextSlot } _modify { yield &confined.value.nextSlot } }
    /// The connection's TLS, or nil for plain TCP; `outbound` then holds plaintext.
    let tls: TLSSession?

    /// Takes ownership of `fd` (non-blocking). Call `start()` to begin reading.
    public init(
        fd: Int32, id: UInt64, peer: SocketAddress?, loop: EventLoop, limits: Limits, onReset: OnReset = .drop,
        tls: TLSSession? = nil, delegate: any ConnectionDelegate
    ) {
        self.fd = fd
        self.tls = tls
        self.id = id
        self.peer = peer
        self.loop = loop
        self.limits = limits
        self.onReset = onReset
        let now = DispatchTime.now().uptimeNanoseconds
        confined = Confined(Fields(lastActivityAt: now, delegate: delegate, framer: LineFramer(maxFrameBytes: limits.maxFrameBytes)))
        self.openedAt = now
    }

    deinit {
        assert(closeReason != nil || token == 0, "connection \(id) released with its fd open")
    }

    public var isClosed: Bool { closeReason != nil }

    /// Bytes of an unfinished line held for this peer.
    var bufferedInputBytes: Int { framer.bufferedByteCount }

    /// Nothing read or written for longer than `nanoseconds`, and no reply owed: safe to close
    /// without cutting a reply short. Call on the loop queue.
    public func isIdle(now: UInt64, longerThan nanoseconds: UInt64) -> Bool {
        loop.preconditionOnLoop()
        return closeReason == nil && !exemptFromIdleTimeout && deferrals == 0 && held.isEmpty && outbound.isEmpty
            && now &- lastActivityAt > nanoseconds
    }

    /// Registers with the loop and starts reading. Call once, from anywhere; work happens on the loop queue.
    public func start() {
        queue.async { self.startOnLoop() }
    }

    private func startOnLoop() {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        do {
            interest = .read
            token = try loop.register(fd, interest: interest, self)
        } catch {
            token = 0
            close(.error("could not watch the socket: \(error)"))
            return
        }
        if let tls, !tls.isServer {
            tls.startHandshake()
            flush()
        }
    }

    /// The TLS handshake has not finished (false for plain TCP). For the handshake timeout.
    public var isNegotiatingTLS: Bool {
        guard let tls else { return false }
        return !tls.isEstablished
    }

    /// The names of the peer's verified TLS certificate (subject CN, DNS names); empty for plain
    /// TCP or without a verified certificate. Call on the loop queue.
    public var verifiedPeerNames: [String] { tls?.verifiedPeerNames ?? [] }

    /// What the loop saw for this fd in this turn.
    func ready(_ events: IOEvents) {
        if events.contains(.reset) {
            // Reset, or an error is pending: whatever is still queued has nobody to answer (a
            // server), or may be the peer's last words (a client).
            if onReset == .deliver && !readClosed { read(untilEOF: true) }
            if closeReason == nil { close(.peerReset("connection reset by peer")) }
            return
        }
        if events.contains(.writable) { flush() }
        if events.contains(.readable) && closeReason == nil && !readClosed && !readPaused {
            read(untilEOF: events.contains(.readHangup))
        }
    }

    // MARK: - Reading

    /// Reads and serves what is queued. Once the peer's FIN is known (`untilEOF`), reads on to EOF;
    /// otherwise a short read means the queue is empty (level-triggered: a turn comes back for more).
    private func read(untilEOF: Bool) {
        loop.assertOnLoop()
        if let tls { return readTLS(tls, untilEOF: untilEOF) }
        // A few reads per turn, then yield to the other connections of this loop.
        for _ in 0..<16 where closeReason == nil && !readClosed && !readPaused {
            guard let n = receive() else { break }
            if n == 0 {
                peerFinished()
                break
            }
            bytesIn &+= UInt64(n)
            lastActivityAt = loop.now
            guard let delegate else { break }
            serveLines(loop.readBuffer, count: n, delegate: delegate)
            if n < loop.readBuffer.count && !untilEOF { break }
        }
        // A flush with nothing to send, no write interest to drop and the peer still sending
        // would change nothing (pausing and EOF update the interest themselves): skipped, as it
        // is after nearly every read, whose replies the owner sends later (~150 instructions).
        if !outbound.isEmpty || interest.contains(.write) || readClosed { flush() }
    }

    /// One read into the loop's buffer: the byte count (0 at EOF), or nil when nothing is queued
    /// or the read failed (the connection is then closed).
    @inline(__always)
    private func receive() -> Int? {
        do {
            guard case .processed(let n) = try Syscall.receive(fd, into: loop.readBuffer) else { return nil }
            return n
        } catch {
            close(error.code == ECONNRESET ? .peerReset("connection reset by peer") : .error("\(error)"))
            return nil
        }
    }

    /// Frames the first `count` bytes of `buffer` and hands each line to the delegate.
    @inline(__always)
    private func serveLines(_ buffer: UnsafeMutableRawBufferPointer, count n: Int, delegate: any ConnectionDelegate) {
        framer.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<n])) { frame in
            // Once the owner closes or stops reading (e.g. on a line that is not ours), the
            // lines behind it in this read are not served either.
            guard closeReason == nil, !readClosed else { return }
            switch frame {
            case .line(let line):
                lineStartedAt = 0
                delegate.connection(self, didReceive: line)
            case .tooLarge(let length): delegate.connection(self, didReceiveOversizeLine: length)
            }
            flushIfLarge()
        }
        if lineStartedAt == 0 && framer.isMidLine { lineStartedAt = lastActivityAt }
        reportInput()
        delegate.connectionDidServeRead(self)
    }

    /// `read(untilEOF:)` for a TLS peer: the socket's bytes go to OpenSSL, its plaintext to the framer.
    private func readTLS(_ tls: TLSSession, untilEOF: Bool) {
        var eof = false
        for _ in 0..<16 where closeReason == nil && !readClosed && !readPaused {
            guard let n = receive() else { break }
            if n == 0 {
                eof = true
                break
            }
            bytesIn &+= UInt64(n)
            lastActivityAt = loop.now
            if !tls.checkedFirstByte {
                tls.checkedFirstByte = true
                // A TLS stream opens with a handshake record (22); anything else is a plain-text peer.
                if tls.isServer && loop.readBuffer[0] != 22 {
                    if let refusal = tls.plaintextRefusal { _ = try? Syscall.send(fd, refusal.withUnsafeBytes { $0 }) }
                    close(.error("plain text on a TLS listener: the peer did not start a TLS handshake"))
                    return
                }
            }
            tls.receive(UnsafeRawBufferPointer(rebasing: loop.readBuffer[0..<n]))
            decryptTLS(tls)
            if closeReason != nil { return }
            if n < loop.readBuffer.count && !untilEOF { break }
        }
        if eof && closeReason == nil && !readClosed { peerFinished() }
        if closeReason == nil { flush() }
    }

    /// Decrypts the buffered input and serves its lines, until OpenSSL needs more from the socket.
    private func decryptTLS(_ tls: TLSSession) {
        while closeReason == nil && !readClosed && !readPaused {
            let result = tls.read(into: loop.readBuffer)
            if !tls.announcedEstablished && tls.isEstablished {
                // Before the first line: the owner learns who the peer is (its certificate) first.
                tls.announcedEstablished = true
                delegate?.connectionDidEstablishTLS(self)
                if closeReason != nil { return }
                // Replies that waited for the handshake (a client's first requests) may go now.
                if !outbound.isEmpty { flush() }
                if closeReason != nil { return }
            }
            switch result {
            case .data(let n):
                guard let delegate else { return }
                serveLines(loop.readBuffer, count: n, delegate: delegate)
            case .needsInput:
                return
            case .closed:
                peerFinished()
                return
            case .failed(let message):
                // The alert OpenSSL wrote tells the peer why; sent once, without waiting.
                sendTLSOutputOnce(tls)
                close(.error(message))
                return
            }
        }
    }

    /// One non-blocking attempt to send OpenSSL's pending records (an alert, a close_notify).
    private func sendTLSOutputOnce(_ tls: TLSSession) {
        _ = try? tls.pendingOutput.flush { bytes throws(Errno) in try Syscall.send(fd, bytes) }
    }

    /// Tells the loop how much unfinished input this peer holds now (the daemon-wide budget).
    private func reportInput() {
        let now = closeReason == nil ? framer.bufferedByteCount : 0
        guard now != reportedInput else { return }
        let delta = now - reportedInput
        reportedInput = now
        loop.inputChanged(by: delta)
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
        updateInterest()
        closeIfFinished()
    }

    /// Watches for reads until EOF, and for writability only while bytes wait (a level-triggered
    /// EPOLLOUT with nothing to write would wake the loop forever; so would EPOLLIN after EOF).
    private func updateInterest() {
        guard token != 0, closeReason == nil else { return }
        var wanted: IOInterest = readClosed || readPaused ? [] : .read
        if let tls {
            // Plaintext waits for the handshake (a read event), not for writability.
            if !tls.pendingOutput.isEmpty || (!outbound.isEmpty && tls.isEstablished) { wanted.insert(.write) }
        } else if !outbound.isEmpty {
            wanted.insert(.write)
        }
        guard wanted != interest else { return }
        do {
            try loop.reregister(fd, token: token, interest: wanted)
            interest = wanted
        } catch {
            close(.error("could not watch the socket: \(error)"))
        }
    }

    /// Stops reading after the lines of the current read (the peer's sends then wait in the
    /// kernel: TCP backpressure) until `resumeReading()`. Call on the loop queue.
    public func pauseReading() {
        loop.preconditionOnLoop()
        guard !readPaused else { return }
        readPaused = true
        updateInterest()
    }

    /// Reads again after `pauseReading()`. Call on the loop queue.
    public func resumeReading() {
        loop.preconditionOnLoop()
        guard readPaused else { return }
        readPaused = false
        updateInterest()
        // Records already taken from the socket raise no event: decrypt them now.
        if let tls, tls.hasBufferedInput {
            queue.async { [self] in
                if closeReason == nil && !readPaused && !readClosed, let tls = self.tls { decryptTLS(tls) }
                if closeReason == nil { flush() }
            }
        }
    }

    /// Bytes queued for the peer and not yet taken by the socket (held replies included).
    public var pendingOutputBytes: Int {
        loop.preconditionOnLoop()
        return outbound.count + heldBytes + (tls?.pendingOutput.count ?? 0)
    }

    /// Sends now when enough is queued (64 KiB): an owner that queues many replies before its one
    /// flush (a batch) hands them to the kernel as it goes, so they do not pile up here past the
    /// output cap while the socket has room. Call on the loop queue.
    public func flushIfLarge() {
        if outbound.count >= Self.eagerFlushBytes { flush() }
    }

    // MARK: - Writing

    /// Queues a reply after every earlier one. Call on the loop queue; it is sent when the current
    /// batch of lines is done (or now, outside a read event).
    public func send(_ bytes: [UInt8]) {
        loop.assertOnLoop()
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
        loop.assertOnLoop()
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
        loop.assertOnLoop()
        let slot = nextSlot
        nextSlot &+= 1
        held.append((slot: slot, bytes: nil))
        return slot
    }

    /// Fills a reserved place, and sends every reply that no longer waits (now, or at the caller's
    /// `flush()` when it fills several at once). Call on the loop queue.
    public func fill(_ slot: UInt64, with bytes: [UInt8], flush flushNow: Bool = true) {
        fill(slot, with: bytes[...], flush: flushNow)
    }

    /// `fill(_:with:flush:)` with a part of a buffer (replies released together share one). The
    /// first slot held, the usual case, goes straight to the output; a later one is copied until
    /// its turn comes.
    public func fill(_ slot: UInt64, with bytes: ArraySlice<UInt8>, flush flushNow: Bool = true) {
        loop.assertOnLoop()
        guard closeReason == nil, let index = held.firstIndex(where: { $0.slot == slot }) else { return }
        var ready = 0
        if index == 0 {
            outbound.append(bytes)
            ready = 1
        } else {
            held[index].bytes = Array(bytes)
            heldBytes += bytes.count
        }
        while ready < held.count, let bytes = held[ready].bytes {
            outbound.append(bytes)
            heldBytes -= bytes.count
            ready += 1
        }
        held.removeFirst(ready)
        checkOutputCap()
        if flushNow { flush() }
    }

    /// Writes what can be written now; watches for writability for the rest.
    public func flush() {
        loop.assertOnLoop()
        guard closeReason == nil else { return }
        if let tls { return flushTLS(tls) }
        let waited = interest.contains(.write)
        let result: OutboundBuffer.FlushResult
        let sentBefore = bytesOut
        do {
            result = try outbound.flush { bytes throws(Errno) in
                let sent = try Syscall.send(fd, bytes)
                if case .processed(let n) = sent { bytesOut &+= UInt64(n) }
                return sent
            }
        } catch {
            let reset = error.code == EPIPE || error.code == ECONNRESET
            close(reset ? .peerReset("peer closed before reading its replies") : .error("\(error)"))
            return
        }
        // In a turn the loop's clock is the turn's (read once a poll); outside one (a reply
        // released by an fsync) it is stale: read the time. (A read of the clock a reply was
        // ~65 instructions and a vDSO call.)
        if bytesOut != sentBefore { lastActivityAt = loop.inTurn ? loop.now : DispatchTime.now().uptimeNanoseconds }
        updateInterest()
        if result == .flushed {
            closeIfFinished()
            if waited { drained() }
        }
    }

    /// Output that waited for the peer is all sent, by whichever flush sent it (a writable event,
    /// or the flush after a read): the producer hears of it once.
    private func drained() {
        if notifiesDrain && closeReason == nil && outbound.isEmpty && (tls?.pendingOutput.isEmpty ?? true) {
            delegate?.connectionDidDrain(self)
        }
    }

    /// `flush()` for a TLS peer: plaintext is encrypted a record at a time, and only while the
    /// records before it have left, so at most one record's worth waits encrypted.
    private func flushTLS(_ tls: TLSSession) {
        let sentBefore = bytesOut
        let waited = interest.contains(.write)
        let fd = fd
        var sentRecords = false
        func sendRecords() throws(Errno) -> OutboundBuffer.FlushResult {
            try tls.pendingOutput.flush { bytes throws(Errno) in
                let sent = try Syscall.send(fd, bytes)
                if case .processed = sent { sentRecords = true }
                return sent
            }
        }
        do {
            var records = try sendRecords()
            if records == .flushed && tls.isEstablished {
                _ = try outbound.flush { plaintext throws(Errno) in
                    guard records == .flushed else { return .wouldBlock }
                    let taken = tls.write(plaintext)
                    guard taken > 0 else { return .wouldBlock }
                    // Plaintext counts as out once encrypted: a client then takes a call handed to
                    // TLS as possibly sent (never the other way round).
                    bytesOut &+= UInt64(taken)
                    records = try sendRecords()
                    return .processed(taken)
                }
            }
        } catch {
            let reset = error.code == EPIPE || error.code == ECONNRESET
            close(reset ? .peerReset("peer closed before reading its replies") : .error("\(error)"))
            return
        }
        if let failure = tls.failure { return close(.error(failure)) }
        if sentRecords || bytesOut != sentBefore { lastActivityAt = loop.inTurn ? loop.now : DispatchTime.now().uptimeNanoseconds }
        updateInterest()
        if outbound.isEmpty && tls.pendingOutput.isEmpty {
            closeIfFinished()
            if waited { drained() }
        }
    }

    private func checkOutputCap() {
        let pending = outbound.count + heldBytes
        if pending > limits.maxOutputBytes { close(.outputOverflow(pending)) }
    }

    // MARK: - Closing

    private func closeIfFinished() {
        if readClosed && deferrals == 0 && held.isEmpty && outbound.isEmpty && closeReason == nil
            && (tls?.pendingOutput.isEmpty ?? true)
        {
            close(finishingReason ?? .finished)
        }
    }

    /// Tells the connection that replies to lines it delivered will be sent later in this loop
    /// turn (the owner gathers a turn's requests and answers them together): a peer that
    /// half-closed is not closed before they are sent. Pair with `endDeferredReplies()`.
    public func beginDeferredReplies() {
        loop.assertOnLoop()
        deferrals += 1
    }

    /// The deferred replies are sent (or queued): sends what is queued and, once the peer
    /// half-closed and nothing is owed, closes.
    public func endDeferredReplies() {
        loop.assertOnLoop()
        deferrals -= 1
        if deferrals == 0 { flush() }
    }

    /// Closes now, dropping unsent replies. Idempotent. Call on the loop queue.
    public func close(_ reason: CloseReason) {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        closeReason = reason
        held.removeAll()
        heldBytes = 0
        outbound = OutboundBuffer()
        reportInput()
        // Out of the set before the fd is closed: no later turn can report this fd, or a new
        // connection that reuses its number, to this connection.
        if token != 0 { loop.deregister(fd, token: token) }
        if let tls {
            // A close_notify, so the peer can tell this end from a cut connection.
            switch reason {
            case .finished, .closedByServer: tls.shutdown()
            default: break
            }
            sendTLSOutputOnce(tls)
        }
        Syscall.close(fd)
        delegate?.connectionDidClose(self, reason: reason)
        delegate = nil
        context = nil
    }

    /// Stops reading, sends everything pending (a last error line included), then closes with
    /// `reason`; a peer that does not take it all within `deadline` seconds is closed anyway.
    public func closeAfterFlush(_ reason: CloseReason, deadline: Double = 5) {
        loop.preconditionOnLoop()
        guard closeReason == nil else { return }
        flush()
        guard closeReason == nil else { return }
        if outbound.isEmpty && held.isEmpty && (tls?.pendingOutput.isEmpty ?? true) { return close(reason) }
        finishingReason = reason
        readClosed = true
        updateInterest()
        queue.asyncAfter(deadline: .now() + deadline) { [self] in
            if closeReason == nil { close(reason) }
        }
    }
}
