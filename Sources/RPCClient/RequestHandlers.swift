import Dispatch
import Foundation
import RPCSchema

/// Handlers for what the daemon sends that is not a reply to a call in flight: requests, and
/// counter-requests nobody waits for (e.g. a reply that came after its call timed out).
///
/// Handlers run one at a time, in arrival order, on a queue of their own (never on the
/// connection's queue). Nothing here ever answers: an unhandled message is dropped silently.
public final class RequestHandlers: @unchecked Sendable {
    // @unchecked: `byMethod` and `fallback` are only touched under `lock`.
    public typealias Handler = @Sendable (Request) -> Void

    private let lock = NSLock()
    private var byMethod: [RPCMethod: Handler] = [:]
    private var fallback: Handler?
    private let queue = DispatchQueue(label: "rpc.client.handlers")

    init() {}

    /// Handles every message calling `method` (replacing an earlier handler for it).
    public func on(_ method: RPCMethod, _ handler: @escaping Handler) {
        lock.withLock { byMethod[method] = handler }
    }

    /// Handles requests calling `C.method`, with their param decoded as `C`; a param that does not
    /// decode is dropped.
    public func on<C: RPCCall>(_ call: C.Type, _ handler: @escaping @Sendable (_ call: C, _ id: String) -> Void) {
        on(C.method) { request in
            guard let call = try? JSONValueDecoder().decode(C.self, from: request.param ?? .object(JSONObject())) else { return }
            handler(call, request.id)
        }
    }

    /// Handles every message no method handler takes.
    public func onAnyOther(_ handler: @escaping Handler) {
        lock.withLock { fallback = handler }
    }

    /// Removes the handler of `method`.
    public func remove(_ method: RPCMethod) {
        lock.withLock { byMethod[method] = nil }
    }

    func deliver(_ message: Request) {
        let handler = lock.withLock { byMethod[message.method] ?? fallback }
        guard let handler else { return }  // unhandled: dropped, never answered
        queue.async { handler(message) }
    }
}

/// What a feed handler tells the client after each request it took.
package enum FeedFlow: Sendable {
    /// Keep reading.
    case `continue`
    /// Read nothing more until `resumeFeed()`.
    case pause
}
