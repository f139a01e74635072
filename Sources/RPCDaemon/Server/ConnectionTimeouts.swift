import RPCTransport

/// The clocks a connection runs against, checked by each loop's sweep: idle (no I/O either way,
/// nothing owed), a line under way too long (a peer dribbling bytes is never idle), not yet
/// authenticated where it must, and a TLS handshake not finished. Seconds; 0 = never.
struct ConnectionTimeouts: Sendable {
    enum Expired: Equatable { case idle, line, auth, handshake }

    let idle: UInt64
    let line: UInt64
    let auth: UInt64
    let handshake: UInt64
    /// How often a loop looks: a quarter of the shortest timeout, within 50 ms to 1 s; 0 with none.
    let sweepPeriod: Double

    init(idle: Double, line: Double, auth: Double, handshake: Double = 0) {
        self.idle = Self.nanoseconds(idle)
        self.line = Self.nanoseconds(line)
        self.auth = Self.nanoseconds(auth)
        self.handshake = Self.nanoseconds(handshake)
        let shortest = [idle, line, auth, handshake].filter { $0 > 0 && $0.isFinite }.min()
        sweepPeriod = shortest.map { min(1.0, max(0.05, $0 / 4)) } ?? 0
    }

    /// Which timeout `connection` has run out of at `now` (uptime nanoseconds), if any.
    func expired(_ connection: Connection, awaitingAuth: Bool, now: UInt64) -> Expired? {
        if handshake > 0 && now &- connection.openedAt > handshake && connection.isNegotiatingTLS && !connection.isClosed { return .handshake }
        if auth > 0 && awaitingAuth && now &- connection.openedAt > auth && !connection.isClosed { return .auth }
        if line > 0 && connection.lineStartedAt != 0 && now &- connection.lineStartedAt > line && !connection.isClosed { return .line }
        if idle > 0 && connection.isIdle(now: now, longerThan: idle) { return .idle }
        return nil
    }

    /// Clamped: a value too large for nanoseconds means "practically never".
    private static func nanoseconds(_ seconds: Double) -> UInt64 {
        guard seconds > 0, seconds.isFinite else { return 0 }
        return seconds * 1e9 < Double(UInt64.max / 2) ? UInt64(seconds * 1e9) : UInt64.max / 2
    }
}
