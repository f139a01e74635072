import Foundation
import Testing

@Suite("framing")
struct FramingTests {
    @Test("CRLF terminators are accepted, alone and mixed with LF in one write")
    func crlf() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.send(Wire.createUser("1", "u1", "Ada", "ada@example.com") + "\r\n")
            #expect(try c.expectLine() == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
            try c.send(Wire.getUser("2", "u1") + "\r\n" + Wire.getUser("3", "u1") + "\n" + Wire.getUser("4", "u1") + "\r\n")
            let record = Wire.user("u1", "Ada", "ada@example.com")
            #expect(try c.readLines(3) == ["2", "3", "4"].map { Wire.result($0, "user.getUser", record) })
        }
    }

    @Test("blank lines (LF or CRLF) get no reply")
    func blankLines() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.send("\n\n\r\n\n")
            try c.sendLine(#"{"id":"1","method":"user.listUsers"}"#)
            #expect(try c.expectLine() == #"{"id":"1","method":"user.listUsersResult","param":{"users":[]}}"#)
            try c.send("\r\n" + #"{"id":"2","method":"user.listUsers"}"# + "\n\n\n\r\n" + #"{"id":"3","method":"user.listUsers"}"# + "\r\n\r\n\n")
            #expect(try c.expectLine() == #"{"id":"2","method":"user.listUsersResult","param":{"users":[]}}"#)
            #expect(try c.expectLine() == #"{"id":"3","method":"user.listUsersResult","param":{"users":[]}}"#)
            #expect(c.isSilent(for: 0.3), "blank lines must not be answered")
        }
    }

    @Test("1000 requests pipelined in one write are answered in order")
    func pipelined() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            var batch = ""
            var expected: [String] = []
            for i in 0..<1000 {
                let rid = "r\(i)"
                if i % 2 == 0 {
                    batch += Wire.createUser(rid, "p\(i)", "P\(i)", "p\(i)@example.com") + "\n"
                    expected.append(Wire.createUserResult(rid, "p\(i)", "P\(i)", "p\(i)@example.com"))
                } else {
                    batch += Wire.getUser(rid, "p\(i - 1)") + "\n"
                    expected.append(Wire.result(rid, "user.getUser", Wire.user("p\(i - 1)", "P\(i - 1)", "p\(i - 1)@example.com")))
                }
            }
            try c.send(batch)
            let lines = try c.readLines(1000)
            let ids = try lines.map { try Reply($0).id ?? "?" }
            #expect(ids == (0..<1000).map { "r\($0)" }, "replies out of order")
            let mismatches = zip(lines, expected).enumerated().filter { $0.element.0 != $0.element.1 }
            #expect(mismatches.isEmpty, "first mismatch: \(mismatches.first.map { "#\($0.offset): \($0.element.0)" } ?? "")")
        }
    }

    @Test("a request written one byte at a time is answered")
    func byteAtATime() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            try c.sendOneByteAtATime(Wire.createUser("1", "u1", "Ada", "ada@example.com") + "\n", pauseMicroseconds: 200)
            #expect(try c.expectLine() == Wire.createUserResult("1", "u1", "Ada", "ada@example.com"))
            // Two requests, CRLF, the second one's bytes starting in the same write as the first's end.
            try c.sendOneByteAtATime(Wire.getUser("2", "u1") + "\r\n" + Wire.getUser("3", "u1") + "\r\n")
            let record = Wire.user("u1", "Ada", "ada@example.com")
            #expect(try c.readLines(2) == [Wire.result("2", "user.getUser", record), Wire.result("3", "user.getUser", record)])
        }
    }

    @Test("a request split across writes at every offset is answered")
    func everySplitPoint() throws {
        try withDaemon { daemon in
            let c = try LineClient(port: daemon.port)
            let line = Array((Wire.getUser("s", "nobody") + "\r\n").utf8)
            for split in 1..<line.count {
                try c.sendBytes(Array(line[..<split]))
                usleep(300)
                try c.sendBytes(Array(line[split...]))
                expectError(try c.expectLine(), code: "notFound", id: "s")
            }
        }
    }
}
