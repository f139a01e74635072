import Foundation
import RPCEntities

/// The random id a data directory's history began with, in its `ORIGIN` file: records before the
/// first term (term 0) are told apart by it, so two daemons that were never promoted but began
/// apart are not taken for copies of each other. A new, empty directory gets one; a follower that
/// copies its leader's history from the start takes the leader's; a directory from before origins
/// has none ("", which matches any) until it follows a leader that has one.
final class HistoryOrigin: @unchecked Sendable {
    // @unchecked: `id` is guarded by `lock`.
    let path: String
    private let lock = NSLock()
    private var id: String

    private init(path: String, id: String) {
        self.path = path
        self.id = id
    }

    /// The directory's origin; a new one when `empty` (no record yet) and there is none.
    static func load(directory: String, empty: Bool) throws -> HistoryOrigin {
        let path = directory + "/ORIGIN"
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            let id = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if isID(id) { return HistoryOrigin(path: path, id: id) }
        }
        let origin = HistoryOrigin(path: path, id: "")
        if empty { try origin.adopt(TermHistory.newID()) }
        return origin
    }

    static func isID(_ text: String) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    /// The origin, nil when not known.
    var value: String? {
        let current: String = lock.withLock { id }
        return current.isEmpty ? nil : current
    }

    /// Takes `id` (a leader's, when this directory's history is a copy of it) and writes it down.
    func adopt(_ id: String) throws {
        guard Self.isID(id), id != lock.withLock({ self.id }) else { return }
        try FileIO.replace(path, with: Array("\(id)\n".utf8), mode: 0o600, faults: false)
        lock.withLock { self.id = id }
    }
}
