import RPCSchema

/// The `building` entity: its rules and the handlers of its methods.
enum BuildingMethods {
    static func register(in table: inout MethodTable<Entities>) {
        table.on(AddBuilding.self, touches: { .building($0.id) }) { state, p, key throws(RPCError) in
            try Rules.requireID(p.id, "id")
            try Rules.requireName(p.name)
            let residents = try residents(p.residents, in: state)
            let building = Building(id: p.id, name: p.name, address: p.address, residents: residents)
            guard state.buildings.insertNew(building, key: key) else {
                throw .conflict("building \"\(p.id)\" exists already; pick another id or use building.updateBuilding")
            }
            return building
        }
        table.on(UpdateBuilding.self, touches: { .building($0.buildingId) }) { state, p, key throws(RPCError) in
            guard var building = state.buildings[key] else { throw Rules.unknownBuilding(p.buildingId) }
            if let name = p.newName {
                try Rules.requireName(name)
                building.name = name
            }
            if let address = p.newAddress { building.address = address }
            if let newResidents = p.newResidents { building.residents = try residents(newResidents, in: state) }
            state.buildings.insert(building, key: key)
            return building
        }
        table.on(DeleteBuilding.self, touches: { .building($0.buildingId) }) { state, p, key throws(RPCError) in
            guard state.buildings.remove(key: key) != nil else { throw Rules.unknownBuilding(p.buildingId) }
            return Deleted(deleted: p.buildingId)
        }
        table.on(GetBuilding.self) { state, p throws(RPCError) in
            guard let building = state.buildings[p.buildingId] else { throw Rules.unknownBuilding(p.buildingId) }
            return building
        }
        table.on(ListBuildings.self) { state, p throws(RPCError) in
            try Rules.requireLimit(p.limit)
            let page = state.buildings.page(after: p.after, limit: p.limit)
            return BuildingPage(buildings: page.records, next: page.next)
        }
    }

    /// Residents must be existing users; a repeated id (the same UTF-8 bytes) is kept once, in
    /// first-seen order.
    private static func residents(_ ids: [String], in state: Entities) throws(RPCError) -> [String] {
        var seen = Set<ExactID>()
        var result: [String] = []
        for id in ids where seen.insert(ExactID(id)).inserted {
            guard state.users.contains(id) else {
                throw .invalidParams("resident \"\(id)\" is not a user; create it with user.createUser first")
            }
            result.append(id)
        }
        return result
    }
}
