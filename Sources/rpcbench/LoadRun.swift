import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What one timed load against one server measured.
struct Measurement {
    /// rpcd, redis or floor.
    var target: String
    var rps = 0
    var p50 = 0
    var p99 = 0
    var p999 = 0
    /// Replies saying the request failed (rpcd's `error.error`, anything but Redis's `+OK`), plus
    /// requests lost with a connection.
    var errorReplies = 0
    /// Replies that are not the reply to their request.
    var mismatches = 0
    var firstError: String?
    /// Seconds from the first request to the end of the drain.
    var elapsed = 0.0
    /// CPU seconds of rpcbench's load threads (an in-process server's thread not counted).
    var benchCPU = 0.0
    /// CPU seconds of the server, if known.
    var serverCPU: Double?

    var errors: Int { errorReplies + mismatches }
}

/// The server a load runs against.
struct LoadTarget {
    var name: String
    var host = "127.0.0.1"
    var port: Int
    /// CPU seconds the server used so far, if known.
    var cpuSeconds: () -> Double? = { nil }
    /// Whether that CPU is rpcbench's own (the floor is a thread of rpcbench): taken out of bench CPU.
    var inProcess = false
    /// With `--tls`, the port the load uses instead of `port` (which setup and stats use).
    var tlsPort: Int?
    var tls: Bool { tlsPort != nil }
}

/// Hands a non-Sendable value to one other thread that alone uses it until `group.wait()`.
final class UncheckedBox<T>: @unchecked Sendable {
    // @unchecked: the value is used by exactly one thread at a time (handed over, then joined).
    let value: T
    init(_ value: T) { self.value = value }
}

/// Opens `options.conns` connections to `target`, drives them with `load` on `options.threads` load
/// threads at `options.depth` requests in flight each, for `options.warmup` then `options.duration`
/// measured seconds, and closes them.
func measure<Load: LoadProtocol>(_ load: Load, against target: LoadTarget, options: Options) throws -> Measurement {
    var connections: [LoadConnection] = []
    defer { for connection in connections { close(connection.fd) } }
    for index in 0..<options.conns {
        let connection = LoadConnection(fd: try openConnection(host: target.host, port: target.tlsPort ?? target.port), index: index)
        if target.tls { connection.tls = try BenchTLS.shared.handshake(connection.fd) }
        connections.append(connection)
    }

    let start = nowNanoseconds()
    let measureFrom = start + UInt64(options.warmup * 1e9)
    let stopAt = measureFrom + UInt64(options.duration * 1e9)
    let threadCount = max(1, min(options.threads, options.conns))
    let threads = (0..<threadCount).map { t in
        LoadThread(
            connections: connections.enumerated().filter { $0.offset % threadCount == t }.map(\.element),
            load: load, depth: options.depth, measureFrom: measureFrom, stopAt: stopAt,
            rate: options.rate.map { $0 / Double(threadCount) })
    }

    let benchCPUBefore = processCPUSeconds()
    let serverCPUBefore = target.cpuSeconds()
    let group = DispatchGroup()
    for thread in threads.dropFirst() {
        let box = UncheckedBox(thread)
        group.enter()
        Thread.detachNewThread {
            box.value.run()
            group.leave()
        }
    }
    threads[0].run()
    group.wait()
    let serverCPU = target.cpuSeconds().flatMap { after in serverCPUBefore.map { after - $0 } }
    var benchCPU = processCPUSeconds() - benchCPUBefore
    if target.inProcess, let serverCPU { benchCPU -= serverCPU }

    var histogram = Histogram()
    var completed = 0
    var measurement = Measurement(target: target.name)
    for thread in threads {
        histogram.merge(thread.result.histogram)
        completed += thread.result.completed
        measurement.errorReplies += thread.result.errors
        measurement.mismatches += thread.result.mismatches
        measurement.firstError = measurement.firstError ?? thread.result.firstError
    }
    measurement.rps = Int(Double(completed) / options.duration)
    measurement.p50 = histogram.percentile(0.5)
    measurement.p99 = histogram.percentile(0.99)
    measurement.p999 = histogram.percentile(0.999)
    measurement.elapsed = Double(nowNanoseconds() - start) / 1e9
    measurement.benchCPU = benchCPU
    measurement.serverCPU = serverCPU
    return measurement
}

/// User + system CPU seconds of this process so far.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

extension Measurement {
    /// The lines every row prints after its own heading: rate, latency, errors, CPU.
    func printFigures(errorsLine: String, serverLabel: String, serverNote: String = "") {
        func percent(_ cpu: Double) -> String { String(format: "%.0f", cpu / elapsed * 100) }
        print("requests/s  \(rps)")
        print("latency µs  p50 \(p50)  p99 \(p99)  p99.9 \(p999)")
        print("errors      \(errorsLine)")
        print("bench CPU   \(percent(benchCPU))% of one core (\(String(format: "%.2f", benchCPU)) s over \(String(format: "%.2f", elapsed)) s)")
        if let serverCPU {
            print("\(serverLabel.padding(toLength: 11, withPad: " ", startingAt: 0)) \(percent(serverCPU))% of one core\(serverNote)")
        }
        if let firstError { print("first error \(firstError)") }
    }

    /// `RESULT …` with the figures; `prefix` names the target and workload.
    func printResult(_ prefix: String, options: Options) {
        print("RESULT \(prefix) conns=\(options.conns) depth=\(options.depth) rps=\(rps) p50_us=\(p50) p99_us=\(p99) p999_us=\(p999) errors=\(errors)")
    }
}
