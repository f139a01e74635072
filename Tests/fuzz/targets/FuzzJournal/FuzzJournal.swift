import FuzzSupport
import RPCEntities

/// Fuzzes journal replay (`JournalReplay`, what `Recovery` runs at start) with arbitrary bytes as
/// files. Nothing may crash, and every outcome must describe the bytes it was given.
///
/// Input: when the first byte is even, the rest is one journal file, replayed, then applied as a
/// follower applies its leader's lines, which must agree with the replay. When it is odd, the rest is
/// cut at the first two 0xFF bytes (never part of valid UTF-8) into snapshot, journal and next
/// journal, replayed in that order the way `Recovery` does: stop at the first failure, a torn
/// journal tail is cut off and the next file still replays.
@main enum FuzzJournal {
    static func main() {
        FuzzMain.run { data, size in
            FuzzJournal.test(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
    }

    static func test(_ input: UnsafeRawBufferPointer) {
        guard let mode = input.first else { return }
        let rest = UnsafeRawBufferPointer(rebasing: input[1...])
        var replay = JournalReplay()
        if mode & 1 == 0 {
            if let outcome = journal(rest, into: &replay) { follow(rest, replayed: replay, outcome) }
            return
        }
        let files = rest.split(separator: 0xFF, maxSplits: 2, omittingEmptySubsequences: false)
        let snapshot = UnsafeRawBufferPointer(rebasing: files[0])
        let result = replay.replaySnapshot(snapshot)
        check(result, snapshot, isSnapshot: true)
        guard case .success = result else { return }
        for file in files.dropFirst() {
            guard journal(UnsafeRawBufferPointer(rebasing: file), into: &replay) != nil else { return }
        }
    }

    /// Replays one journal file; what it held, or nil when it failed (the start would stop there).
    @discardableResult
    static func journal(_ bytes: UnsafeRawBufferPointer, into replay: inout JournalReplay) -> JournalReplay.FileOutcome? {
        let before = (replay.lastSeq, replay.applied)
        let result = replay.replayJournal(bytes)
        check(result, bytes, isSnapshot: false)
        guard case .success(let outcome) = result else { return nil }
        fuzzCheck(replay.applied == before.1 + outcome.applied, "applied \(replay.applied) after \(before.1) and \(outcome.applied) more")
        fuzzCheck(outcome.applied == 0 || replay.lastSeq == before.0 &+ UInt64(outcome.applied),
            "last seq \(replay.lastSeq) after \(before.0) and \(outcome.applied) records")
        return outcome
    }

    /// The same bytes as a leader's lines, applied the way a follower applies them
    /// (`Dispatcher.applyReplicated(lines:…)`, where a create is stored from the line's bytes):
    /// never a crash, and when the replay (`replayed`, which held `outcome`) took every line as a
    /// sealed record from sequence 1, the follower applies as many and holds the same users and
    /// buildings.
    static func follow(_ bytes: UnsafeRawBufferPointer, replayed replay: JournalReplay, _ outcome: JournalReplay.FileOutcome) {
        let dispatcher = Dispatcher()
        var applier = JournalReplay()
        let run = dispatcher.applyReplicated(lines: bytes, after: 0, applier: &applier)
        fuzzCheck(run.applied == 0 || run.lastSeq == UInt64(run.applied), "\(run.applied) applied through \(run.lastSeq)")
        guard outcome.unsealed == 0, outcome.skipped == 0 else { return }
        fuzzCheck(run.failure == nil && run.applied == outcome.applied,
            "the replay applied \(outcome.applied), the follower \(run.applied): \(run.failure ?? "no failure")")
        let state = dispatcher.withState { $0 }
        fuzzCheck(state.users.page(after: nil, limit: nil).records == replay.state.users.page(after: nil, limit: nil).records,
            "the follower's users differ from the replay's")
        fuzzCheck(state.buildings.page(after: nil, limit: nil).records == replay.state.buildings.page(after: nil, limit: nil).records,
            "the follower's buildings differ from the replay's")
    }

    static func check(_ result: Result<JournalReplay.FileOutcome, JournalReplay.Failure>, _ bytes: UnsafeRawBufferPointer, isSnapshot: Bool) {
        let newline = UInt8(ascii: "\n")
        switch result {
        case .success(let outcome):
            fuzzCheck(outcome.validBytes + outcome.tornBytes == bytes.count,
                "\(outcome.validBytes) valid + \(outcome.tornBytes) torn bytes of \(bytes.count)")
            fuzzCheck(outcome.validBytes == 0 || bytes[outcome.validBytes - 1] == newline, "the valid part does not end a line")
            fuzzCheck(!bytes[outcome.validBytes...].contains(newline), "the torn tail holds a whole line")
            fuzzCheck(!isSnapshot || outcome.tornBytes == 0, "a snapshot with a torn tail was accepted")
        case .failure(let failure):
            fuzzCheck(failure.line >= 1, "failure on line \(failure.line)")
            fuzzCheck(failure.offset >= 0 && failure.offset <= bytes.count, "failure at offset \(failure.offset) of \(bytes.count)")
            fuzzCheck(failure.offset == 0 || failure.offset == bytes.count || bytes[failure.offset - 1] == newline,
                "failure offset \(failure.offset) is not the start of a line")
            fuzzCheck(!failure.reason.isEmpty, "a failure without a reason")
        }
    }
}
