/// Failed `system.auth` calls per peer host, across its connections: after a few, each further
/// failure makes the host wait longer before its next token is even checked (PostgreSQL's
/// `auth_delay`, without holding a connection). A plain value; `DaemonContext` guards it.
///
/// Bounded: at most `maxHosts` hosts are remembered; a host quiet for `forgetSeconds` is forgotten,
/// and past the bound the host quiet the longest goes first.
struct AuthThrottle: Sendable {
    struct Host: Sendable {
        var failures: Int
        var lastFailure: UInt64
        var blockedUntil: UInt64
    }

    /// Failures a host may have before it waits.
    static let freeFailures = 5
    static let firstDelaySeconds = 0.1
    static let maxDelaySeconds = 30.0
    static let forgetSeconds = 600.0
    static let maxHosts = 4096

    private(set) var hosts: [String: Host] = [:]

    /// Seconds `host` must still wait before a token of its is checked; nil when it need not.
    func wait(host: String, now: UInt64) -> Double? {
        guard let entry = hosts[host], entry.blockedUntil > now else { return nil }
        return Double(entry.blockedUntil - now) / 1e9
    }

    /// Counts a failure of `host` at `now` (uptime nanoseconds); returns its failures lately.
    mutating func failed(host: String, now: UInt64) -> Int {
        var entry = hosts[host] ?? Host(failures: 0, lastFailure: now, blockedUntil: 0)
        if Double(now &- entry.lastFailure) > Self.forgetSeconds * 1e9 { entry.failures = 0 }
        entry.failures = min(entry.failures + 1, Int(Int32.max))
        entry.lastFailure = now
        let delay = Self.delay(afterFailures: entry.failures)
        entry.blockedUntil = delay > 0 ? now &+ UInt64(delay * 1e9) : 0
        if hosts[host] == nil && hosts.count >= Self.maxHosts { makeRoom(now: now) }
        hosts[host] = entry
        return entry.failures
    }

    /// 0 for the first `freeFailures`, then 0.1 s doubling per failure, at most 30 s.
    static func delay(afterFailures failures: Int) -> Double {
        guard failures > freeFailures else { return 0 }
        let doublings = min(failures - freeFailures - 1, 20)
        return min(firstDelaySeconds * Double(1 << doublings), maxDelaySeconds)
    }

    private mutating func makeRoom(now: UInt64) {
        hosts = hosts.filter { Double(now &- $0.value.lastFailure) <= Self.forgetSeconds * 1e9 }
        guard hosts.count >= Self.maxHosts, let quietest = hosts.min(by: { $0.value.lastFailure < $1.value.lastFailure }) else { return }
        hosts[quietest.key] = nil
    }
}
