import Testing
@testable import RPCDaemon

@Suite("CrossProtocol: HTTP lines are recognised, requests are not")
struct CrossProtocolTests {
    static func isHTTP(_ text: String) -> Bool { Array(text.utf8).withUnsafeBytes { CrossProtocol.isHTTP($0) } }

    @Test("request lines and browser headers")
    func http() {
        for line in [
            "GET / HTTP/1.1", "POST / HTTP/1.1", "OPTIONS * HTTP/1.1", "PUT /x", "GET /favicon.ico HTTP/1.0", "Host: 127.0.0.1:7878",
            "host: x", "Origin: http://evil.example", "Content-Type: text/plain", "User-Agent: curl/8.5", "CONNECT example.com:443 HTTP/1.1",
        ] {
            #expect(Self.isHTTP(line), "\(line)")
        }
    }

    @Test("requests, typos and other text")
    func notHTTP() {
        for line in [
            #"{"id":"1","method":"system.ping"}"#, "  {\"id\":\"1\"}", "hello", "help me", "id: 1", "x", "", "GET", "get / http/1.1 lower",
        ] {
            #expect(!Self.isHTTP(line), "\(line)")
        }
    }

    @Test("the 400 answer's Content-Length is its body's length")
    func badRequest() {
        let text = String(decoding: CrossProtocol.badRequest(listener: "[::1]:7878"), as: UTF8.self)
        let parts = text.components(separatedBy: "\r\n\r\n")
        #expect(parts.count == 2 && text.contains("Content-Length: \(parts[1].utf8.count)\r\n"))
        #expect(parts[1].contains("nc ::1 7878"))
    }
}
