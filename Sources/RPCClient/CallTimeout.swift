/// How long one call may wait for its reply.
///
/// ```swift
/// try await client.call(GetUser(userId: "u1"))                          // .default
/// try await client.call(GetUser(userId: "u1"), timeout: .seconds(2))    // a Duration
/// try await client.call(ListUsers(), timeout: .none)                    // wait as long as it takes
/// ```
///
/// Every call taking `timeout: CallTimeout` also takes `timeout: Duration` (the same as
/// `.after(duration)`). A call with `.none` still ends when the connection is lost (unless a
/// `RetryPolicy` sends it again), when the client is closed, or when its task is cancelled.
public enum CallTimeout: Sendable, Hashable {
    /// `RPCClientOptions.defaultTimeout` (30 s unless set; none if that is nil).
    case `default`
    /// No timeout.
    case none
    /// This long, from the moment the call is made, across every try of a retried call.
    case after(Duration)

    /// The timeout in force under `options`; nil: none.
    func resolved(_ options: RPCClientOptions) -> Duration? {
        switch self {
        case .default: return options.defaultTimeout
        case .none: return nil
        case .after(let duration): return duration
        }
    }
}
