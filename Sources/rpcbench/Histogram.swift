/// Latencies in microseconds: exact up to 10 ms, then 100 µs buckets up to 10 s.
struct Histogram {
    private var fine = [Int](repeating: 0, count: 10_000)
    private var coarse = [Int](repeating: 0, count: 100_000)
    private(set) var count = 0

    mutating func record(_ microseconds: Int) {
        count += 1
        if microseconds < fine.count {
            fine[max(0, microseconds)] += 1
        } else {
            coarse[min(coarse.count - 1, microseconds / 100)] += 1
        }
    }

    mutating func merge(_ other: Histogram) {
        for i in fine.indices { fine[i] += other.fine[i] }
        for i in coarse.indices { coarse[i] += other.coarse[i] }
        count += other.count
    }

    /// The latency at quantile `q` (0...1), in µs.
    func percentile(_ q: Double) -> Int {
        guard count > 0 else { return 0 }
        let rank = max(1, Int((Double(count) * q).rounded(.up)))
        var seen = 0
        for (value, n) in fine.enumerated() where n > 0 {
            seen += n
            if seen >= rank { return value }
        }
        for (bucket, n) in coarse.enumerated() where n > 0 {
            seen += n
            if seen >= rank { return bucket * 100 }
        }
        return coarse.count * 100
    }
}
