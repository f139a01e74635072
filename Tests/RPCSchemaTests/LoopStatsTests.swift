import Foundation
import Testing
import RPCSchema

/// `system.stats` `loops` entries from this daemon carry `pollingSeconds`; one from a daemon
/// before `busy_poll` has none and still decodes (with 0), so a new client can read an old daemon.
@Suite struct LoopStatsTests {
    @Test func pollingSecondsRoundTripsAndDefaultsToZeroWhenAbsent() throws {
        let stats = LoopStats(servingSeconds: 1.5, lingeringSeconds: 0.25, pollingSeconds: 0.125, turns: 7)
        let encoded = try JSONEncoder().encode(stats)
        #expect(String(decoding: encoded, as: UTF8.self).contains(#""pollingSeconds":0.125"#))
        #expect(try JSONDecoder().decode(LoopStats.self, from: encoded) == stats)
        let old = Data(#"{"servingSeconds":1.5,"lingeringSeconds":0.25,"turns":7}"#.utf8)
        #expect(try JSONDecoder().decode(LoopStats.self, from: old) == LoopStats(servingSeconds: 1.5, lingeringSeconds: 0.25, turns: 7))
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(LoopStats.self, from: Data(#"{"servingSeconds":1.5,"turns":7}"#.utf8)) }
    }
}
