import Testing

@Suite("building methods")
struct BuildingMethodTests {
    /// A daemon with users u1, u2, u3 already created.
    private func withUsers(_ body: (DaemonProcess, LineClient) throws -> Void) throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            for n in 1...3 {
                #expect(try c.request(Wire.createUser("c", "u\(n)", "N\(n)", "n\(n)@example.com")) == Wire.createUserResult("c", "u\(n)", "N\(n)", "n\(n)@example.com"))
            }
            try body(daemon, c)
        }
    }

    @Test("addBuilding, getBuilding; duplicate id conflict; ids are unique per entity only")
    func addAndGet() throws {
        try withUsers { _, c in
            #expect(
                try c.request(#"{"id":"1","method":"building.addBuilding","param":{"id":"b1","name":"HQ","address":"1 Main St","residents":["u1","u2"]}}"#)
                    == #"{"id":"1","method":"building.addBuildingResult","param":{"id":"b1","name":"HQ","address":"1 Main St","residents":["u1","u2"]}}"#)
            #expect(
                try c.request(#"{"id":"2","method":"building.getBuilding","param":{"buildingId":"b1"}}"#)
                    == #"{"id":"2","method":"building.getBuildingResult","param":{"id":"b1","name":"HQ","address":"1 Main St","residents":["u1","u2"]}}"#)
            expectError(try c.request(Wire.addBuilding("3", "b1", "Other", "2 Side St", [])), code: "conflict", id: "3")
            // Empty residents are fine; a building may share an id with a user.
            #expect(
                try c.request(Wire.addBuilding("4", "u1", "Shed", "3 Back St", []))
                    == Wire.result("4", "building.addBuilding", Wire.building("u1", "Shed", "3 Back St", [])))
            expectError(
                try c.request(#"{"id":"5","method":"building.getBuilding","param":{"buildingId":"nope"}}"#),
                code: "notFound", id: "5")
        }
    }

    @Test("addBuilding validation: unknown resident, empty name, missing field are invalidParams")
    func addValidation() throws {
        try withUsers { _, c in
            expectError(try c.request(Wire.addBuilding("1", "b1", "HQ", "1 Main St", ["u1", "ghost"])), code: "invalidParams", id: "1")
            expectError(try c.request(Wire.addBuilding("2", "b1", "", "1 Main St", ["u1"])), code: "invalidParams", id: "2")
            expectError(
                try c.request(#"{"id":"3","method":"building.addBuilding","param":{"id":"b1","name":"HQ","residents":[]}}"#),
                code: "invalidParams", id: "3")
            expectError(
                try c.request(#"{"id":"4","method":"building.addBuilding","param":{"id":"b1","name":"HQ","address":"x","residents":"u1"}}"#),
                code: "invalidParams", id: "4")
            // Nothing was added.
            expectError(
                try c.request(#"{"id":"5","method":"building.getBuilding","param":{"buildingId":"b1"}}"#),
                code: "notFound", id: "5")
        }
    }

    @Test("updateBuilding: name, address, residents; unknown id notFound; bad values invalidParams")
    func update() throws {
        try withUsers { _, c in
            _ = try c.request(Wire.addBuilding("0", "b1", "HQ", "1 Main St", ["u1"]))
            #expect(
                try c.request(#"{"id":"1","method":"building.updateBuilding","param":{"buildingId":"b1","newName":"Tower"}}"#)
                    == Wire.result("1", "building.updateBuilding", Wire.building("b1", "Tower", "1 Main St", ["u1"])))
            #expect(
                try c.request(#"{"id":"2","method":"building.updateBuilding","param":{"buildingId":"b1","newAddress":"9 High St"}}"#)
                    == Wire.result("2", "building.updateBuilding", Wire.building("b1", "Tower", "9 High St", ["u1"])))
            #expect(
                try c.request(#"{"id":"3","method":"building.updateBuilding","param":{"buildingId":"b1","newResidents":["u3","u2"]}}"#)
                    == Wire.result("3", "building.updateBuilding", Wire.building("b1", "Tower", "9 High St", ["u3", "u2"])))
            #expect(
                try c.request(#"{"id":"4","method":"building.updateBuilding","param":{"buildingId":"b1","newName":"T2","newAddress":"A2","newResidents":[]}}"#)
                    == Wire.result("4", "building.updateBuilding", Wire.building("b1", "T2", "A2", [])))
            expectError(
                try c.request(#"{"id":"5","method":"building.updateBuilding","param":{"buildingId":"nope","newName":"X"}}"#),
                code: "notFound", id: "5")
            expectError(
                try c.request(#"{"id":"6","method":"building.updateBuilding","param":{"buildingId":"b1","newName":""}}"#),
                code: "invalidParams", id: "6")
            expectError(
                try c.request(#"{"id":"7","method":"building.updateBuilding","param":{"buildingId":"b1","newResidents":["u1","ghost"]}}"#),
                code: "invalidParams", id: "7")
            // Rejected updates changed nothing.
            #expect(
                try c.request(#"{"id":"8","method":"building.getBuilding","param":{"buildingId":"b1"}}"#)
                    == Wire.result("8", "building.getBuilding", Wire.building("b1", "T2", "A2", [])))
        }
    }

    @Test("deleteBuilding replies {\"deleted\":id}; afterwards notFound")
    func delete() throws {
        try withUsers { _, c in
            _ = try c.request(Wire.addBuilding("0", "b1", "HQ", "1 Main St", ["u1"]))
            #expect(
                try c.request(#"{"id":"1","method":"building.deleteBuilding","param":{"buildingId":"b1"}}"#)
                    == #"{"id":"1","method":"building.deleteBuildingResult","param":{"deleted":"b1"}}"#)
            expectError(
                try c.request(#"{"id":"2","method":"building.getBuilding","param":{"buildingId":"b1"}}"#), code: "notFound", id: "2")
            expectError(
                try c.request(#"{"id":"3","method":"building.deleteBuilding","param":{"buildingId":"b1"}}"#), code: "notFound", id: "3")
            expectError(
                try c.request(#"{"id":"4","method":"building.updateBuilding","param":{"buildingId":"b1","newName":"X"}}"#),
                code: "notFound", id: "4")
            // Deleting a building leaves its residents alone.
            #expect(try c.request(Wire.getUser("5", "u1")) == Wire.result("5", "user.getUser", Wire.user("u1", "N1", "n1@example.com")))
        }
    }

    @Test("deleting a user removes it from every building's residents")
    func deleteUserCascades() throws {
        try withUsers { _, c in
            _ = try c.request(Wire.addBuilding("0", "b1", "One", "1 St", ["u1", "u2"]))
            _ = try c.request(Wire.addBuilding("0", "b2", "Two", "2 St", ["u2", "u1", "u3"]))
            _ = try c.request(Wire.addBuilding("0", "b3", "Three", "3 St", ["u3"]))
            #expect(
                try c.request(#"{"id":"1","method":"user.deleteUser","param":{"userId":"u1"}}"#)
                    == #"{"id":"1","method":"user.deleteUserResult","param":{"deleted":"u1"}}"#)
            #expect(
                try c.request(#"{"id":"2","method":"building.getBuilding","param":{"buildingId":"b1"}}"#)
                    == Wire.result("2", "building.getBuilding", Wire.building("b1", "One", "1 St", ["u2"])))
            #expect(
                try c.request(#"{"id":"3","method":"building.getBuilding","param":{"buildingId":"b2"}}"#)
                    == Wire.result("3", "building.getBuilding", Wire.building("b2", "Two", "2 St", ["u2", "u3"])))
            #expect(
                try c.request(#"{"id":"4","method":"building.getBuilding","param":{"buildingId":"b3"}}"#)
                    == Wire.result("4", "building.getBuilding", Wire.building("b3", "Three", "3 St", ["u3"])))
            #expect(
                try c.request(#"{"id":"5","method":"building.listBuildings"}"#)
                    == #"{"id":"5","method":"building.listBuildingsResult","param":{"buildings":["#
                    + [Wire.building("b1", "One", "1 St", ["u2"]), Wire.building("b2", "Two", "2 St", ["u2", "u3"]),
                       Wire.building("b3", "Three", "3 St", ["u3"])].joined(separator: ",") + "]}}")
            // The deleted user can no longer be made a resident.
            expectError(try c.request(Wire.addBuilding("6", "b4", "Four", "4 St", ["u1"])), code: "invalidParams", id: "6")
        }
    }

    @Test("listBuildings: sorted by id, limit/after paging, next only when more remain")
    func list() throws {
        try withUsers { _, c in
            #expect(
                try c.request(#"{"id":"e","method":"building.listBuildings"}"#)
                    == #"{"id":"e","method":"building.listBuildingsResult","param":{"buildings":[]}}"#)
            for n in [2, 4, 1, 3] {
                _ = try c.request(Wire.addBuilding("a", "b\(n)", "B\(n)", "\(n) St", ["u1"]))
            }
            func page(_ param: String?) throws -> Reply {
                let line = param.map { #"{"id":"p","method":"building.listBuildings","param":\#($0)}"# }
                    ?? #"{"id":"p","method":"building.listBuildings"}"#
                let reply = try Reply(try c.request(line))
                #expect(reply.method == "building.listBuildingsResult" && reply.id == "p", "\(reply.line)")
                return reply
            }
            var r = try page(nil)
            #expect(r.listIDs("buildings") == ["b1", "b2", "b3", "b4"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"limit":3}"#)
            #expect(r.listIDs("buildings") == ["b1", "b2", "b3"] && r.next == "b3", "\(r.line)")
            r = try page(#"{"after":"b3","limit":3}"#)
            #expect(r.listIDs("buildings") == ["b4"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"after":"b1"}"#)
            #expect(r.listIDs("buildings") == ["b2", "b3", "b4"] && !r.hasNext, "\(r.line)")
            r = try page(#"{"limit":4}"#)
            #expect(r.listIDs("buildings") == ["b1", "b2", "b3", "b4"] && !r.hasNext, "\(r.line)")
        }
    }
}
