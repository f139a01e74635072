/// A user record: what `user.*Result` counter-requests carry.
public struct User: Codable, Hashable, Sendable {
    public var id: String
    public var name: String
    public var email: String

    public init(id: String, name: String, email: String) {
        self.id = id
        self.name = name
        self.email = email
    }
}

/// One page of `user.listUsers`: sorted by id; `next` is the last id returned when more remain.
public struct UserPage: Codable, Hashable, Sendable, RPCPage {
    public var users: [User]
    public var next: String?

    public init(users: [User], next: String? = nil) {
        self.users = users
        self.next = next
    }
}

/// The reply to every delete: `{"deleted": "<id>"}`.
public struct Deleted: Codable, Hashable, Sendable {
    public var deleted: String
    public init(deleted: String) { self.deleted = deleted }
}

// MARK: - The user entity's methods

public struct CreateUser: RPCCall, Hashable {
    public typealias Reply = User
    public static let method = RPCMethod("user", "createUser")
    public static var isMutation: Bool { true }
    public var id: String
    public var name: String
    public var email: String
    /// The user it creates, field for field.
    public init(id: String, name: String, email: String) {
        (self.id, self.name, self.email) = (id, name, email)
    }
}

public struct UpdateUser: RPCCall, Hashable {
    public typealias Reply = User
    public static let method = RPCMethod("user", "updateUser")
    public static var isMutation: Bool { true }
    public var userId: String
    public var newName: String?
    public var newEmail: String?
    public init(userId: String, newName: String? = nil, newEmail: String? = nil) {
        self.userId = userId
        self.newName = newName
        self.newEmail = newEmail
    }
}

public struct DeleteUser: RPCCall, Hashable {
    public typealias Reply = Deleted
    public static let method = RPCMethod("user", "deleteUser")
    public static var isMutation: Bool { true }
    public var userId: String
    public init(userId: String) { self.userId = userId }
}

public struct GetUser: RPCCall, Hashable {
    public typealias Reply = User
    public static let method = RPCMethod("user", "getUser")
    public var userId: String
    public init(userId: String) { self.userId = userId }
}

public struct ListUsers: RPCListCall, Hashable {
    public typealias Reply = UserPage
    public typealias Output = [User]
    public static let method = RPCMethod("user", "listUsers")
    public var after: String?
    public var limit: Int?
    public init(after: String? = nil, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }
    public static func output(from reply: UserPage) -> [User] { reply.users }
}
