import Foundation
import RPCSchema

/// The bounded queue between a change feed's handler (on the client's queue) and the task that
/// iterates the changes: a value with no locks or continuations, so tests script it directly.
///
/// `offer` says `.pause` whenever `limit` requests or more wait (the client then stops reading,
/// and the leader's sends wait in TCP); `take` says to resume once the consumer drained down to
/// half the limit. Requests the client read before it paused are still taken, so the count can
/// pass `limit` by one read's worth.
struct FeedQueue {
    enum Take: Equatable {
        /// The oldest request; `resume` when the client should read again.
        case deliver(Request, resume: Bool)
        /// The feed ended: the buffered requests are all taken (or the consumer cancelled).
        case fail(RPCClientError)
        /// Nothing yet: wait for `offer` or `fail`.
        case wait
    }

    let limit: Int
    private var items: [Request] = []
    private var head = 0
    /// Set by `offer` when it said `.pause`; cleared by the `take` that says to resume.
    private(set) var paused = false
    /// Why the feed ended, once it did; taken after the buffered requests.
    private var failure: RPCClientError?
    /// The consumer gave up: fail at once, buffered requests or not.
    private var cancelled: RPCClientError?

    init(limit: Int) { self.limit = max(1, limit) }

    var count: Int { items.count - head }

    mutating func offer(_ request: Request) -> FeedFlow {
        guard failure == nil && cancelled == nil else { return .continue }  // over: dropped
        items.append(request)
        guard count >= limit else { return .continue }
        paused = true
        return .pause
    }

    mutating func take() -> Take {
        if let cancelled { return .fail(cancelled) }
        guard count > 0 else { return failure.map(Take.fail) ?? .wait }
        let request = items[head]
        head += 1
        if head >= 1024 && head * 2 >= items.count {  // compact now and then, not per take
            items.removeFirst(head)
            head = 0
        }
        let resume = paused && count <= limit / 2
        if resume { paused = false }
        return .deliver(request, resume: resume)
    }

    /// The feed ended (its connection was lost): after the buffered requests, `take` fails.
    mutating func fail(_ error: RPCClientError) {
        if failure == nil { failure = error }
    }

    /// The consumer stopped: `take` fails at once.
    mutating func cancel(_ error: RPCClientError) {
        if cancelled == nil { cancelled = error }
    }
}

/// A `FeedQueue` behind a lock, with the consumer's one waiting continuation: the handler side
/// (`offer`, `fail`) runs on the client's queue, `take` in the consuming task.
final class FeedBuffer: @unchecked Sendable {
    // @unchecked: `queue` and `waiter` are only touched under `lock`; continuations are resumed
    // and `resumeFeed` called after unlocking.
    private let lock = NSLock()
    private var queue: FeedQueue
    private var waiter: CheckedContinuation<Request, any Error>?
    /// Tells the client to read again (`RPCClient.resumeFeed`).
    private let resumeFeed: @Sendable () -> Void

    init(limit: Int, resumeFeed: @escaping @Sendable () -> Void) {
        queue = FeedQueue(limit: limit)
        self.resumeFeed = resumeFeed
    }

    /// Requests waiting for the consumer.
    var count: Int { lock.withLock { queue.count } }

    /// The feed handler: hands `request` to a waiting consumer or buffers it.
    func offer(_ request: Request) -> FeedFlow {
        let (flow, handOver) = lock.withLock { () -> (FeedFlow, (CheckedContinuation<Request, any Error>, Request)?) in
            let flow = queue.offer(request)
            // A consumer waits only while the queue is empty: this request is the one to hand over.
            guard let waiter, case .deliver(let first, _) = queue.take() else { return (flow, nil) }
            self.waiter = nil
            return (.continue, (waiter, first))
        }
        if let (waiter, request) = handOver { waiter.resume(returning: request) }
        return flow
    }

    func fail(_ error: RPCClientError) { settle { $0.fail(error) } }

    func cancel(_ error: RPCClientError) { settle { $0.cancel(error) } }

    /// The next request, after every one before it; throws once the feed ended, and `cancelled`
    /// when the task is cancelled.
    func take(cancelled: RPCClientError) async throws -> Request {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Request, any Error>) in
                let (action, resume) = lock.withLock { () -> (FeedQueue.Take, Bool) in
                    let action = queue.take()
                    if case .wait = action { waiter = continuation }
                    if case .deliver(_, let resume) = action { return (action, resume) }
                    return (action, false)
                }
                if resume { resumeFeed() }
                switch action {
                case .deliver(let request, _): continuation.resume(returning: request)
                case .fail(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        } onCancel: {
            cancel(cancelled)
        }
    }

    /// Applies `change` and fails a waiting consumer if the queue now fails.
    private func settle(_ change: (inout FeedQueue) -> Void) {
        let failed = lock.withLock { () -> (CheckedContinuation<Request, any Error>, RPCClientError)? in
            change(&queue)
            guard let waiter, case .fail(let error) = queue.take() else { return nil }
            self.waiter = nil
            return (waiter, error)
        }
        if let (waiter, error) = failed { waiter.resume(throwing: error) }
    }
}
