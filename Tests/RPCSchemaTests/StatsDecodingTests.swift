import Foundation
import Testing
import RPCSchema

/// `system.stats` `loops` entries from this daemon carry `pollingSeconds`, and its `journal` the
/// group commit's counts; a reply from an older daemon has neither and still decodes (with 0), so a
/// new client can read an old daemon.
@Suite struct StatsDecodingTests {
    @Test func pollingSecondsRoundTripsAndDefaultsToZeroWhenAbsent() throws {
        let stats = LoopStats(servingSeconds: 1.5, lingeringSeconds: 0.25, pollingSeconds: 0.125, turns: 7)
        let encoded = try JSONEncoder().encode(stats)
        #expect(String(decoding: encoded, as: UTF8.self).contains(#""pollingSeconds":0.125"#))
        #expect(try JSONDecoder().decode(LoopStats.self, from: encoded) == stats)
        let old = Data(#"{"servingSeconds":1.5,"lingeringSeconds":0.25,"turns":7}"#.utf8)
        #expect(try JSONDecoder().decode(LoopStats.self, from: old) == LoopStats(servingSeconds: 1.5, lingeringSeconds: 0.25, turns: 7))
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(LoopStats.self, from: Data(#"{"servingSeconds":1.5,"turns":7}"#.utf8)) }
    }

    @Test func journalCountsRoundTripAndDefaultToZeroWhenAbsent() throws {
        let stats = JournalStats(bytes: 4096, lastFsyncMicroseconds: 300, batches: 3, records: 40, fsyncs: 4)
        let encoded = try JSONEncoder().encode(stats)
        #expect(try JSONDecoder().decode(JournalStats.self, from: encoded) == stats)
        let old = Data(#"{"bytes":4096,"lastFsyncMicroseconds":300}"#.utf8)
        #expect(try JSONDecoder().decode(JournalStats.self, from: old) == JournalStats(bytes: 4096, lastFsyncMicroseconds: 300))
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(JournalStats.self, from: Data(#"{"bytes":4096}"#.utf8)) }
    }
}
