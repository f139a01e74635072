/// A building record: what `building.*Result` counter-requests carry.
public struct Building: Codable, Hashable, Sendable {
    public var id: String
    public var name: String
    public var address: String
    /// User ids; each names an existing user.
    public var residents: [String]

    public init(id: String, name: String, address: String, residents: [String]) {
        self.id = id
        self.name = name
        self.address = address
        self.residents = residents
    }
}

/// One page of `building.listBuildings`: sorted by id; `next` is the last id returned when more remain.
public struct BuildingPage: Codable, Hashable, Sendable, RPCPage {
    public var buildings: [Building]
    public var next: String?

    public init(buildings: [Building], next: String? = nil) {
        self.buildings = buildings
        self.next = next
    }
}

// MARK: - The building entity's methods

public struct AddBuilding: RPCCall, Hashable {
    public typealias Reply = Building
    public static let method = RPCMethod("building", "addBuilding")
    public static var isMutation: Bool { true }
    public var id: String
    public var name: String
    public var address: String
    public var residents: [String]
    public init(id: String, name: String, address: String, residents: [String] = []) {
        self.id = id
        self.name = name
        self.address = address
        self.residents = residents
    }
}

public struct UpdateBuilding: RPCCall, Hashable {
    public typealias Reply = Building
    public static let method = RPCMethod("building", "updateBuilding")
    public static var isMutation: Bool { true }
    public var buildingId: String
    public var newName: String?
    public var newAddress: String?
    public var newResidents: [String]?
    public init(buildingId: String, newName: String? = nil, newAddress: String? = nil, newResidents: [String]? = nil) {
        self.buildingId = buildingId
        self.newName = newName
        self.newAddress = newAddress
        self.newResidents = newResidents
    }
}

public struct DeleteBuilding: RPCCall, Hashable {
    public typealias Reply = Deleted
    public static let method = RPCMethod("building", "deleteBuilding")
    public static var isMutation: Bool { true }
    public var buildingId: String
    public init(buildingId: String) { self.buildingId = buildingId }
}

public struct GetBuilding: RPCCall, Hashable {
    public typealias Reply = Building
    public static let method = RPCMethod("building", "getBuilding")
    public var buildingId: String
    public init(buildingId: String) { self.buildingId = buildingId }
}

public struct ListBuildings: RPCListCall, Hashable {
    public typealias Reply = BuildingPage
    public typealias Output = [Building]
    public static let method = RPCMethod("building", "listBuildings")
    public var after: String?
    public var limit: Int?
    public init(after: String? = nil, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }
    public static func output(from reply: BuildingPage) -> [Building] { reply.buildings }
}
