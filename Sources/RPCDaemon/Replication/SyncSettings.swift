/// The synchronous replication settings of `rpcd serve`, the same for the config file and the flags:
///
/// | key / flag | value |
/// |---|---|
/// | `min_sync_replicas` / `--min-sync-replicas` | followers that must journal a mutation before its client is told (0: asynchronous) |
/// | `sync_timeout` / `--sync-timeout` | seconds a mutation waits for them before `replicationTimeout` (default 5) |
enum SyncSettings {
    static let keys = ["min_sync_replicas", "sync_timeout"]

    /// Flags, by the key they set.
    static let flags = ["--min-sync-replicas": "min_sync_replicas", "--sync-timeout": "sync_timeout"]

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
        default:
            return ConfigValue.Problem("is not a replication setting")
        }
        return nil
    }

    /// Copies `key` from `flags` over `options` (the flag wins); false if `key` is not one of these.
    static func merge(_ key: String, from flags: ServeOptions, into options: inout ServeOptions) -> Bool {
        switch key {
        case "min_sync_replicas": options.minSyncReplicas = flags.minSyncReplicas
        case "sync_timeout": options.syncTimeout = flags.syncTimeout
        default: return false
        }
        return true
    }

    /// The lines of `check-config`'s rendering.
    static func render(_ options: ServeOptions) -> [String] {
        ["min_sync_replicas = \(options.minSyncReplicas)", "sync_timeout = \(ConfigValue.render(seconds: options.syncTimeout))"]
    }
}
