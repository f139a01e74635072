import Dispatch
import Foundation
import RPCSchema
import RPCTransport

/// Tells systemd how the daemon is doing (`READY=1`, `STATUS=`, `STOPPING=1`) and feeds its
/// watchdog. Every message is a no-op when `$NOTIFY_SOCKET` is unset.
///
/// The heartbeat visits every event loop queue (through `Server.collectStats`) before it sends
/// `WATCHDOG=1`: a wedged loop never answers, the pings stop, and systemd restarts the daemon.
final class ServiceManager: @unchecked Sendable {
    // @unchecked: `timer` and `probeInFlight` are touched only on `queue`.
    private let notifier: SystemdNotifier?
    /// Seconds of `$WATCHDOG_USEC`; pings go at half of it.
    let watchdog: Double?
    private let log: Logger
    private let queue = DispatchQueue(label: "rpcd.systemd")
    private var timer: (any DispatchSourceTimer)?
    private var probeInFlight = false

    init(environment: [String: String], log: Logger) {
        notifier = SystemdNotifier(environment: environment)
        watchdog = notifier == nil ? nil : SystemdNotifier.watchdogInterval(environment: environment)
        self.log = log
    }

    func status(_ text: String) { send("STATUS=\(text)") }
    func ready(_ text: String) { send("READY=1\nSTATUS=\(text)") }
    func stopping() {
        queue.async { [self] in
            timer?.cancel()
            timer = nil
        }
        send("STOPPING=1\nSTATUS=stopping: answering what was received, then exiting")
    }

    /// Every half watchdog period (or every 10 s for STATUS alone): visit the loops, then send
    /// `WATCHDOG=1` (if asked for) and a short `STATUS=` with the figures of `system.stats`.
    func startHeartbeat(_ server: Server) {
        guard notifier != nil else { return }
        // At most once an hour: pinging more often than asked is harmless, while a repeat interval
        // past Int64 nanoseconds (WATCHDOG_USEC near UInt64.max) traps in Dispatch.
        let period = watchdog.map { min(3600, max(0.01, $0 / 2)) } ?? 10
        queue.async { [self] in
            let timer = DispatchSource.makeTimerSource(queue: queue)
            timer.schedule(deadline: .now() + period, repeating: period, leeway: .milliseconds(Int(period * 50)))
            timer.setEventHandler { [unowned self] in self.beat(server) }
            self.timer = timer
            timer.resume()
        }
        if let watchdog {
            log.info("systemd watchdog every \(ConfigValue.render(seconds: watchdog)) s; pinging every \(ConfigValue.render(seconds: period)) s")
        }
    }

    private func beat(_ server: Server) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !probeInFlight else { return }  // a loop has not answered the last probe: no ping
        probeInFlight = true
        server.collectStats { [self] stats in
            let ping = watchdog == nil ? "" : "WATCHDOG=1\n"
            send(ping + "STATUS=" + Self.summary(stats))
            queue.async { self.probeInFlight = false }
        }
    }

    static func summary(_ stats: StatsResult) -> String {
        "serving\(role(stats.replication)): \(stats.connections.current) connections (\(stats.connections.total) total), "
            + "\(stats.requests) requests, \(stats.errors) errors, up \(Int(stats.uptimeSeconds)) s"
    }

    /// ` as leader, seq N, term T, 2 subscribers (max lag 3)` or ` reads as follower of HOST:PORT, seq N, lag M, term T`.
    static func role(_ replication: ReplicationStats?) -> String {
        guard let replication else { return "" }
        let subscribers = replication.subscribers.isEmpty
            ? ""
            : ", \(replication.subscribers.count) subscriber\(replication.subscribers.count == 1 ? "" : "s") (max lag \(replication.subscribers.map(\.lagRecords).max() ?? 0))"
        var term = replication.term.map { ", term \($0)" } ?? ""
        if let required = replication.minSyncReplicas { term += ", \(replication.inSyncReplicas ?? 0) in sync (\(required) needed)" }
        let coordinator = replication.coordinator.map { "; etcd: \(oneLine($0, max: 120))" } ?? ""
        if replication.role == "candidate" { return " reads as candidate, seq \(replication.sequence)\(term)\(coordinator)" }
        guard replication.role == "follower", let leader = replication.leader else {
            return " as leader, seq \(replication.sequence)\(term)\(subscribers)\(coordinator)"
        }
        let state = replication.connected == true
            ? ""
            : " (\(replication.state ?? "disconnected")\(replication.reason.map { ": \(oneLine($0, max: 120))" } ?? ""))"
        let lag = replication.lagRecords.map { ", lag \($0)" } ?? ""
        let chain = replication.chain.map { "; upstream: \(oneLine($0, max: 160))" } ?? ""
        return " reads as follower of \(leader)\(state), seq \(replication.sequence)\(lag)\(term)\(subscribers)\(chain)\(coordinator)"
    }

    /// A reason fit for the one-line STATUS=: no newlines, at most `max` characters.
    private static func oneLine(_ text: String, max: Int) -> String {
        let flat = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return flat.count <= max ? flat : String(flat.prefix(max - 1)) + "…"
    }

    private func send(_ message: String) {
        guard let notifier, let error = notifier.notify(message) else { return }
        log.warning("cannot notify systemd at \(notifier.path): \(error)")
    }
}
