import Dispatch
import Foundation
import Testing
import RPCSchema
@testable import RPCEntities

/// `Records` against a model dictionary while copies of it are taken, kept, read and drained as
/// compaction does, with changes in between and during the drain: every copy must keep reading
/// what it held when taken (the live value changes a shared shard through its overlay only), and
/// the live value must read every change.
@Suite struct RecordsTests {
    typealias Random = SortedIDsTests.Random

    static func id(_ n: Int) -> String { n % 3 == 0 ? "u\(n)" : "user-with-a-longer-id-\(n)" }

    /// One random change to `records` and the same change to `model`.
    static func change(_ records: inout Records<String>, _ model: inout [String: String], _ random: inout Random, step: Int) {
        let id = Self.id(random.below(600))
        // Up to 300 bytes: lengths of one and two LEB128 bytes, and shards whose arenas fill with
        // replaced records until they are packed.
        let value = "v\(step)-\(String(repeating: "x", count: random.below(300)))"
        switch random.below(10) {
        case 0...3:
            let added = records.insertNew(value, id: id)
            #expect(added == (model[id] == nil), "insertNew \(id)")
            if model[id] == nil { model[id] = value }
        case 4...5:
            records.insert(value, id: id)
            model[id] = value
        case 6...8:
            let removed = records.remove(id)
            #expect(removed == model[id], "remove \(id)")
            model[id] = nil
        default:
            if random.below(20) == 0 {
                records.updateAll { $0 += "+"; return true }
                for key in model.keys { model[key]! += "+" }
            } else {
                #expect(records[id] == model[id], "read \(id)")
            }
        }
    }

    static func expectEqual(_ records: Records<String>, _ model: [String: String], _ note: String) {
        #expect(records.count == model.count, "\(note): count")
        let values = records.values.sorted(), want = model.values.sorted()
        if values != want {
            let missing = want.filter { !values.contains($0) }.prefix(3), extra = values.filter { !want.contains($0) }.prefix(3)
            Issue.record("\(note): values differ: missing \(Array(missing)), extra \(Array(extra))")
        }
        for n in 0..<600 where records[id(n)] != model[id(n)] {
            Issue.record("\(note): \(id(n)) reads \(records[id(n)] ?? "nothing"), want \(model[id(n)] ?? "nothing")")
            return
        }
        let ids = model.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        let page = records.page(after: ids.dropFirst(3).first, limit: 50)
        let wantPage = ids.dropFirst(4).prefix(50).map { model[$0]! }
        #expect(page.records == wantPage, "\(note): page")
    }

    @Test func copiesKeepWhatTheyHeldWhileTheLiveValueChanges() {
        var random = Random(state: 42)
        var live = Records<String>()
        var model: [String: String] = [:]
        var copies: [(records: Records<String>, model: [String: String])] = []
        for step in 0..<6_000 {
            Self.change(&live, &model, &random, step: step)
            switch random.below(200) {
            case 0 where copies.count < 3:
                copies.append((live, model))
            case 1 where !copies.isEmpty:
                // Drain a copy as a snapshot does, changing the live value between its shards.
                var (copy, held) = copies.removeFirst()
                var drained: [String] = []
                copy.drain { record in
                    drained.append(record)
                    if random.below(8) == 0 { Self.change(&live, &model, &random, step: step) }
                }
                #expect(drained.sorted() == held.values.sorted(), "step \(step): the drained copy (\(drained.count) records, want \(held.count))")
                #expect(copy.count == 0 && copy.values.first(where: { _ in true }) == nil, "step \(step): drained copy is empty")
            case 2 where !copies.isEmpty:
                let (copy, held) = copies[random.below(copies.count)]
                Self.expectEqual(copy, held, "step \(step): a kept copy")
            case 3:
                Self.expectEqual(live, model, "step \(step): live")
            default:
                break
            }
        }
        Self.expectEqual(live, model, "the end: live")
        for (copy, held) in copies { Self.expectEqual(copy, held, "the end: a kept copy") }
    }

    /// Thousands of ids per shard, most removed again (a removal moves the shard's last record into
    /// the gap and renumbers it), some re-created and changed: every id reads what the model holds,
    /// and lists stay in order.
    @Test func manyIdsCreatedRemovedAndChanged() {
        var random = Random(state: 99)
        var records = Records<String>()
        var model: [String: String] = [:]
        for n in 0..<60_000 { _ = records.insertNew("v\(n)", id: "id-\(n)") }
        for n in 0..<60_000 { model["id-\(n)"] = "v\(n)" }
        for step in 0..<120_000 {
            let id = "id-\(random.below(80_000))"
            switch random.below(4) {
            case 0, 1:
                #expect(records.remove(id) == model.removeValue(forKey: id), "step \(step): remove \(id)")
            case 2:
                #expect(records.insertNew("n\(step)", id: id) == (model[id] == nil), "step \(step): insertNew \(id)")
                if model[id] == nil { model[id] = "n\(step)" }
            default:
                records.insert("c\(step)", id: id)
                model[id] = "c\(step)"
            }
        }
        #expect(records.count == model.count)
        for n in 0..<80_000 where records["id-\(n)"] != model["id-\(n)"] {
            Issue.record("id-\(n) reads \(records["id-\(n)"] ?? "nothing"), want \(model["id-\(n)"] ?? "nothing")")
            break
        }
        #expect(records.values.sorted() == model.values.sorted())
        let ids = model.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        #expect(records.page(after: ids[100], limit: 500).records == ids[101..<601].map { model[$0]! })
    }

    /// Users are read back from their shards' arenas: a drained copy gives every user once,
    /// whatever the shard sizes (a few records, many).
    @Test(arguments: [3, 500, 20_000])
    func aDrainedCopyOfUsersGivesEveryUserOnce(count: Int) {
        var users = Records<User>()
        for n in 0..<count { _ = users.insertNew(User(id: "user-\(n)-with-an-id-on-the-heap", name: "N\(n)", email: "n\(n)@example.com"), id: "user-\(n)-with-an-id-on-the-heap") }
        var copy = users
        var drained: [String] = []
        copy.drain { drained.append($0.id + " " + $0.email) }
        #expect(drained.sorted() == (0..<count).map { "user-\($0)-with-an-id-on-the-heap n\($0)@example.com" }.sorted())
        #expect(users.count == count && users["user-0-with-an-id-on-the-heap"]?.name == "N0")
    }

    /// A record is its bytes: fields of any length and any text come back as they went in (a
    /// building's residents too), ids that are canonically equal but not byte-equal stay two, and
    /// an update that changes nothing (`updateAll` returning false) leaves the record as it was.
    @Test func recordsComeBackByteForByte() {
        var buildings = Records<Building>()
        let long = String(repeating: "\u{E9}t\u{E9} ", count: 5_000)
        let ids = ["caf\u{E9}", "cafe\u{301}", "", "b-\(long.prefix(40))"]
        for (n, id) in ids.enumerated() {
            let added = buildings.insertNew(Building(id: id, name: n == 0 ? long : "N\(n)", address: "\u{1F3E0} \(n)", residents: (0..<n * 100).map { "r\($0)" }), id: id)
            #expect(added)
        }
        #expect(buildings.count == 4)
        for (n, id) in ids.enumerated() {
            let building = buildings[id]
            #expect(building == Building(id: id, name: n == 0 ? long : "N\(n)", address: "\u{1F3E0} \(n)", residents: (0..<n * 100).map { "r\($0)" }))
        }
        buildings.updateAll { building in
            guard building.residents.contains("r150") else { return false }
            building.residents.removeAll { $0 == "r150" }
            return true
        }
        #expect(buildings[ids[3]]?.residents.count == 299 && buildings[ids[2]]?.residents.count == 199)
        let removed = buildings.remove(ids[1])
        #expect(buildings[ids[0]]?.name == long && removed?.residents.count == 100)
        #expect(buildings[ids[1]] == nil && buildings[ids[0]] != nil && buildings.count == 3)
    }

    /// A snapshot reads users as their stored bytes: each user once, and where a change waits in
    /// an overlay (a copy taken while an older one still read the shards), the change instead.
    @Test func aStoredDrainGivesEachUserOnceAndTheChangesWaitingInOverlays() {
        var live = Records<User>()
        for n in 0..<200 { _ = live.insertNew(User(id: "u\(n)", name: "N\(n)", email: "e\(n)@x"), id: "u\(n)") }
        let held = live
        live.insert(User(id: "u1", name: "changed", email: "c@x"), id: "u1")
        _ = live.remove("u2")
        _ = live.insertNew(User(id: "new", name: "fresh", email: "f@x"), id: "new")
        var copy = live
        var seen: [String: String] = [:]
        var count = 0
        copy.drainStored({ id, fields in
            let user = User(id: String(decoding: id, as: UTF8.self), from: &fields)
            seen[user.id] = user.name
            count += 1
        }, value: { user in
            seen[user.id] = user.name
            count += 1
        })
        #expect(count == 200 && seen.count == 200 && seen["u1"] == "changed" && seen["u2"] == nil && seen["new"] == "fresh" && seen["u7"] == "N7")
        #expect(held.count == 200 && held["u2"]?.name == "N2" && live["u1"]?.name == "changed")
    }

    /// While a copy reads the shards, changes wait in overlays; once it is gone, the next change to
    /// each shard folds its overlay in (so a shard is never copied whole on a loop).
    @Test func overlaysFoldOnceNoCopyReadsTheShard() {
        var live = Records<String>()
        for n in 0..<1_000 { _ = live.insertNew("a\(n)", id: "id\(n)") }
        #expect(live.overlaid == 0)
        var copy: Records<String>? = live
        for n in 1_000..<1_500 { _ = live.insertNew("a\(n)", id: "id\(n)") }
        live.remove("id3")
        live.insert("changed", id: "id4")
        #expect(live.overlaid == 502, "changes to shared shards wait in overlays")
        #expect(copy?.count == 1_000 && copy?["id3"] == "a3" && copy?["id4"] == "a4" && copy?["id1200"] == nil)
        #expect(live["id3"] == nil && live["id4"] == "changed" && live["id1200"] == "a1200" && live.count == 1_499)
        copy = nil
        // Enough new ids to touch all 64 shards (a shard missed by 5,000 random ids: p < 1e-30).
        for n in 2_000..<7_000 { _ = live.insertNew("a\(n)", id: "id\(n)") }
        #expect(live.overlaid == 0, "each shard folded its overlay at its first change")
        #expect(live["id3"] == nil && live["id4"] == "changed" && live["id1200"] == "a1200" && live.count == 6_499)
        _ = copy
    }

    /// As a compaction does it: a copy taken under a lock is drained on one thread while another
    /// changes the live value under that lock. The copy writes what it held; the live value has
    /// every change; `Tests/tsan.sh --filter RecordsTests` checks the hand-over of each shard.
    @Test func aCopyDrainedOnAnotherThreadWhileTheLiveValueChanges() async {
        final class Live: @unchecked Sendable {
            // @unchecked: `records` is touched only under `lock`.
            let lock = NSLock()
            var records = Records<String>()
        }
        let live = Live()
        for n in 0..<20_000 { _ = live.records.insertNew("v\(n)", id: "id\(n)") }
        var copy = live.lock.withLock { live.records }
        let changes = Task.detached {
            for n in 20_000..<30_000 {
                live.lock.withLock {
                    _ = live.records.insertNew("v\(n)", id: "id\(n)")
                    live.records.remove("id\(n - 20_000)")
                    live.records.insert("w\(n)", id: "id\(n - 10_000)")
                }
                if n % 500 == 0 { await Task.yield() }
            }
        }
        var drained: [String] = []
        copy.drain { record in
            drained.append(record)
            if drained.count % 1_000 == 0 { usleep(200) }
        }
        await changes.value
        #expect(drained.sorted() == (0..<20_000).map { "v\($0)" }.sorted(), "the copy wrote what it held when taken")
        let records = live.lock.withLock { live.records }
        var want: [String: String] = [:]
        for n in 10_000..<20_000 { want["id\(n)"] = "w\(n + 10_000)" }
        for n in 20_000..<30_000 { want["id\(n)"] = "v\(n)" }
        Self.expectEqual(records, want, "the live value after the changes")
    }
}
