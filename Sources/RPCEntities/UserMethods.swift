import RPCSchema

/// The `user` entity: its rules and the handlers of its methods.
enum UserMethods {
    static func register(in table: inout MethodTable<Entities>) {
        table.on(CreateUser.self, touches: { .user($0.id) }) { state, p, key throws(RPCError) in
            try Rules.requireID(p.id, "id")
            try Rules.requireName(p.name)
            try Rules.requireEmail(p.email)
            let user = User(id: p.id, name: p.name, email: p.email)
            guard state.users.insertNew(user, key: key) else {
                throw .conflict("user \"\(p.id)\" exists already; pick another id or use user.updateUser")
            }
            return user
        }
        // A follower applies its leader's creates from the line's bytes, for the same rules.
        table.storesPlain(CreateUser.self) { state, plain in
            guard plain.count == 3, let id = plain.stringBytes("id"), let name = plain.stringBytes("name"),
                let email = plain.stringBytes("email"), !id.isEmpty, !name.isEmpty, Rules.isEmail(email)
            else { return false }
            let key = ExactID(String(decoding: id, as: UTF8.self))
            return state.users.insertNew(key: key) { User.store(name: name, email: email, into: &$0) } or: {
                User(id: key.string, name: String(decoding: name, as: UTF8.self), email: String(decoding: email, as: UTF8.self))
            }
        }
        table.on(UpdateUser.self, touches: { .user($0.userId) }) { state, p, key throws(RPCError) in
            guard var user = state.users[key] else { throw Rules.unknownUser(p.userId) }
            if let name = p.newName {
                try Rules.requireName(name)
                user.name = name
            }
            if let email = p.newEmail {
                try Rules.requireEmail(email)
                user.email = email
            }
            state.users.insert(user, key: key)
            return user
        }
        table.on(DeleteUser.self, touches: { .user($0.userId) }) { state, p, key throws(RPCError) in
            guard state.users.remove(key: key) != nil else { throw Rules.unknownUser(p.userId) }
            state.buildings.updateAll { building in
                let residents = building.residents.count
                building.residents.removeAll { ExactID($0) == key }
                return building.residents.count != residents
            }
            return Deleted(deleted: p.userId)
        }
        // Reads name no record (`touches`): in a table that fits the cache a get has nothing to
        // prefetch, and hashing its id before the lock cost a get ~3% more instructions.
        table.on(GetUser.self) { state, p throws(RPCError) in
            guard let user = state.users[p.userId] else { throw Rules.unknownUser(p.userId) }
            return user
        }
        table.on(ListUsers.self) { state, p throws(RPCError) in
            try Rules.requireLimit(p.limit)
            let page = state.users.page(after: p.after, limit: p.limit)
            return UserPage(users: page.records, next: page.next)
        }
    }
}

/// Rules shared by the entities; every error says what was wrong and what to do.
enum Rules {
    static func requireID(_ id: String, _ field: String) throws(RPCError) {
        guard !id.isEmpty else { throw .invalidParams("\(field) must not be empty") }
    }

    static func requireName(_ name: String) throws(RPCError) {
        guard !name.isEmpty else { throw .invalidParams("name must not be empty") }
    }

    static func requireEmail(_ email: String) throws(RPCError) {
        // Over the contiguous bytes: the UTF8View's iterator cost ~220 instructions an address.
        guard email.utf8.withContiguousStorageIfAvailable({ isEmail($0) }) ?? isEmail(email.utf8) else { throw .invalidParams("email \"\(email)\" has no @; give an address like ada@example.com") }
    }

    /// What `requireEmail` asks of an address's UTF-8 bytes (a stored create checks it on them).
    static func isEmail<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> Bool { bytes.contains(UInt8(ascii: "@")) }

    /// A list's `limit`: a whole number from 1 up; one above the record count lists them all. (The
    /// decoder already refused non-integers and numbers outside Int.)
    static func requireLimit(_ limit: Int?) throws(RPCError) {
        if let limit, limit < 1 {
            throw .invalidParams("limit \(limit) is below 1; give a whole number from 1 to \(Int.max), or omit it to list all")
        }
    }

    static func unknownUser(_ id: String) -> RPCError {
        .notFound("no user \"\(id)\"; user.listUsers shows the existing ids")
    }

    static func unknownBuilding(_ id: String) -> RPCError {
        .notFound("no building \"\(id)\"; building.listBuildings shows the existing ids")
    }
}
