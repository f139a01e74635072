import RPCSchema

/// Collects the results of one submission; completes once, when the last one is in. Queue-owned.
final class Collector: @unchecked Sendable {
    // @unchecked: used only on the client's queue (through `ClientCore`).
    private var results: [Result<Request, RPCClientError>?]
    private var remaining: Int
    private var completion: (@Sendable ([Result<Request, RPCClientError>]) -> Void)?

    init(count: Int, completion: @escaping @Sendable ([Result<Request, RPCClientError>]) -> Void) {
        results = Array(repeating: nil, count: count)
        remaining = count
        self.completion = completion
        if count == 0 { finish() }
    }

    func set(_ index: Int, _ result: Result<Request, RPCClientError>) {
        guard results[index] == nil else { return }  // a call completes once; a second result is ignored
        results[index] = result
        remaining -= 1
        if remaining == 0 { finish() }
    }

    private func finish() {
        guard let completion else { return }
        self.completion = nil
        completion(results.map { $0 ?? .failure(.invalidCall(method: .error, reason: "no result (client bug)")) })
    }
}
