import RPCSchema

/// The `system` entity: about the daemon rather than its data. Registered in the method table like
/// every other entity, so the dispatcher, `system.describe` and the role check all see it; the
/// handlers read the daemon through its `ServiceContext`.
package enum SystemMethods {
    static func register(in table: inout MethodTable<Entities>) {
        table.service(SystemPing.self, access: .open) { _, _, context in
            .now(PingResult(version: context.version, uptimeSeconds: context.uptimeSeconds))
        }
        table.service(SystemAuth.self, access: .open) { p, session, context in
            let why: String
            switch context.authenticate(name: p.name, token: p.token, session: session) {
            case .authenticated(let principal, let role):
                session.role = role
                session.principal = principal
                return .now(AuthResult(name: principal, role: role))
            case .failed:
                why = "unknown name or wrong token for \"\(Echo.text(p.name))\""
            case .throttled(let wait):
                why = "too many failed system.auth calls from \(session.peerHost); the token was not checked, wait \(Self.seconds(wait)) s before trying again"
            }
            // Failures add up over the connection's life: a success in between does not give more tries.
            session.authFailures += 1
            let left = context.maxAuthFailures - session.authFailures
            if left <= 0 { session.closeAfterReply = true }
            return .failure(.unauthorized(
                left > 0
                    ? "\(why); check the token file (\(left) more tr\(left == 1 ? "y" : "ies") on this connection)"
                    : "\(why); too many failures, closing the connection"))
        }
        table.service(SystemStaleReads.self, access: .read) { p, session, _ in
            session.staleReads = p.allow
            return .now(StaleReadsResult(allow: p.allow))
        }
        table.service(SystemDescribe.self, access: .read) { _, _, context in
            .now(describe(Entities.table, version: context.version))
        }
        table.service(SystemStats.self, access: .admin) { _, _, context in
            .later { done in context.stats { done(.success($0)) } }
        }
        table.service(ReplicationSubscribe.self, access: .replicate) { p, session, context in
            subscribe(p, session: &session, context: context)
        }
        table.service(ReplicationPosition.self, access: .replicate) { _, _, context in
            switch context.replicationPosition() {
            case .success(let position): .now(position)
            case .failure(let error): .failure(error)
            }
        }
    }

    /// `1.5` for a wait in seconds, rounded up to a tenth.
    package static func seconds(_ wait: Double) -> String {
        let tenths = wait.isFinite ? Int(min(max((wait * 10).rounded(.up), 1), 36_000)) : 36_000
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// `replication.subscribe`: checks where the feed can start; the server starts it after the reply.
    static func subscribe(_ p: ReplicationSubscribe, session: inout Session, context: any ServiceContext) -> MethodTable<Entities>.ServiceResult<SubscribeResult> {
        guard session.feed == nil else {
            return .failure(.invalidParams("this connection is subscribed already; open another connection for a second feed"))
        }
        let durable: UInt64, snapshot: UInt64, filesFrom: UInt64
        switch context.feedSequences() {
        case .success(let sequences): (durable, snapshot, filesFrom) = sequences
        case .failure(let error): return .failure(error)
        }
        let marks = context.termMarks()
        var result = SubscribeResult(
            sequence: Int(clamping: durable), snapshotSequence: Int(clamping: snapshot), term: marks.last?.term, termId: marks.last?.termId,
            origin: p.terms == nil ? nil : context.origin())
        // A daemon says which terms its records are from: where its history leaves this one's, it
        // is told the last sequence number the two share, and no feed starts.
        if let theirs = p.terms, let from = p.fromSequence, from > 0 {
            let shared = TermHistory.common(
                theirs, last: UInt64(from), origin: p.origin, leader: marks, leaderLast: durable, leaderOrigin: context.origin())
            if shared < UInt64(from) {
                result.rewindTo = Int(clamping: shared)
                return .now(result)
            }
        }
        var after = durable
        if let from = p.fromSequence {
            guard from >= 0 else { return .failure(.invalidParams("fromSequence \(from) is negative; sequence numbers start at 1 (0: from the beginning)")) }
            guard UInt64(from) <= durable else {
                return .failure(.invalidParams("fromSequence \(from) is ahead of this daemon's last sequence number \(durable): the subscriber holds records this daemon never had; empty its data directory to rebuild it from a snapshot, or follow a daemon that has them"))
            }
            after = UInt64(from)
        }
        // A daemon (it sends its terms) is fed from the journal the last compaction kept too, so
        // a follower a little behind the snapshot does not copy the whole state; any other
        // subscriber from the live journal, as `snapshotSequence` tells it.
        let journalStart = p.terms == nil ? snapshot : filesFrom
        let snapshotFirst = after < journalStart
        if snapshotFirst && p.snapshot != true {
            return .failure(.snapshotRequired("records up to \(journalStart) are only in this daemon's snapshot (its journal starts at \(journalStart + 1)); subscribe with \"snapshot\": true to receive the snapshot first, or from \(journalStart) or later"))
        }
        session.feed = Session.FeedStart(after: after, snapshotFirst: snapshotFirst, replica: p.terms != nil, member: p.member)
        return .now(result)
    }

    /// Every entity and method of `table`, in registration order, with params and access.
    static func describe(_ table: MethodTable<Entities>, version: String) -> ServiceDescription {
        var entities: [EntityDescription] = []
        for entry in table.entries {
            let method = MethodDescription(
                name: entry.method.name, result: entry.result.description, mutation: entry.isMutation,
                access: entry.access, params: entry.fields)
            if let index = entities.firstIndex(where: { $0.name == entry.method.entity }) {
                entities[index].methods.append(method)
            } else {
                entities.append(EntityDescription(name: entry.method.entity, methods: [method]))
            }
        }
        return ServiceDescription(version: version, entities: entities)
    }
}
