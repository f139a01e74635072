import Testing
@testable import RPCTransport

@Suite struct SocketAddressTests {
    @Test func parsesAndPrints() throws {
        #expect(try #require(SocketAddress(parsing: "127.0.0.1:7878")).description == "127.0.0.1:7878")
        #expect(try #require(SocketAddress(parsing: "[::1]:80")).description == "[::1]:80")
        #expect(try #require(SocketAddress(parsing: "localhost:0")).description == "127.0.0.1:0")
        #expect(try #require(SocketAddress(parsing: "*:9")).description == "0.0.0.0:9")
    }

    @Test func rejectsWhatItCannotBind() {
        for bad in ["", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "example.com:80", "::1:80", "1.2.3:4", "127.0.0.1:-1"] {
            #expect(SocketAddress(parsing: bad) == nil, "\(bad)")
        }
    }
}
