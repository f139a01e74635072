/// Sends a call again after its connection dropped, so that a daemon restart or a dropped
/// connection shows to callers as latency, not as errors (`RPCClientOptions.retry`).
///
/// When the connection drops, every call that waits for a reply, or has not been sent yet, waits
/// for the reconnect (`RPCClientOptions.reconnect`, or `ReconnectPolicy.whileCallsWait`) and is
/// then sent again, in the order the calls were first made, with the same id:
/// - a read as it is (reading twice is harmless);
/// - a mutation with its idempotency key (`RPCClientOptions.keyGenerator`, or the call's own
///   `key:`), so the daemon applies it once and answers a repeat with the first outcome;
/// - a mutation without a key (`keyGenerator: nil`), or a raw `send` without `key:`, only if it
///   was never sent; else it fails with `.outcomeUnknown`.
///
/// Every call stays within its own timeout, across all its tries. A call that was sent
/// `maxAttempts` times (one that kills the daemon every time, say) fails with `.outcomeUnknown`.
public struct RetryPolicy: Sendable, Equatable {
    /// How many times one call may be sent at most, the first time included.
    public var maxAttempts: Int

    public init(maxAttempts: Int = 5) {
        self.maxAttempts = max(1, maxAttempts)
    }
}
