import Foundation
import RPCEntities
import RPCSchema

/// Calls refused for want of a role (`unauthorized`, `forbidden`): the last `capacity` for
/// `system.stats` (Redis's `ACL LOG`), and a log line per peer, rate-limited and summed up by the
/// logger ("… and 312 more in the last 10 s").
final class AuditTrail: @unchecked Sendable {
    // @unchecked: `recent` and `next` are guarded by `lock`.
    static let capacity = 64

    private let lock = NSLock()
    private var recent: [RefusalRecord] = []
    /// Where the next record goes once `recent` is full (a ring).
    private var next = 0
    private let log: Logger

    init(log: Logger) { self.log = log }

    func record(_ method: RPCMethod, _ error: RPCError, session: Session) {
        let who = session.principal.map { "\"\($0)\" from \(session.peer)" } ?? session.peer
        let record = RefusalRecord(time: Date().timeIntervalSince1970, who: who, method: method.description, code: error.code.rawValue)
        lock.withLock {
            if recent.count < Self.capacity {
                recent.append(record)
            } else {
                recent[next] = record
                next = (next + 1) % Self.capacity
            }
        }
        // One key per peer host: the summary then counts one source's refusals.
        log.warning(key: "refused-\(session.peerHost)", "\(who): \(method) refused (\(error.code.rawValue)): \(error.errorMessage)")
    }

    /// Oldest first.
    var records: [RefusalRecord] {
        lock.withLock { Array(recent[next...] + recent[..<next]) }
    }
}
