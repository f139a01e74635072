import Dispatch
import Foundation
import RPCEntities
import RPCSchema
import RPCTransport

/// Who gets in and who is shown out: a new connection's admission (access rules, connection
/// caps, room made by closing the longest-unauthenticated), its clocks (idle, line, auth), and
/// lines of another protocol (HTTP).
extension Server {
    func accepted(_ fd: Int32, peer: SocketAddress?, on listener: SocketAddress, tls: TLSContext? = nil) {
        var credentials: PeerCredentials?
        if case .unix = listener { credentials = try? Syscall.peerCredentials(fd) }
        let who = credentials.map { "uid \($0.uid) (pid \($0.pid))" } ?? peer.map { "\($0)" } ?? "?"
        let decision = access.decide(listener: listener, peer: peer, credentials: credentials)
        if case .refuse(let error) = decision {
            refuse(fd, error, log: "refused \(who) on \(listener): \(error.errorMessage)")
            return
        }
        var session: TLSSession?
        if let tls {
            do {
                session = try tls.session()
            } catch {
                log.warning(key: "tls-session", "closed a connection from \(who): \(error)")
                Syscall.close(fd)
                return
            }
        }
        var overloaded = false
        var evicted: Connection?
        let mustAuthenticate = decision == .admit(nil, principal: nil)
        let connection: Connection? = lock.withLock {
            guard !stopping else { return nil }
            let full = maxConnections > 0 && connections.count >= maxConnections
            // Room for a newcomer is made by closing the connection that has waited longest to
            // authenticate: silent connections cannot lock out a peer with a token.
            if full || (mustAuthenticate && unauthenticated.count >= maxUnauthenticated) {
                guard !unauthenticated.isEmpty else {
                    refusedConnections += 1
                    overloaded = true
                    return nil
                }
                evicted = connections[unauthenticated.removeFirst()]
            }
            nextID += 1
            totalConnections += 1
            let connection = Connection(
                fd: fd, id: nextID, peer: peer, loop: loops.nextLoop(), limits: limits, tls: session, delegate: self)
            let box = SessionBox(turn: turns[connection.loop.index], stats: loopStates[connection.loop.index], listener: "\(listener)")
            box.session.peer = who
            box.session.peerHost = credentials.map { "uid \($0.uid)" } ?? peer?.host ?? "?"
            if case .admit(let role, let principal) = decision {
                box.session.role = role
                box.session.principal = principal
            }
            if mustAuthenticate {
                box.awaitingAuth = true
                unauthenticated.append(nextID)
            }
            connection.context = box
            connections[nextID] = connection
            return connection
        }
        if let evicted { shed(evicted, for: who) }
        guard let connection else {
            if overloaded {
                let error = RPCError.overloaded(
                    "rpcd serves at most \(maxConnections) connection\(maxConnections == 1 ? "" : "s") at once; try again later")
                refuse(fd, error, log: "refused a connection from \(who): max_connections (\(maxConnections)) reached")
            } else {
                log.warning(key: "refused-stopping", "closed a connection from \(who) accepted while stopping")
                Syscall.close(fd)
            }
            return
        }
        log.debug("connection \(connection.id) from \(peer.map { "\($0)" } ?? "?") opened")
        let state = loopState(connection)
        connection.queue.async { state.add(connection) }
        connection.start()
    }

    /// One error line, then close: past `max_connections`, or refused by protected mode. The socket
    /// is new, so the line fits its send buffer; the write side is shut first so the error is
    /// followed by a clean FIN. The fd lingers a moment before it is closed: closing with the
    /// peer's first request unread would reset the connection, and a reset can discard the error
    /// before the peer reads it. At most `maxLingering` refused sockets linger; past that they close at once.
    func refuse(_ fd: Int32, _ error: RPCError, log message: String) {
        var line: [UInt8] = []
        RequestCodec.encodeError(id: "", error, form: .canonical, into: &line)
        _ = try? line.withUnsafeBytes { try Syscall.send(fd, $0) }
        try? Syscall.shutdown(fd, how: Int32(SHUT_WR))
        log.warning(key: "refused-\(error.code)", message)
        dispatchPrecondition(condition: .onQueue(acceptQueue))
        guard lingering < Self.maxLingering else { return Self.drainAndClose(fd) }
        lingering += 1
        acceptQueue.asyncAfter(deadline: .now() + .milliseconds(250)) { [self] in
            lingering -= 1
            Self.drainAndClose(fd)
        }
    }

    static let maxLingering = 256

    /// Reads what the peer sent (so the close is a FIN, not a reset), then closes.
    static func drainAndClose(_ fd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<16 {
            let result = scratch.withUnsafeMutableBytes { try? Syscall.receive(fd, into: $0) }
            guard case .processed(let n)? = result, n > 0 else { break }
        }
        Syscall.close(fd)
    }

    /// An HTTP request on the wire: answered with HTTP 400 (first line) or an error (later), and
    /// the connection closed before anything after the line is run.
    func refuseHTTP(
        _ line: UnsafeRawBufferPointer, first: Bool, on connection: Connection, box: SessionBox, turn: TurnBatch, stats: LoopState
    ) {
        finish(turn, stats)  // the replies to earlier lines first
        stats.count(LoopState.invalidLine, failed: true)
        if first {
            connection.send(CrossProtocol.badRequest(listener: box.listener))
        } else {
            connection.send { out in
                RequestCodec.encodeError(
                    id: "", .invalidRequest("this line is HTTP, not a request: rpcd speaks newline-delimited JSON; closing the connection"),
                    form: box.session.form ?? .canonical, into: &out)
            }
        }
        connection.closeAfterFlush(.closedByServer("sent an HTTP request (\(Echo.bytes(line.prefix(40), maxBytes: 40))); rpcd speaks newline-delimited JSON"))
        let host = box.session.peerHost
        let fresh = lock.withLock {
            if httpLogged.count >= 256 { httpLogged.removeAll() }
            return httpLogged.insert(host).inserted
        }
        if fresh {
            log.warning(
                key: "http",
                "\(box.session.peer) sent an HTTP request (\(Echo.bytes(line, maxBytes: 40))); answered 400 and closed: "
                    + "if no one meant to, a web page may be trying to reach rpcd through a browser")
        }
    }

    /// A TLS peer's handshake finished: a verified client certificate that an auth file line
    /// (`NAME ROLE cert:CN-OR-DNS-NAME`) names authenticates it, with no `system.auth`.
    func connectionDidEstablishTLS(_ connection: Connection) {
        guard let box = connection.context as? SessionBox, box.session.role == nil, let lookup = certificatePrincipal else { return }
        let names = connection.verifiedPeerNames
        guard !names.isEmpty else { return }
        guard let (name, role) = lookup(names) else {
            log.debug("connection \(connection.id) from \(box.session.peer): its certificate (\(names.map { Echo.text($0, maxBytes: 80) }.joined(separator: ", "))) names no principal; it may call system.auth")
            return
        }
        box.session.role = role
        box.session.principal = name
        if box.awaitingAuth { stopAwaitingAuth(connection, box: box) }
        log.debug("connection \(connection.id) from \(box.session.peer): authenticated as \(name) (\(role.rawValue)) by its TLS client certificate")
    }

    /// A connection that had to authenticate did, or is being closed: it no longer counts against
    /// `maxUnauthenticated` nor runs against the authentication timeout.
    func stopAwaitingAuth(_ connection: Connection, box: SessionBox) {
        box.awaitingAuth = false
        lock.withLock { removeUnauthenticated(connection.id) }
    }

    /// With `lock` held.
    func removeUnauthenticated(_ id: UInt64) {
        // Ids grow with each connection, so the list is sorted.
        var low = 0
        var high = unauthenticated.count
        while low < high {
            let middle = (low + high) / 2
            if unauthenticated[middle] < id { low = middle + 1 } else { high = middle }
        }
        if low < unauthenticated.count && unauthenticated[low] == id { unauthenticated.remove(at: low) }
    }

    /// Closes a connection that waited longest to authenticate, to make room for `newcomer`.
    func shed(_ connection: Connection, for newcomer: String) {
        log.warning(
            key: "unauthenticated-shed",
            "connection \(connection.id) from \(connection.peer.map { "\($0)" } ?? "?") closed unauthenticated to make room for \(newcomer) "
                + "(max_unauthenticated \(maxUnauthenticated), max_connections \(maxConnections))")
        connection.queue.async {
            guard let box = connection.context as? SessionBox else { return }
            box.awaitingAuth = false  // out of the list already
            connection.send { out in
                RequestCodec.encodeError(
                    id: "", .overloaded("closed: too many connections wait to authenticate (max_unauthenticated); call system.auth first thing after connecting"),
                    form: box.session.form ?? .canonical, into: &out)
            }
            connection.closeAfterFlush(.closedByServer("closed unauthenticated to make room for a newer connection"))
        }
    }

    /// Closes `connection` if one of its timeouts ran out (on its loop's queue, from the sweep).
    func expire(_ connection: Connection, now: UInt64, timeouts: ConnectionTimeouts, state: LoopState) {
        guard let box = connection.context as? SessionBox else { return }
        switch timeouts.expired(connection, awaitingAuth: box.awaitingAuth, now: now) {
        case nil:
            return
        case .idle:
            state.countIdleClose()
            log.debug("connection \(connection.id): no I/O for \(ConfigValue.render(seconds: idleTimeout)) s and nothing owed; closing")
            connection.close(.closedByServer("idle for more than \(ConfigValue.render(seconds: idleTimeout)) s"))
        case .line:
            log.warning(
                key: "line-timeout",
                "connection \(connection.id) from \(box.session.peer): a line not ended \(ConfigValue.render(seconds: lineTimeout)) s after it began (line_timeout); closing")
            connection.close(.closedByServer("a line took more than \(ConfigValue.render(seconds: lineTimeout)) s (line_timeout)"))
        case .handshake:
            log.warning(
                key: "handshake-timeout",
                "connection \(connection.id) from \(box.session.peer): TLS handshake not finished within \(ConfigValue.render(seconds: tlsHandshakeTimeout)) s (tls_handshake_timeout); closing")
            connection.close(.closedByServer("TLS handshake not finished within \(ConfigValue.render(seconds: tlsHandshakeTimeout)) s"))
        case .auth:
            stopAwaitingAuth(connection, box: box)
            log.warning(
                key: "auth-timeout",
                "connection \(connection.id) from \(box.session.peer): not authenticated within \(ConfigValue.render(seconds: authTimeout)) s (auth_timeout); closing")
            connection.send { out in
                RequestCodec.encodeError(
                    id: "", .unauthorized("not authenticated within \(ConfigValue.render(seconds: authTimeout)) s (auth_timeout); call system.auth first thing after connecting"),
                    form: box.session.form ?? .canonical, into: &out)
            }
            connection.closeAfterFlush(.closedByServer("not authenticated within \(ConfigValue.render(seconds: authTimeout)) s"))
        }
    }
}
