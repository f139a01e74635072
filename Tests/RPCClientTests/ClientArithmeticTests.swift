import Testing
import RPCSchema
@testable import RPCClient

/// Durations and backoff with numbers at their extremes (issue 10, item 1): no trap, sane values.
@Suite struct ClientArithmeticTests {
    @Test func backoffStaysWithinZeroAndMaxDelayWhateverThePolicy() {
        let policies = [
            ReconnectPolicy(maxAttempts: 100, initialDelay: .seconds(1), maxDelay: .seconds(Int64.max), multiplier: 10),
            ReconnectPolicy(maxAttempts: 100, initialDelay: .seconds(Int64.max), maxDelay: .seconds(Int64.max), multiplier: 2),
            ReconnectPolicy(initialDelay: .seconds(1), maxDelay: .seconds(1e12), multiplier: .nan),
            ReconnectPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), multiplier: .infinity),
            ReconnectPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), multiplier: -3),
            ReconnectPolicy(initialDelay: .seconds(-5), maxDelay: .seconds(60), multiplier: 2),
            ReconnectPolicy(),
        ]
        for policy in policies {
            for attempt in [0, 1, 2, 3, 10, 30, 60, 1000, Int.max] {
                let delay = policy.delay(beforeAttempt: attempt)
                #expect(delay >= .zero && delay <= max(policy.maxDelay, .zero), "\(policy) attempt \(attempt): \(delay)")
            }
        }
        // The usual case is unchanged: 100 ms, doubling, capped at 5 s.
        let usual = ReconnectPolicy()
        #expect(usual.delay(beforeAttempt: 1) == .milliseconds(100) && usual.delay(beforeAttempt: 2) == .milliseconds(200))
        #expect(usual.delay(beforeAttempt: 20) == .seconds(5))
    }

    @Test func durationsAtTheirExtremesPrintAndConvert() {
        for duration in [Duration.seconds(Int64.max), .seconds(Int64.min), .seconds(1e300 / 1e290), .zero, .milliseconds(1500)] {
            _ = RPCClientError.timedOut(method: GetUser.method, id: "1", after: duration).description
            #expect(duration.nanoseconds >= 0)
        }
        #expect(Duration.seconds(Int64.max).nanoseconds == .max && Duration.seconds(-5).nanoseconds == 0)
        #expect(Duration.seconds(30).secondsText == "30" && Duration.milliseconds(1500).secondsText == "1.5")
    }
}
