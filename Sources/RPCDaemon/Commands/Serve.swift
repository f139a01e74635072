import Dispatch
import Foundation
import RPCClient
import RPCEntities
import RPCSchema
import RPCTransport

extension Daemon {
    /// `rpcd serve`: start in stages, run until SIGTERM/SIGINT, stop in reverse order. SIGHUP runs
    /// the reload hook (nothing to reload yet: it is logged) and serving goes on.
    ///
    /// 1. signals are caught (before anything binds, so an early SIGTERM is not lost);
    /// 2. the state is loaded;
    /// 3. listeners are bound and `listening on HOST:PORT` is logged for each;
    /// 4. on a signal: stop accepting, send what is owed, close, exit 0.
    static func serve(_ flags: ServeOptions) -> Int32 {
        Syscall.ignoreSIGPIPE()
        let fileLimit = Syscall.raiseFileLimit()
        let signals = SignalHandler(signals: [SIGTERM, SIGINT, SIGHUP])
        // Settings: flags > config file > defaults.
        let options: ServeOptions
        do {
            options = try Config.effective(flags)
        } catch {
            for line in error.lines { LogSink.stderr.write("rpcd: \(line)\n") }
            return 2
        }
        let log = Logger(level: options.logLevel)
        let environment = ProcessInfo.processInfo.environment
        let systemd = ServiceManager(environment: environment, log: log)
        systemd.status("starting: loading state")

        // Addresses are checked before any work, so a typo fails fast.
        var addresses: [SocketAddress] = []
        var isTLS: [Bool] = []
        for text in options.listen {
            guard let (address, tls) = TLSSettings.parseListen(text) else {
                LogSink.stderr.write("rpcd: listen '\(text)' is not an address: use \(TLSSettings.acceptedListenForms)\n")
                return 2
            }
            addresses.append(address)
            isTLS.append(tls)
        }
        // TLS: the certificate and key are loaded now, so a bad pair fails the start.
        let tlsContext: TLSContextHolder?
        do {
            tlsContext = try TLSSettings.serverContext(options).map(TLSContextHolder.init)
        } catch {
            LogSink.stderr.write("rpcd: \(error)\n")
            return 2
        }
        var etcdEndpoints: [(text: String, address: SocketAddress)]?
        if let coordinator = options.coordinator {
            guard options.follow == nil else {
                LogSink.stderr.write("rpcd: coordinator and follow are both set; with a coordinator the members elect and follow their leader themselves, so remove follow\n")
                return 2
            }
            etcdEndpoints = EtcdClient.parse(coordinator)
            // Without `advertise` the others reach this member at its first listen address (over
            // TLS when that listener is TLS).
            if options.advertise == nil, let first = addresses.first, first.isWildcard || first.family == AF_UNIX {
                LogSink.stderr.write(
                    "rpcd: with a coordinator the other members reach this one at its first listen address, and \(options.listen[0]) is a wildcard or a Unix socket; set advertise = HOST:PORT (tls:HOST:PORT for TLS)\n")
                return 2
            }
        }
        if let follow = options.follow, let leader = TLSSettings.parseListen(follow)?.address, addresses.contains(where: { $0.mayBe(leader) }) {
            LogSink.stderr.write("rpcd: follow \(follow) is this daemon's own listen address, and a daemon cannot follow itself; point follow at the leader's address\n")
            return 2
        }

        // Access: the auth file is read now, so a bad one fails the start (exit 2, FILE:LINE).
        let policy: AccessPolicy
        do {
            policy = try AccessPolicy.load(options) { log.warning($0) }
        } catch {
            for line in error.lines { LogSink.stderr.write("rpcd: \(line)\n") }
            return 2
        }
        let reloader = policy.authFile.map { AuthReloader($0) { log.warning("SIGHUP: \($0)") } }
        // A follower's credentials for its leader, read now so a bad file fails the start.
        var followCredentials: RPCCredentials?
        if let path = options.followAuthFile {
            do {
                followCredentials = try FollowCredentials.load(path: path) { log.warning($0) }
            } catch {
                for line in error.lines { LogSink.stderr.write("rpcd: \(line)\n") }
                return 2
            }
        }

        // State: lock the data directory, replay the snapshot and journal, open the journal.
        guard let (state, journal) = openState(options, log: log) else { return 1 }
        let context = DaemonContext(log: log)
        if let reloader {
            context.setAuthenticator { name, token in reloader.authenticate(name: name, token: token) }
        }
        // `consume`: a copy of the state left alive here would share every record shard with the
        // dispatcher's, so each change would go to the overlays instead of the shards, for good.
        let dispatcher = Dispatcher(state: consume state, log: journal, context: context, onCounterRequest: { request in
            log.debug("counter-request \(request.method) id \(request.id) received; not answered")
        })
        journal.attach(dispatcher)
        let configureKeys: @Sendable (inout Entities) -> Void = { state in
            state.keys.setBounds(limit: options.idempotencyKeys, windowSeconds: options.idempotencyWindow, now: DispatchTime.now().uptimeNanoseconds)
        }
        dispatcher.withState(configureKeys)

        // The change feed (every daemon has one: followers feed chains), and following.
        let sequences = journal.sequences
        let feed = ReplicationFeed(
            files: journal.directory.files, durable: sequences.durable, snapshotSeq: sequences.snapshot,
            maxLineBytes: options.maxFrameBytes + 4096, log: log)
        journal.attach(feed)
        context.attach(feed)
        // Synchronous replication binds a leader; a follower keeps the setting for when it is promoted.
        // With a coordinator every member has one, active only while it is the leader.
        let syncGate = options.minSyncReplicas > 0 && options.follow == nil
            ? SyncGate(
                required: options.minSyncReplicas, timeout: options.syncTimeout, confirmed: journal.sequences.durable,
                active: etcdEndpoints == nil, coordinated: etcdEndpoints != nil, log: log) : nil
        journal.syncGate = syncGate
        feed.syncGate = syncGate
        context.history = { dispatcher.withState { $0.terms.marks } }
        let origin: HistoryOrigin
        do {
            origin = try HistoryOrigin.load(directory: journal.directory.path, empty: sequences.durable == 0 && sequences.snapshot == 0)
        } catch {
            log.error("cannot write \(journal.directory.path)/ORIGIN: \(error); fix the data directory's permissions")
            return 1
        }
        context.historyOrigin = origin
        guard etcdEndpoints != nil || Self.startTermIfPromoted(options, dispatcher: dispatcher, journal: journal, log: log) else { return 1 }
        let credentials = followCredentials
        let makeFollower: @Sendable (String, String?) -> Follower = { leader, member in
            Follower(
                leader: leader, credentials: credentials, tls: TLSSettings.followerOptions(options), member: member, origin: origin,
                dispatcher: dispatcher, journal: journal, log: log, configureKeys: configureKeys)
        }
        let followers = FollowerSlot()
        followers.replace(with: options.follow.map { makeFollower($0, nil) })
        let coordinator = etcdEndpoints.map { endpoints in
            Coordinator(
                settings: Coordinator.Settings(
                    cluster: options.cluster, advertise: options.advertise ?? "", leaderTTL: options.leaderTTL, maxFailoverLag: options.maxFailoverLag,
                    minSyncReplicas: options.minSyncReplicas),
                etcd: EtcdClient(endpoints: endpoints, timeout: max(0.2, options.leaderTTL / 4)), dispatcher: dispatcher, journal: journal,
                fence: LeaseFence(leaderTTL: options.leaderTTL), syncGate: syncGate, slot: followers, log: log, makeFollower: makeFollower)
        }
        journal.fence = coordinator?.fence

        // Listeners. A verified client certificate may name a principal of the auth file.
        var certificatePrincipal: (@Sendable ([String]) -> (name: String, role: RPCRole)?)?
        if let reloader { certificatePrincipal = { names in reloader.principal(forCertificateNames: names) } }
        let loopCount = options.loopCount(cores: ProcessInfo.processInfo.activeProcessorCount)
        let server: Server
        do {
            server = try Server(
                dispatcher: dispatcher, durability: journal,
                limits: Connection.Limits(maxFrameBytes: options.maxFrameBytes, maxOutputBytes: options.maxOutputBytes),
                loopCount: loopCount, log: log,
                maxConnections: options.maxConnections, idleTimeout: options.idleTimeout, lineTimeout: options.lineTimeout,
                authTimeout: options.authTimeout, tlsHandshakeTimeout: options.tlsHandshakeTimeout,
                maxUnauthenticated: options.unauthenticatedCap, maxInputBytes: options.maxInputBytes,
                access: policy.connectionAccess, journalStats: { journal.stats() }, feed: feed, busyPoll: options.busyPoll,
                certificatePrincipal: certificatePrincipal)
            server.replicationStats = {
                var stats = followers.follower?.stats ?? ReplicationStats(role: "leader", sequence: Int(clamping: feed.sequences.durable))
                if let coordinator {
                    stats.coordinator = coordinator.summary
                    if stats.role == "leader" { stats.role = coordinator.roleName }
                }
                stats.term = dispatcher.withState { $0.terms.current.map { Int(clamping: $0.term) } }
                if let syncGate {
                    stats.minSyncReplicas = syncGate.required
                    stats.inSyncReplicas = syncGate.inSyncCount
                }
                stats.subscribers = feed.stats()
                return stats
            }
            context.attach(server)
            context.position = {
                if let follower = followers.follower { return follower.position }
                let durable = Int(clamping: feed.sequences.durable)
                return PositionResult(role: "leader", sequence: durable, newestSequence: durable)
            }
        } catch {
            log.error("cannot start the event loops: \(error); raise the open-file limit (LimitNOFILE)")
            return 1
        }
        do {
            // Socket activation: serve systemd's sockets instead of binding `listen`.
            let inherited = try SocketActivation.takeListeners()
            if inherited.isEmpty {
                try server.listen(on: zip(addresses, isTLS).map { address, tls in (address, tls ? tlsContext : nil) })
            } else {
                // systemd binds the sockets; a tls: listen address says which of them speak TLS.
                let tlsAddresses = zip(addresses, isTLS).filter(\.1).map(\.0)
                var matched: [SocketAddress] = []
                try server.listen(inherited: inherited) { bound in
                    guard let tlsAddress = tlsAddresses.first(where: { $0.port == bound.port && ($0.host == bound.host || $0.isWildcard) }) else { return nil }
                    matched.append(tlsAddress)
                    return tlsContext
                }
                for address in tlsAddresses where !matched.contains(where: { $0.port == address.port && $0.host == address.host }) {
                    log.warning("listen tls:\(address) matches no socket systemd passed, so nothing serves TLS there; add ListenStream=\(address) to rpcd.socket")
                }
            }
        } catch {
            log.error("cannot listen: \(error); pick a free address with --listen HOST:PORT (port 0 picks a free port)")
            return 1
        }
        log.info("access: \(policy.summary)")
        if options.follow != nil && followCredentials != nil && policy.authFile == nil {
            let warning = "this follower authenticates to its leader but has no auth_file of its own: any peer that reaches it "
                + "reads the leader's data without a token; give it an auth file (rpcd auth add NAME read --file PATH, then auth_file = PATH)"
            log.warning(warning)
            context.warnings.append(warning)
        }
        log.info(
            "rpcd \(CommandLineParser.version) serving; config \(Config.path(for: flags, environment: environment)?.path ?? "none (defaults)"), "
                + "data dir \(options.dataDir), max_connections \(options.maxConnections), idle_timeout \(ConfigValue.render(seconds: options.idleTimeout)) s, "
                + "\(loopCount) event loop\(loopCount == 1 ? "" : "s"); "
                + "up to \(fileLimit) open files; SIGTERM or SIGINT stops it, SIGHUP reloads what can be reloaded")
        let firstBound = server.boundAddresses.first.map { (isTLS.first == true ? TLSSettings.listenPrefix : "") + "\($0)" }
        coordinator?.start(advertise: options.advertise ?? firstBound ?? options.listen[0])
        followers.follower?.start()
        systemd.ready(followers.follower.map { "serving reads; \($0.summary)" } ?? (coordinator != nil ? "serving; waiting for etcd to name a leader" : "serving"))
        systemd.startHeartbeat(server)

        // SIGHUP: reload; SIGTERM, SIGINT: shutdown, in reverse order of the start.
        var steps: [ReloadHook.Step] = []
        if let reloader {
            // Principals removed from the file, or whose role or token changed, lose their connections.
            steps.append(reloader.step { revoked in server.close(principals: Set(revoked)) })
        }
        if let tlsContext {
            // New connections take the new pair; those open keep the one they began with.
            steps.append(
                ReloadHook.Step(name: "TLS certificate and key") {
                    guard let context = try TLSSettings.serverContext(options) else { return "no TLS listener" }
                    tlsContext.current = context
                    return "reloaded from \(options.tlsCertFile ?? "?") and \(options.tlsKeyFile ?? "?"); new connections use them"
                })
        }
        let reload = ReloadHook(steps: steps)
        signals.onSignal { signal in
            if signal == SIGHUP { return reload.reload(log: log) }
            systemd.stopping()
            coordinator?.stop()
            followers.follower?.shutdown()
            log.info("received \(signal == SIGTERM ? "SIGTERM" : "SIGINT"); stopping: answering what was received, then exiting")
            server.stop(grace: .seconds(3)) {
                journal.close {
                    log.info("stopped")
                    log.flush()
                    exit(0)
                }
            }
        }
        dispatchMain()
    }

    /// A data directory that last followed a leader (its `FOLLOWING` file says so) and is served
    /// without `follow` was promoted by hand: its first record from now on starts a new term, so
    /// the old leader, pointed at it later, finds out its own last records were never taken here.
    /// A follower writes the file before it follows; a leader restarted on its own data keeps its term.
    static func startTermIfPromoted(_ options: ServeOptions, dispatcher: Dispatcher, journal: Journal, log: Logger) -> Bool {
        let marker = journal.directory.path + "/FOLLOWING"
        if let leader = options.follow {
            guard !FileIO.exists(marker) else { return true }
            do {
                try FileIO.replace(marker, with: Array("\(leader)\n".utf8), mode: 0o600, faults: false)
            } catch {
                log.error("cannot write \(marker): \(error); fix the data directory's permissions")
                return false
            }
            return true
        }
        guard FileIO.exists(marker) else { return true }
        let current = dispatcher.withState { $0.terms.current }
        let term = (current?.term ?? 0) &+ 1
        let id = TermHistory.newID()
        let address = options.listen.first ?? "?"
        switch dispatcher.startTerm(term, id: id, leader: address) {
        case .failure(let error):
            log.error("cannot start a new term as the new leader: \(error.errorMessage); check the data directory")
            return false
        case .success(let seq):
            if let failure = journal.waitDurable(seq) {
                log.error("cannot journal the new term: \(failure); check the data directory")
                return false
            }
            try? FileIO.unlink(marker)
            try? FileIO.syncDirectory(journal.directory.path)
            log.info("promoted: this data directory followed a leader and is served without follow; term \(term) (id \(id)) starts at sequence \(seq)")
            return true
        }
    }
}
