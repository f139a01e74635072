/// Golden wire lines (canonical form), written out the way the daemon must write them: keys in
/// the order id, method, param; records as {id,name,email} and {id,name,address,residents}.
enum Wire {
    static func user(_ id: String, _ name: String, _ email: String) -> String {
        #"{"id":"\#(id)","name":"\#(name)","email":"\#(email)"}"#
    }

    static func building(_ id: String, _ name: String, _ address: String, _ residents: [String]) -> String {
        let list = residents.map { "\"\($0)\"" }.joined(separator: ",")
        return #"{"id":"\#(id)","name":"\#(name)","address":"\#(address)","residents":[\#(list)]}"#
    }

    static func request(_ id: String, _ method: String, _ param: String? = nil) -> String {
        if let param { return #"{"id":"\#(id)","method":"\#(method)","param":\#(param)}"# }
        return #"{"id":"\#(id)","method":"\#(method)"}"#
    }

    static func result(_ id: String, _ method: String, _ param: String) -> String {
        #"{"id":"\#(id)","method":"\#(method)Result","param":\#(param)}"#
    }

    static func createUser(_ rid: String, _ id: String, _ name: String, _ email: String) -> String {
        request(rid, "user.createUser", user(id, name, email))
    }

    static func createUserResult(_ rid: String, _ id: String, _ name: String, _ email: String) -> String {
        result(rid, "user.createUser", user(id, name, email))
    }

    static func getUser(_ rid: String, _ userId: String) -> String {
        request(rid, "user.getUser", #"{"userId":"\#(userId)"}"#)
    }

    static func addBuilding(_ rid: String, _ id: String, _ name: String, _ address: String, _ residents: [String]) -> String {
        request(rid, "building.addBuilding", building(id, name, address, residents))
    }
}
