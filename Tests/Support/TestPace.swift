import Foundation

/// How much slower than a normal build the binaries under test run: `RPCD_TEST_SLOWDOWN` (a whole
/// number, 1 to 20; `Tests/tsan.sh` sets 4), 1 when unset or out of range. Only waits for a
/// daemon to start and whole-test time limits scale with it: a sanitizer-built daemon under the
/// full suite on two cores took over 20 s to replay 20,000 keyed records (~3 s alone), which is
/// slowness, not a race, and what the sanitizer pass is for is races.
public enum TestPace {
    public static let slowdown: Int = {
        guard let text = ProcessInfo.processInfo.environment["RPCD_TEST_SLOWDOWN"], let value = Int(text), (1...20).contains(value) else {
            return 1
        }
        return value
    }()

    /// `seconds`, scaled.
    public static func seconds(_ seconds: Double) -> Double { seconds * Double(slowdown) }
}
