import RPCSchema

/// Every page of a list, fetched one call at a time as the loop asks: `client.pages(ListUsers(limit: 100))`.
///
/// The first page starts at the call's `after`; each next one at the previous page's `next`; the
/// page without `next` is the last. An error ends the sequence (the next `next()` returns nil).
/// Pages are read while the data may change: a record created or deleted meanwhile may or may not
/// show, but no record shows twice, since each page starts after the last id seen.
public struct RPCPages<C: RPCListCall>: AsyncSequence, Sendable {
    public typealias Element = C.Reply

    let client: RPCClient
    let first: C
    let timeout: CallTimeout

    public func makeAsyncIterator() -> Iterator {
        Iterator(client: client, call: first, timeout: timeout)
    }

    public struct Iterator: AsyncIteratorProtocol, Sendable {
        let client: RPCClient
        /// The call for the next page; nil after the last page or an error.
        var call: C?
        let timeout: CallTimeout

        public mutating func next() async throws -> C.Reply? {
            guard var current = call else { return nil }
            call = nil
            let page = try await client.page(current, timeout: timeout)
            if let next = page.next {
                guard next != current.after else {
                    throw RPCClientError.badReply(
                        method: C.method, id: "", reason: "the page after \"\(next)\" says the next page starts at \"\(next)\" again")
                }
                current.after = next
                call = current
            }
            return page
        }
    }
}
