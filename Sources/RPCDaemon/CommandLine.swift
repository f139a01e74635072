import RPCTransport

/// What `rpcd` was asked to do.
public enum Command: Equatable, Sendable {
    case serve(ServeOptions)
    /// Any other subcommand: its name and its own arguments, parsed by its own file.
    case subcommand(String, [String])
    case version
    case help
}

/// Settings of `rpcd serve`.
public struct ServeOptions: Equatable, Sendable {
    public var listen: [String] = []
    public var dataDir = "./data"
    /// Compact once the journal is this big (and bigger than the last snapshot).
    public var compactAfterBytes = 64 << 20
    public var logLevel: LogLevel = .info
    public var maxFrameBytes = 1 << 20
    public var maxOutputBytes = 8 << 20
    /// Unfinished request lines all peers together may hold; past it the largest holders are dropped.
    public var maxInputBytes = 256 << 20
    /// Keyed mutations whose outcome is remembered for retries, and for how long (seconds).
    public var idempotencyKeys = 1_000_000
    public var idempotencyWindow: Double = 86_400
    public var fsync: FsyncPolicy = .always
    /// Seconds the journal writer waits after an fsync, when mutations are already waiting, for
    /// more to share the next one (`fsync always` only). 0 = none.
    public var groupCommitDelay: Double = 0
    /// Connections served at once; past it a new one gets one `overloaded` error. 0 = no limit.
    public var maxConnections = 10_000
    /// Seconds without a complete request before a connection is closed. 0 = never.
    public var idleTimeout: Double = 300
    /// Seconds a line may take from its first byte to its newline (a peer dribbling bytes is
    /// never idle). 0 = never.
    public var lineTimeout: Double = 30
    /// Seconds a connection that must authenticate has to do so. 0 = never.
    public var authTimeout: Double = 10
    /// Connections waiting to authenticate at once; 0 = automatic (`unauthenticatedCap`).
    public var maxUnauthenticated = 0
    /// Event loops (threads serving connections); 0 = automatic, see `loopCount`.
    public var eventLoops = 0
    /// Seconds a loop that mostly waits for its peers polls for the next request before it
    /// sleeps (`EventLoop.busyPollNanoseconds`). 0 = never.
    public var busyPoll: Double = 0.000_05
    /// The auth file (`auth_file`): peers on TCP authenticate with `system.auth`; nil: none (then
    /// `Config.effective` takes `$CREDENTIALS_DIRECTORY/auth` if it exists).
    public var authFile: String?
    /// Without an auth file, refuse non-loopback peers on a non-loopback listener.
    public var protectedMode = true
    /// Roles for local peers on Unix sockets, by uid (user names resolved when read).
    public var unixRoles: [UnixRole] = []
    /// A follower's `NAME:TOKEN` file for its leader (`follow_auth_file`).
    public var followAuthFile: String?
    /// `HOST:PORT` (or `unix:PATH`) of the leader this daemon follows (`follow`); nil: a leader.
    public var follow: String?
    /// The certificate and key TLS listeners present (`tls_cert_file`, `tls_key_file`).
    public var tlsCertFile: String?
    public var tlsKeyFile: String?
    /// CA certificates that verify client certificates (`tls_ca_file`).
    public var tlsCAFile: String?
    /// Whether TLS listeners ask for client certificates (`tls_client_auth`).
    public var tlsClientAuth: TLSConfiguration.ClientAuthentication = .none
    /// Seconds a TLS peer has to finish its handshake. 0 = never.
    public var tlsHandshakeTimeout: Double = 10
    /// Followers that must journal a mutation before its client is told (`min_sync_replicas`; 0: asynchronous).
    public var minSyncReplicas = 0
    /// Seconds a mutation waits for them before `replicationTimeout` (`sync_timeout`).
    public var syncTimeout: Double = 5
    /// `etcd:HOST:PORT[,HOST:PORT…]`: elect the leader through etcd (`coordinator`; nil: by hand).
    public var coordinator: String?
    /// The members' shared name in the coordinator (`cluster`).
    public var cluster = "rpcd"
    /// `[tls:]HOST:PORT` the other members and clients reach this one at (`advertise`; nil: the first listen address).
    public var advertise: String?
    /// Seconds a member's lease in the coordinator lasts unrenewed (`leader_ttl`).
    public var leaderTTL: Double = 5
    /// With `min_sync_replicas = 0`: records a follower may be behind and still be elected (`max_failover_lag`).
    public var maxFailoverLag = 10_000
    /// `--config FILE`; nil: `$RPCD_CONFIG`, else `/etc/rpcd/rpcd.conf` if it exists (see `Config`).
    public var configPath: String?
    /// Config keys given as flags: they win over the config file.
    public var setByFlags: Set<String> = []

    public static let defaultListen = "127.0.0.1:7878"

    /// How many connections may wait to authenticate at once: always fewer than `maxConnections`,
    /// so authenticated peers keep room; by default three quarters of it (1024 without a limit).
    public var unauthenticatedCap: Int {
        let wanted = maxUnauthenticated > 0 ? maxUnauthenticated : (maxConnections > 0 ? maxConnections - maxConnections / 4 : 1024)
        return maxConnections > 1 ? max(1, min(wanted, maxConnections - 1)) : max(1, wanted)
    }

    public init() {}

    /// The event loops to run on `cores` cores: `eventLoops`, or by default half the cores (at
    /// least one). The other half serves the kernel's network work for the loops' sockets, the
    /// journal writer and clients on the same machine.
    public func loopCount(cores: Int) -> Int {
        eventLoops > 0 ? eventLoops : max(1, cores / 2)
    }
}

/// When the journal fsyncs: before each acknowledgement, about once a second, or never.
public enum FsyncPolicy: String, Sendable, CaseIterable {
    case always, everysec, none
}

/// A usage error: one line, exit status 2.
public struct UsageError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Parses argv (without the program name). Flags take `--flag value` or `--flag=value`.
public enum CommandLineParser {
    public static let version = "0.1.0"

    public static let help = """
        rpcd \(version): a TCP RPC daemon speaking one JSON request per line.

        Usage:
          rpcd serve [options]             run the daemon
          rpcd call [--timeout S] [--auth NAME:TOKEN-FILE] [--key KEY | --key auto] [--ca FILE] [--cert FILE --key-file FILE] [--insecure] ADDRESS METHOD [PARAM-JSON | -]
                                           send one request to HOST:PORT, tls:HOST:PORT or unix:PATH, print its counter-request
                                           (exit 0 result, 1 error.error, 2 usage, connection error or timeout);
                                           --auth authenticates with the token in TOKEN-FILE first
          rpcd check-config FILE           check a settings file (and the auth_file it names); print the effective
                                           settings or FILE:LINE errors
          rpcd auth add NAME ROLE [--file PATH] [--follow-file PATH]
                                           print a fresh token for a new principal once, and append its hashed
                                           line to the auth file (default: auth_file of the config, else /etc/rpcd/auth);
                                           --follow-file (role replicate) also writes NAME:TOKEN to that new file
                                           (mode 0600), for a follower's --follow-auth-file
          rpcd auth check FILE             check an auth file; print its principals or FILE:LINE errors
          rpcd repair [--data-dir DIR] [--force]
                                           cut the damage out of a journal (keeps a backup); intact records
                                           after it, or an intact line out of sequence, need --force
          rpcd journal check [--data-dir DIR]
                                           verify checksums and sequence numbers of snapshot and journals:
                                           print the first problem as FILE:LINE: reason (exit 1) or a summary
          rpcd journal dump [--data-dir DIR] [--from-seq N] [--ndjson]
                                           print the records as request lines to pipe into nc (--ndjson: one
                                           object per record with seq, file, line, id, method, param)
          rpcd --version                   print the version
          rpcd --help                      print this help

        Options of serve:
          --listen HOST:PORT       address to listen on, repeatable (default \(ServeOptions.defaultListen));
                                   port 0 picks a free port; each bound address is logged as "listening on HOST:PORT"
          --data-dir DIR           where state is kept (default ./data; created if missing; one daemon per dir)
          --fsync POLICY           always (default): reply to a mutation once it is fsynced;
                                   everysec: fsync once a second; none: leave flushing to the kernel
          --group-commit-delay S   with --fsync always, how long the journal writer waits after an fsync, when
                                   mutations are already waiting, for more to share the next one: more
                                   throughput under deep pipelines, more latency (default 0;
                                   \(SettingRanges.describe(seconds: SettingRanges.groupCommitDelay, zero: "none")))
          --compact-after-bytes N  compact the journal into a snapshot past this size (default 67108864;
                                   \(SettingRanges.describe(bytes: SettingRanges.compactAfterBytes)))
          --log-level LEVEL        debug, info, warning or error (default info)
          --max-frame-bytes N      longest request line accepted (default 1048576;
                                   \(SettingRanges.describe(bytes: SettingRanges.maxFrameBytes)))
          --max-output-bytes N     replies buffered for a peer that does not read before it is dropped; one
                                   larger reply is answered with replyTooLarge (default 8388608;
                                   \(SettingRanges.describe(bytes: SettingRanges.maxOutputBytes)))
          --max-input-bytes N      unfinished request lines all peers together may hold; past it the
                                   peers holding the most are dropped (default 268435456;
                                   \(SettingRanges.describe(bytes: SettingRanges.maxInputBytes)))
          --idempotency-keys N     outcomes of keyed mutations remembered for retries, oldest forgotten first
                                   (default 1000000; \(SettingRanges.describe(count: SettingRanges.idempotencyKeys, zero: "remember none")))
          --idempotency-window D   how long a key is remembered (default 24h;
                                   \(SettingRanges.describe(seconds: SettingRanges.idempotencyWindow, zero: nil)))
          --max-connections N      connections served at once; more get an `overloaded` error (default 10000;
                                   \(SettingRanges.describe(count: SettingRanges.maxConnections, zero: "no limit")))
          --event-loops N          threads serving connections (default 0: half the cores, at least one;
                                   \(SettingRanges.describe(count: SettingRanges.eventLoops, zero: "half the cores")))
          --busy-poll S            how long an event loop that mostly waits for its peers polls for the next
                                   request before it sleeps: lower latency for one-at-a-time peers, for
                                   that much CPU after each request (default 50us;
                                   \(SettingRanges.describe(seconds: SettingRanges.busyPoll, zero: "never")))
          --idle-timeout SECONDS   close a connection with no I/O and no reply owed for that long (default 300;
                                   \(SettingRanges.describe(seconds: SettingRanges.idleTimeout, zero: "never")))
          --line-timeout SECONDS   close a connection whose line has not ended this long after its first byte
                                   (a peer dribbling bytes is never idle; default 30;
                                   \(SettingRanges.describe(seconds: SettingRanges.idleTimeout, zero: "never")))
          --auth-timeout SECONDS   close a connection that must authenticate and has not within this time
                                   (default 10; \(SettingRanges.describe(seconds: SettingRanges.idleTimeout, zero: "never")))
          --max-unauthenticated N  connections waiting to authenticate at once, always fewer than
                                   max-connections; past it the oldest waiting one is closed (default 0:
                                   three quarters of max-connections; \(SettingRanges.describe(count: SettingRanges.maxConnections, zero: "automatic")))
          --auth-file PATH         principals that authenticate with system.auth, NAME ROLE SECRET-HASH per line
                                   (rpcd auth add writes them); default none, or $CREDENTIALS_DIRECTORY/auth
                                   if it exists (rpcd.service's LoadCredential=auth:rpcd-auth, which systemd
                                   finds in its credential store: /etc/credstore/rpcd-auth -> /etc/rpcd/auth)
          --protected-mode yes|no  yes (default): without an auth file, a listener beyond loopback serves
                                   loopback peers only; no: serve anyone who can reach it
          --unix-roles LIST        roles for local peers on unix: sockets, by uid or user name, no token:
                                   e.g. '0:admin, www-data:read' (default none)
          --follow HOST:PORT       be a follower: mirror the leader at HOST:PORT (tls:HOST:PORT, unix:PATH) and serve reads
                                   only (mutations get readOnly); default none (a leader)
          --follow-auth-file PATH  a follower's NAME:TOKEN file, sent to its leader (default none)
          --tls-cert-file PATH     PEM certificate (chain) that tls: listeners present, and a follower of a
                                   tls: leader presents when asked (default none)
          --tls-key-file PATH      its PEM private key; refused when group or others may read it (default none)
          --tls-ca-file PATH       PEM CA certificates that verify client certificates, and a tls: leader
                                   (default none: a follower then trusts the system store)
          --tls-client-auth MODE   none (default), optional or required: ask tls: peers for a certificate
          --tls-handshake-timeout SECONDS
                                   close a TLS peer that has not finished its handshake in this time
                                   (default 10; \(SettingRanges.describe(seconds: SettingRanges.idleTimeout, zero: "never")))
          --min-sync-replicas N    followers that must journal a mutation before its client is told
                                   (default 0: asynchronous; \(SettingRanges.describe(count: SettingRanges.minSyncReplicas, zero: "asynchronous")))
          --sync-timeout SECONDS   how long a mutation waits for them before replicationTimeout
                                   (default 5; \(SettingRanges.describe(seconds: SettingRanges.syncTimeout, zero: nil)))
          --coordinator etcd:HOST:PORT[,HOST:PORT...]
                                   elect the leader through etcd's v3 JSON gateway, and follow it
                                   (default none: a person promotes a follower)
          --cluster NAME           the members' name in etcd, keys under /rpcd/NAME/ (default rpcd)
          --advertise [tls:]HOST:PORT
                                   where the other members and clients reach this one, over TLS with
                                   tls: (default: the first listen address, as bound)
          --leader-ttl SECONDS     a member's etcd lease; a leader stops taking writes 2/3 of it after
                                   its last renewal (default 5; \(SettingRanges.describe(seconds: SettingRanges.leaderTTL, zero: nil)))
          --max-failover-lag N     with min-sync-replicas 0: records a follower may lag the most advanced
                                   member and still be elected (default 10000; \(SettingRanges.describe(count: SettingRanges.maxFailoverLag, zero: "only the most advanced")))
          --config FILE            settings file (default $RPCD_CONFIG, else /etc/rpcd/rpcd.conf if present); flags win
          Sizes take a KiB, MiB, GiB or TiB suffix, durations us, ms, s, m or h; the config file takes the same
          ranges. A value out of range is a usage error (exit 2).

        Example:
          rpcd serve --listen 127.0.0.1:7878
          echo '{"id":"1","method":"user.listUsers"}' | nc -N 127.0.0.1 7878
        """

    public static func parse(_ arguments: [String]) throws(UsageError) -> Command {
        guard let first = arguments.first else {
            throw UsageError("no command given; run `rpcd serve` to start the daemon, or `rpcd --help`")
        }
        switch first {
        case "--version", "-V", "version": return .version
        case "--help", "-h", "help": return .help
        case "serve":
            if arguments.contains("--help") || arguments.contains("-h") { return .help }
            return .serve(try parseServe(Array(arguments.dropFirst())))
        default:
            if first.hasPrefix("-") { throw UsageError("unknown option '\(first)'; see rpcd --help") }
            guard Subcommands.all[first] != nil else {
                let names = (["serve"] + Subcommands.all.keys.sorted()).joined(separator: ", ")
                throw UsageError("unknown command '\(first)'; commands: \(names) (see rpcd --help)")
            }
            return .subcommand(first, Array(arguments.dropFirst()))
        }
    }

    static func parseServe(_ arguments: [String]) throws(UsageError) -> ServeOptions {
        var options = ServeOptions()
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            var (flag, inline) = (argument, String?.none)
            if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
                flag = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            func value() throws(UsageError) -> String {
                if let inline { return inline }
                guard let next = rest.popFirst() else { throw UsageError("\(flag) needs a value; see rpcd --help") }
                return next
            }
            if let key = Self.configKeys[flag] { options.setByFlags.insert(key) }
            switch flag {
            case "--config": options.configPath = try value()
            case "--max-connections":
                options.maxConnections = try checked(flag, try value()) { ConfigValue.count($0, in: SettingRanges.maxConnections, zero: "no limit") }
            case "--group-commit-delay":
                options.groupCommitDelay = try checked(flag, try value()) {
                    ConfigValue.seconds($0, in: SettingRanges.groupCommitDelay, zero: "none")
                }
            case "--event-loops":
                options.eventLoops = try checked(flag, try value()) { ConfigValue.count($0, in: SettingRanges.eventLoops, zero: "half the cores") }
            case "--busy-poll":
                options.busyPoll = try checked(flag, try value()) { ConfigValue.seconds($0, in: SettingRanges.busyPoll, zero: "never") }
            case "--idle-timeout":
                options.idleTimeout = try checked(flag, try value()) { ConfigValue.seconds($0, in: SettingRanges.idleTimeout, zero: "never") }
            case "--line-timeout":
                options.lineTimeout = try checked(flag, try value()) { ConfigValue.seconds($0, in: SettingRanges.idleTimeout, zero: "never") }
            case "--auth-timeout":
                options.authTimeout = try checked(flag, try value()) { ConfigValue.seconds($0, in: SettingRanges.idleTimeout, zero: "never") }
            case "--max-unauthenticated":
                options.maxUnauthenticated = try checked(flag, try value()) {
                    ConfigValue.count($0, in: SettingRanges.maxConnections, zero: "automatic")
                }
            case "--listen":
                let text = try value()
                guard TLSSettings.parseListen(text) != nil else {
                    throw UsageError("--listen '\(text)' is not an address: use \(TLSSettings.acceptedListenForms)")
                }
                options.listen.append(text)
            case "--data-dir": options.dataDir = try value()
            case "--log-level":
                let text = try value()
                guard let level = LogLevel(name: text) else {
                    throw UsageError("--log-level '\(text)' is not one of debug, info, warning, error")
                }
                options.logLevel = level
            case "--max-frame-bytes":
                options.maxFrameBytes = try checked(flag, try value()) { ConfigValue.bytes($0, in: SettingRanges.maxFrameBytes) }
            case "--max-output-bytes":
                options.maxOutputBytes = try checked(flag, try value()) { ConfigValue.bytes($0, in: SettingRanges.maxOutputBytes) }
            case "--fsync":
                let text = try value()
                guard let policy = FsyncPolicy(rawValue: text) else {
                    throw UsageError("--fsync '\(text)' is not one of always, everysec, none")
                }
                options.fsync = policy
            case "--idempotency-keys":
                options.idempotencyKeys = try checked(flag, try value()) {
                    ConfigValue.count($0, in: SettingRanges.idempotencyKeys, zero: "remember none")
                }
            case "--idempotency-window":
                options.idempotencyWindow = try checked(flag, try value()) {
                    ConfigValue.seconds($0, in: SettingRanges.idempotencyWindow, zero: nil)
                }
            case "--max-input-bytes":
                options.maxInputBytes = try checked(flag, try value()) { ConfigValue.bytes($0, in: SettingRanges.maxInputBytes) }
            case "--compact-after-bytes":
                options.compactAfterBytes = try checked(flag, try value()) { ConfigValue.bytes($0, in: SettingRanges.compactAfterBytes) }
            case "--auth-file", "--protected-mode", "--unix-roles", "--follow-auth-file", "--follow":
                let text = try value()
                guard let key = AccessSettings.flags[flag], !(text.isEmpty && (flag.hasSuffix("-file") || flag == "--follow")) else {
                    throw UsageError("\(flag) needs a PATH; see rpcd --help")
                }
                if let problem = AccessSettings.apply(key, text, to: &options) { throw UsageError("\(flag) '\(text)' \(problem.reason)") }
            case "--tls-cert-file", "--tls-key-file", "--tls-ca-file", "--tls-client-auth", "--tls-handshake-timeout":
                let text = try value()
                guard let key = TLSSettings.flags[flag], !(text.isEmpty && flag.hasSuffix("-file")) else {
                    throw UsageError("\(flag) needs a PATH; see rpcd --help")
                }
                if let problem = TLSSettings.apply(key, text, to: &options) { throw UsageError("\(flag) '\(text)' \(problem.reason)") }
            case "--min-sync-replicas", "--sync-timeout", "--coordinator", "--cluster", "--advertise", "--leader-ttl", "--max-failover-lag":
                let text = try value()
                if let problem = ReplicationSettings.apply(ReplicationSettings.flags[flag] ?? "", text, to: &options) { throw UsageError("\(flag) '\(text)' \(problem.reason)") }
            default:
                throw UsageError("unknown option '\(argument)' for serve; see rpcd --help")
            }
        }
        if options.listen.isEmpty { options.listen = [ServeOptions.defaultListen] }
        return options
    }

    /// Flags that set a config key (so they win over the file).
    static let configKeys = [
        "--listen": "listen", "--data-dir": "data_dir", "--log-level": "log_level", "--fsync": "fsync",
        "--group-commit-delay": "group_commit_delay",
        "--max-frame-bytes": "max_frame_bytes", "--max-output-bytes": "max_output_bytes",
        "--max-connections": "max_connections", "--idle-timeout": "idle_timeout", "--event-loops": "event_loops",
        "--busy-poll": "busy_poll", "--line-timeout": "line_timeout", "--auth-timeout": "auth_timeout",
        "--max-unauthenticated": "max_unauthenticated",
        "--max-input-bytes": "max_input_bytes", "--compact-after-bytes": "compact_after_bytes",
        "--idempotency-keys": "idempotency_keys", "--idempotency-window": "idempotency_window",
    ].merging(AccessSettings.flags) { first, _ in first }.merging(TLSSettings.flags) { first, _ in first }
        .merging(ReplicationSettings.flags) { first, _ in first }

    /// `text` parsed and range-checked by `parse`, or a usage error naming the flag, the value and the range.
    static func checked<T>(
        _ flag: String, _ text: String, _ parse: (String) -> Result<T, ConfigValue.Problem>
    ) throws(UsageError) -> T {
        switch parse(text) {
        case .success(let value): return value
        case .failure(let problem): throw UsageError("\(flag) '\(text)' \(problem.reason)")
        }
    }
}
