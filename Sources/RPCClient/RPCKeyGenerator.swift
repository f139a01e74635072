/// Makes the idempotency key of each mutation (`RPCClientOptions.keyGenerator`).
///
/// A key must be unique per mutation meant to be applied once, across every client of a daemon and
/// across their restarts, for as long as the daemon remembers keys (a day by default), and 1 to
/// `Request.maxKeyBytes` UTF-8 bytes long. The daemon applies a keyed mutation once and answers a
/// repeat of it (same key, method and param) with the first outcome; the same key with another
/// method or param is refused with `keyReused`.
public struct RPCKeyGenerator: Sendable {
    public var next: @Sendable () -> String

    public init(next: @escaping @Sendable () -> String) { self.next = next }

    /// `<24 random hex digits>.<counter>`: 96 random bits drawn once per generator, then 1, 2, 3 …
    /// Unique across clients and restarts (a restarted program draws a new prefix) at the cost of
    /// one counter increment per key.
    public static func random() -> RPCKeyGenerator {
        var rng = SystemRandomNumberGenerator()
        let high = UInt64.random(in: .min ... .max, using: &rng)
        let low = UInt32.random(in: .min ... .max, using: &rng)
        let prefix = hex(high, digits: 16) + hex(UInt64(low), digits: 8) + "."
        let counter = Counter(1)
        return RPCKeyGenerator { prefix + String(counter.take()) }
    }

    private static func hex(_ value: UInt64, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: digits - text.count) + text
    }
}
