import Foundation
import Testing

/// Habits a newcomer brings (JSON-RPC's `params`, a mistyped method) get errors that say what to
/// type instead.
@Suite("newcomer habits")
struct NewcomerTests {
    @Test("unknown top-level keys are invalidRequest naming the key and the right one; seq and crc are accepted")
    func unknownTopLevelKeys() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let params = try c.request(#"{"id":"1","method":"user.getUser","params":{"userId":"u1"}}"#)
            let reply = expectError(params, code: "invalidRequest", id: "1")
            #expect(reply?.errorMessage?.contains(#""params" is not a field of a request; did you mean "param"?"#) == true, "\(params)")
            let jsonrpc = try c.request(#"{"jsonrpc":"2.0","id":"2","method":"system.ping"}"#)
            #expect(expectError(jsonrpc, code: "invalidRequest", id: "2")?.errorMessage?.contains(#""jsonrpc" is not a field"#) == true, "\(jsonrpc)")
            // The keys journal lines carry are part of the wire: a journal line replays as it is.
            let journaled = try c.request(#"{"id":"3","method":"system.ping","seq":7,"crc":"00000000"}"#)
            #expect(journaled.contains("system.pingResult"), "\(journaled)")
        }
    }

    @Test("methodNotFound offers the nearest method and lists system.* too")
    func didYouMean() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let typo = try c.request(#"{"id":"1","method":"user.getUsr","param":{"userId":"u1"}}"#)
            let message = expectError(typo, code: "methodNotFound", id: "1")?.errorMessage ?? ""
            #expect(message.contains(#"did you mean "user.getUser"?"#), "\(message)")
            #expect(message.contains("system.ping") && message.contains("system.stats"), "\(message)")
            let system = try c.request(#"{"id":"2","method":"system.pong"}"#)
            #expect(expectError(system, code: "methodNotFound", id: "2")?.errorMessage?.contains(#"did you mean "system.ping"?"#) == true, "\(system)")
            let entity = try c.request(#"{"id":"3","method":"usr.getUser","param":{"userId":"u1"}}"#)
            #expect(expectError(entity, code: "methodNotFound", id: "3")?.errorMessage?.contains(#"did you mean "user.getUser"?"#) == true, "\(entity)")
        }
    }
}
