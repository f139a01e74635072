#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Splits a byte stream into lines: `\n` ends a line, a `\r` before it is dropped, blank lines are
/// skipped. A pure value over bytes (swift-nio-extras `LineBasedFrameDecoder`), so every split point
/// can be tested without a socket.
///
/// Memory is bounded: a line longer than `maxFrameBytes` (not counting its `\n` and a `\r` before it)
/// is reported once, as soon as it is known to be too long, and the rest of it is discarded up to
/// the next newline without being buffered.
public struct LineFramer: Sendable {
    public enum Frame {
        /// One complete line without its terminator. Valid only during the callback.
        case line(UnsafeRawBufferPointer)
        /// A line past the limit; `length` counts the bytes seen when it was found too long.
        case tooLarge(length: Int)
    }

    public let maxFrameBytes: Int
    /// Bytes of a line whose end has not arrived yet.
    private var partial: [UInt8] = []
    /// True while skipping the rest of a line already reported as too large.
    private var discarding = false

    public init(maxFrameBytes: Int) {
        precondition(maxFrameBytes > 0, "maxFrameBytes must be positive")
        self.maxFrameBytes = maxFrameBytes
    }

    /// Bytes held for an unfinished line (for tests and accounting).
    public var bufferedByteCount: Int { partial.count }

    /// A line has begun and not ended (held, or being discarded as too long).
    public var isMidLine: Bool { !partial.isEmpty || discarding }

    /// Feeds a chunk; calls `emit` for each frame completed by it, in order.
    public mutating func feed(_ chunk: UnsafeRawBufferPointer, _ emit: (Frame) throws -> Void) rethrows {
        var start = 0
        let end = chunk.count
        while start < end {
            guard let newline = Self.index(of: 0x0A, in: chunk, from: start) else {
                try absorb(chunk, from: start, to: end, emit)
                return
            }
            if discarding {
                discarding = false
            } else if partial.isEmpty {
                try emitLine(UnsafeRawBufferPointer(rebasing: chunk[start..<newline]), emit)
            } else {
                partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[start..<newline]))
                let line = partial
                partial.removeAll(keepingCapacity: partial.count <= 4096)
                try line.withUnsafeBytes { try emitLine($0, emit) }
            }
            start = newline + 1
        }
    }

    /// Keeps the bytes of an unfinished line, or finds it too long.
    private mutating func absorb(
        _ chunk: UnsafeRawBufferPointer, from start: Int, to end: Int, _ emit: (Frame) throws -> Void
    ) rethrows {
        guard !discarding else { return }
        // Both terms are sizes of bytes in memory: their sum cannot overflow. `length - 1` cannot
        // either, where `maxFrameBytes + 1` would for a limit of Int.max.
        let length = partial.count + (end - start)
        // One byte more than the limit may still be the `\r` of a `\r\n` that ends a line of exactly the limit.
        if length - 1 > maxFrameBytes {
            partial.removeAll(keepingCapacity: false)
            discarding = true
            try emit(.tooLarge(length: length))
            return
        }
        partial.append(contentsOf: UnsafeRawBufferPointer(rebasing: chunk[start..<end]))
    }

    // Inlined into `feed`: as its own (closure-specialized) function it took the emit closure's
    // captures (the connection and its delegate) owned, a retain and a release of each per line.
    @inline(__always)
    private func emitLine(_ raw: UnsafeRawBufferPointer, _ emit: (Frame) throws -> Void) rethrows {
        var line = raw
        if let last = line.last, last == 0x0D {
            line = UnsafeRawBufferPointer(rebasing: line.dropLast())
        }
        if line.count > maxFrameBytes {
            try emit(.tooLarge(length: line.count))
            return
        }
        if Self.isBlank(line) { return }
        try emit(.line(line))
    }

    private static func isBlank(_ line: UnsafeRawBufferPointer) -> Bool {
        for byte in line where byte != 0x20 && byte != 0x09 && byte != 0x0D { return false }
        return true
    }

    /// libc's `memchr`, which reads a word or a vector at a time where a loop over the bytes read
    /// one (a read holds tens of lines under pipelining, each scanned for its end).
    private static func index(of byte: UInt8, in buffer: UnsafeRawBufferPointer, from start: Int) -> Int? {
        guard start < buffer.count, let base = buffer.baseAddress else { return nil }
        guard let found = memchr(base + start, Int32(byte), buffer.count - start) else { return nil }
        return base.distance(to: UnsafeRawPointer(found))
    }
}
