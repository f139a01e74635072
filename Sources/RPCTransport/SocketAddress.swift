#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An IPv4 or IPv6 address with a port, or a Unix stream socket's path.
public enum SocketAddress: Sendable, CustomStringConvertible {
    case ipv4(sockaddr_in)
    case ipv6(sockaddr_in6)
    /// A filesystem path (`unix:/run/rpcd/rpcd.sock`).
    case unix(String)

    /// The longest Unix socket path (`sun_path` less its NUL).
    public static var maxUnixPathBytes: Int { MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1 }

    /// The forms `init(parsing:)` accepts, for messages that reject another.
    public static let acceptedForms =
        "HOST:PORT where HOST is an IPv4 address (127.0.0.1), an [IPv6] address ([::1]), localhost, "
        + "or * or nothing (*:7878, :7878) for every IPv4 interface; PORT is 0-65535 (0 picks a free one); "
        + "or unix:PATH for a Unix socket (unix:/run/rpcd/rpcd.sock)"

    /// Parses `HOST:PORT`, where HOST is an IPv4 literal, `[IPv6]` literal, `localhost`, or `*` or
    /// empty (all IPv4 interfaces). Returns nil with no guessing: names other than localhost are not resolved.
    public init?(parsing text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard path.hasPrefix("/") || path.hasPrefix("."), path.utf8.count <= Self.maxUnixPathBytes, !path.utf8.contains(0) else {
                return nil
            }
            self = .unix(path)
            return
        }
        guard let colon = text.lastIndex(of: ":") else { return nil }
        var host = String(text[..<colon])
        guard let port = UInt16(text[text.index(after: colon)...]) else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
            var address = sockaddr_in6()
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else { return nil }
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            self = .ipv6(address)
            return
        }
        if host == "localhost" { host = "127.0.0.1" }
        if host == "*" || host.isEmpty { host = "0.0.0.0" }
        var address = sockaddr_in()
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return nil }
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        self = .ipv4(address)
    }

    init?(storage: sockaddr_storage) {
        var storage = storage
        switch Int32(storage.ss_family) {
        case AF_INET:
            self = withUnsafeBytes(of: &storage) { .ipv4($0.load(as: sockaddr_in.self)) }
        case AF_INET6:
            self = withUnsafeBytes(of: &storage) { .ipv6($0.load(as: sockaddr_in6.self)) }
        case AF_UNIX:
            let path = withUnsafeBytes(of: &storage) { raw -> String in
                let address = raw.load(as: sockaddr_un.self)
                return withUnsafeBytes(of: address.sun_path) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            }
            self = .unix(path)
        default:
            return nil
        }
    }

    public var family: Int32 {
        switch self {
        case .ipv4: return AF_INET
        case .ipv6: return AF_INET6
        case .unix: return AF_UNIX
        }
    }

    public var port: UInt16 {
        switch self {
        case .ipv4(let address): return UInt16(bigEndian: address.sin_port)
        case .ipv6(let address): return UInt16(bigEndian: address.sin6_port)
        case .unix: return 0
        }
    }

    /// A loopback address (127.0.0.0/8, ::1, or ::ffff:127.x): only this machine can connect.
    public var isLoopback: Bool {
        switch self {
        case .ipv4(let address):
            return UInt32(bigEndian: address.sin_addr.s_addr) >> 24 == 127
        case .ipv6:
            return host == "::1" || host.hasPrefix("::ffff:127.")
        case .unix:
            return true  // only this machine, and its file mode says who
        }
    }

    /// Whether a connection to `other` may reach a listener bound to this address (same port; same
    /// host, or this one every interface and `other` this machine's loopback or the same wildcard).
    /// Port 0 (a free port, picked at bind) matches nothing.
    public func mayBe(_ other: SocketAddress) -> Bool {
        if case .unix(let path) = self, case .unix(let otherPath) = other { return path.utf8.elementsEqual(otherPath.utf8) }
        guard family != AF_UNIX, other.family != AF_UNIX, port != 0, port == other.port else { return false }
        return host == other.host || (isWildcard && (other.isLoopback || other.isWildcard))
    }

    /// Every interface (0.0.0.0 or ::).
    public var isWildcard: Bool { host == "0.0.0.0" || host == "::" }

    /// The host part as text: `127.0.0.1`, `::1`.
    public var host: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch self {
        case .ipv4(var address):
            _ = inet_ntop(AF_INET, &address.sin_addr, &buffer, socklen_t(buffer.count))
        case .ipv6(var address):
            _ = inet_ntop(AF_INET6, &address.sin6_addr, &buffer, socklen_t(buffer.count))
        case .unix(let path):
            return path
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `127.0.0.1:7878`, `[::1]:7878`
    public var description: String {
        switch self {
        case .ipv4: return "\(host):\(port)"
        case .ipv6: return "[\(host)]:\(port)"
        case .unix(let path): return "unix:\(path)"
        }
    }
}
