import Foundation
import RPCTransport

/// The replication settings of `rpcd serve`, the same for the config file and the flags:
///
/// | key / flag | value |
/// |---|---|
/// | `min_sync_replicas` / `--min-sync-replicas` | followers that must journal a mutation before its client is told (0: asynchronous) |
/// | `sync_timeout` / `--sync-timeout` | seconds a mutation waits for them before `replicationTimeout` (default 5) |
/// | `coordinator` / `--coordinator` | `etcd:HOST:PORT[,HOST:PORT…]`: elect the leader through etcd |
/// | `cluster` / `--cluster` | the members' name in etcd (default `rpcd`) |
/// | `advertise` / `--advertise` | `[tls:]HOST:PORT` the others reach this member at, over TLS with `tls:` (default: the first listen address) |
/// | `leader_ttl` / `--leader-ttl` | seconds of a member's etcd lease (default 5) |
/// | `max_failover_lag` / `--max-failover-lag` | records a follower may lag and still be elected (default 10000) |
enum ReplicationSettings {
    static let keys = ["min_sync_replicas", "sync_timeout", "coordinator", "cluster", "advertise", "leader_ttl", "max_failover_lag"]

    /// Flags, by the key they set.
    static let flags = [
        "--min-sync-replicas": "min_sync_replicas", "--sync-timeout": "sync_timeout", "--coordinator": "coordinator",
        "--cluster": "cluster", "--advertise": "advertise", "--leader-ttl": "leader_ttl", "--max-failover-lag": "max_failover_lag",
    ]

    /// Sets `key` from `value`; nil, or why the value is refused.
    static func apply(_ key: String, _ value: String, to options: inout ServeOptions) -> ConfigValue.Problem? {
        switch key {
        case "min_sync_replicas":
            switch ConfigValue.count(value, in: SettingRanges.minSyncReplicas, zero: "asynchronous") {
            case .success(let count): options.minSyncReplicas = count
            case .failure(let problem): return problem
            }
        case "sync_timeout":
            switch ConfigValue.seconds(value, in: SettingRanges.syncTimeout, zero: nil) {
            case .success(let seconds): options.syncTimeout = seconds
            case .failure(let problem): return problem
            }
        case "coordinator":
            guard value.isEmpty || value == "none" || EtcdClient.parse(value) != nil else {
                return ConfigValue.Problem("is not etcd:HOST:PORT[,HOST:PORT...]; e.g. etcd:127.0.0.1:2379 (or none)")
            }
            options.coordinator = value.isEmpty || value == "none" ? nil : value
        case "cluster":
            guard isClusterName(value) else {
                return ConfigValue.Problem("is not a cluster name: 1 to 64 letters, digits, '.', '_' or '-'")
            }
            options.cluster = value
        case "advertise":
            if value.isEmpty {
                options.advertise = nil
                return nil
            }
            guard let address = TLSSettings.parseListen(value)?.address, address.family != AF_UNIX, address.port != 0, !address.isWildcard else {
                return ConfigValue.Problem("is not a [tls:]HOST:PORT others can reach (no port 0, no 0.0.0.0 or ::); e.g. 10.0.0.5:7878, or tls:10.0.0.5:7879 for TLS")
            }
            options.advertise = value
        case "leader_ttl":
            switch ConfigValue.seconds(value, in: SettingRanges.leaderTTL, zero: nil) {
            case .success(let seconds): options.leaderTTL = seconds
            case .failure(let problem): return problem
            }
        case "max_failover_lag":
            switch ConfigValue.count(value, in: SettingRanges.maxFailoverLag, zero: "only the most advanced") {
            case .success(let count): options.maxFailoverLag = count
            case .failure(let problem): return problem
            }
        default:
            return ConfigValue.Problem("is not a replication setting")
        }
        return nil
    }

    static func isClusterName(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count)
            && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2E || $0 == 0x5F || $0 == 0x2D }
    }

    /// Copies `key` from `flags` over `options` (the flag wins); false if `key` is not one of these.
    static func merge(_ key: String, from flags: ServeOptions, into options: inout ServeOptions) -> Bool {
        switch key {
        case "min_sync_replicas": options.minSyncReplicas = flags.minSyncReplicas
        case "sync_timeout": options.syncTimeout = flags.syncTimeout
        case "coordinator": options.coordinator = flags.coordinator
        case "cluster": options.cluster = flags.cluster
        case "advertise": options.advertise = flags.advertise
        case "leader_ttl": options.leaderTTL = flags.leaderTTL
        case "max_failover_lag": options.maxFailoverLag = flags.maxFailoverLag
        default: return false
        }
        return true
    }

    /// The lines of `check-config`'s rendering.
    static func render(_ options: ServeOptions) -> [String] {
        [
            "min_sync_replicas = \(options.minSyncReplicas)", "sync_timeout = \(ConfigValue.render(seconds: options.syncTimeout))",
            "coordinator = \(options.coordinator ?? "")", "cluster = \(options.cluster)", "advertise = \(options.advertise ?? "")",
            "leader_ttl = \(ConfigValue.render(seconds: options.leaderTTL))", "max_failover_lag = \(options.maxFailoverLag)",
        ]
    }
}
