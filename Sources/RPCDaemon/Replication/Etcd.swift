import Foundation
import RPCSchema
import RPCTransport

/// What went wrong talking to etcd, in one line.
struct EtcdError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A key of etcd's as the v3 JSON gateway gives it: key and value decoded from base64.
struct EtcdKeyValue: Sendable, Equatable {
    var key: String
    var value: [UInt8]
    /// The lease the key is bound to (0: none).
    var lease: Int64
}

/// etcd's v3 JSON gateway (`/v3/lease/…`, `/v3/kv/…`) over HTTP/1.1: one connection per call,
/// made by `Exchange` on the caller's thread, so it is used only from the coordinator's queue.
/// The endpoints are tried in order from the last one that answered; keys and values travel in
/// base64, 64-bit numbers as strings, as the gateway writes them.
final class EtcdClient: @unchecked Sendable {
    // @unchecked: `preferred` is touched only on the coordinator's queue.
    let endpoints: [(text: String, address: SocketAddress)]
    let timeout: Double
    private var preferred = 0
    /// An answer larger than this is refused (the range of a cluster's members is a few KiB).
    static let maxAnswerBytes = 4 << 20

    init(endpoints: [(text: String, address: SocketAddress)], timeout: Double) {
        self.endpoints = endpoints
        self.timeout = timeout
    }

    /// `etcd:HOST:PORT[,HOST:PORT…]`: the endpoints, or nil when the text is not of that form.
    static func parse(_ text: String) -> [(text: String, address: SocketAddress)]? {
        guard text.hasPrefix("etcd:") else { return nil }
        let list = text.dropFirst(5).split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        var endpoints: [(text: String, address: SocketAddress)] = []
        for item in list {
            guard let address = SocketAddress(parsing: item), address.family != AF_UNIX else { return nil }
            endpoints.append((item, address))
        }
        return endpoints.isEmpty ? nil : endpoints
    }

    // MARK: - Leases

    /// A new lease of `ttl` seconds: its id.
    func grant(ttl: Int) throws(EtcdError) -> Int64 {
        let answer = try post("/v3/lease/grant", ["TTL": .number(ttl)])
        guard let id = Self.int64(answer[member: "ID"]), id != 0 else { throw EtcdError("etcd granted no lease: \(answer)") }
        return id
    }

    /// Renews `lease`: the seconds it has left (0: it has expired, and is gone).
    func keepAlive(_ lease: Int64) throws(EtcdError) -> Int {
        let answer = try post("/v3/lease/keepalive", ["ID": .string(String(lease))])
        let result = answer[member: "result"] ?? answer
        return Int(clamping: Self.int64(result[member: "TTL"]) ?? 0)
    }

    func revoke(_ lease: Int64) throws(EtcdError) {
        _ = try post("/v3/lease/revoke", ["ID": .string(String(lease))])
    }

    // MARK: - Keys

    func put(_ key: String, _ value: [UInt8], lease: Int64) throws(EtcdError) {
        var body: JSONObject = ["key": .string(Self.base64(Array(key.utf8))), "value": .string(Self.base64(value))]
        if lease != 0 { body.pairs.append(("lease", .string(String(lease)))) }
        _ = try post("/v3/kv/put", .object(body))
    }

    /// Writes `key` only if it does not exist; true if this call wrote it.
    func create(_ key: String, _ value: [UInt8], lease: Int64) throws(EtcdError) -> Bool {
        let encodedKey = JSONValue.string(Self.base64(Array(key.utf8)))
        var put: JSONObject = ["key": encodedKey, "value": .string(Self.base64(value))]
        if lease != 0 { put.pairs.append(("lease", .string(String(lease)))) }
        let answer = try post(
            "/v3/kv/txn",
            [
                "compare": [["key": encodedKey, "result": "EQUAL", "target": "CREATE", "create_revision": "0"]],
                "success": [["request_put": .object(put)]],
            ])
        return answer[member: "succeeded"]?.boolValue ?? false
    }

    /// The key, or every key under it when `prefix`.
    func range(_ key: String, prefix: Bool = false) throws(EtcdError) -> [EtcdKeyValue] {
        var body: JSONObject = ["key": .string(Self.base64(Array(key.utf8)))]
        if prefix { body.pairs.append(("range_end", .string(Self.base64(Self.prefixEnd(Array(key.utf8)))))) }
        let answer = try post("/v3/kv/range", .object(body))
        return (answer[member: "kvs"]?.arrayValue ?? []).compactMap { item in
            guard let key = item[member: "key"]?.stringValue.flatMap(Self.unbase64), let text = String(validating: key, as: UTF8.self) else { return nil }
            return EtcdKeyValue(key: text, value: item[member: "value"]?.stringValue.flatMap(Self.unbase64) ?? [], lease: Self.int64(item[member: "lease"]) ?? 0)
        }
    }

    func delete(_ key: String) throws(EtcdError) {
        _ = try post("/v3/kv/deleterange", ["key": .string(Self.base64(Array(key.utf8)))])
    }

    // MARK: - HTTP

    /// POSTs `body` to `path` on the first endpoint that answers.
    private func post(_ path: String, _ body: JSONValue) throws(EtcdError) -> JSONValue {
        var problems: [String] = []
        for step in 0..<endpoints.count {
            let index = (preferred + step) % endpoints.count
            do {
                let answer = try post(path, body, to: endpoints[index])
                preferred = index
                return answer
            } catch {
                problems.append("\(endpoints[index].text): \(error.description)")
            }
        }
        throw EtcdError(problems.joined(separator: "; "))
    }

    private func post(_ path: String, _ body: JSONValue, to endpoint: (text: String, address: SocketAddress)) throws(EtcdError) -> JSONValue {
        var json: [UInt8] = []
        JSONWriter.write(body, into: &json)
        var request = Array(
            "POST \(path) HTTP/1.1\r\nHost: \(endpoint.text)\r\nContent-Type: application/json\r\nContent-Length: \(json.count)\r\nConnection: close\r\n\r\n".utf8)
        request += json
        let answer: [UInt8]
        do {
            answer = try Exchange.run(with: endpoint.address, sending: request, timeout: timeout, maxBytes: Self.maxAnswerBytes)
        } catch {
            throw EtcdError("\(error)")
        }
        let (status, payload) = try Self.response(answer)
        let value: JSONValue
        do {
            value = try JSONParser.parse(payload)
        } catch {
            throw EtcdError("HTTP \(status) with a body that is not JSON (\(error))")
        }
        guard status == 200 else {
            let message = value[member: "message"]?.stringValue ?? value[member: "error"]?.stringValue ?? "\(value)"
            throw EtcdError("HTTP \(status): \(message)")
        }
        return value
    }

    /// The status and body of an HTTP/1.1 response read to its end (chunked or not).
    static func response(_ bytes: [UInt8]) throws(EtcdError) -> (status: Int, body: [UInt8]) {
        let separator = Array("\r\n\r\n".utf8)
        guard let end = bytes.firstRange(of: separator) else { throw EtcdError("the answer has no HTTP header (\(bytes.count) bytes)") }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        let statusParts = lines.first?.split(separator: " ") ?? []
        guard statusParts.count >= 2, statusParts[0].hasPrefix("HTTP/1."), let status = Int(statusParts[1]) else {
            throw EtcdError("the answer does not start with an HTTP status line")
        }
        let chunked = lines.dropFirst().contains { $0.lowercased().hasPrefix("transfer-encoding:") && $0.lowercased().contains("chunked") }
        let rest = Array(bytes[end.upperBound...])
        return (status, chunked ? try dechunk(rest) : rest)
    }

    /// A chunked body joined (the trailer ignored).
    static func dechunk(_ bytes: [UInt8]) throws(EtcdError) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while true {
            guard let lineEnd = bytes[index...].firstRange(of: Array("\r\n".utf8)) else { throw EtcdError("a chunked answer ends early") }
            let sizeText = String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size >= 0 else {
                throw EtcdError("a chunk size is not hexadecimal")
            }
            if size == 0 { return out }
            let start = lineEnd.upperBound
            guard size <= bytes.count - start else { throw EtcdError("a chunk is longer than the answer") }
            out += bytes[start..<(start + size)]
            index = start + size
            if bytes[index...].starts(with: Array("\r\n".utf8)) { index += 2 }
        }
    }

    // MARK: - Encodings

    static func base64(_ bytes: [UInt8]) -> String { Data(bytes).base64EncodedString() }

    static func unbase64(_ text: String) -> [UInt8]? { Data(base64Encoded: text).map { Array($0) } }

    /// The gateway writes 64-bit numbers as strings.
    static func int64(_ value: JSONValue?) -> Int64? {
        switch value {
        case .string(let text)?: return Int64(text)
        case .number(let text)?: return Int64(text)
        default: return nil
        }
    }

    /// The end of the range of every key that starts with `prefix` (its last byte plus one).
    static func prefixEnd(_ prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return [0]
    }
}

extension JSONValue {
    /// A member of an object (nil for anything else).
    fileprivate subscript(member key: String) -> JSONValue? { objectValue?[key] }
}
