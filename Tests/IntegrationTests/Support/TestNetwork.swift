import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A network namespace this test creates, joined to the host by a veth pair, so a peer with a
/// non-loopback address exists without touching any outside network. Addresses come from
/// 198.18.0.0/15 (RFC 2544, benchmarking: never routed). Root only; `nil` with the reason otherwise.
final class TestNetwork {
    let namespace: String
    let hostAddress: String
    let peerAddress: String
    private let hostLink: String

    static func make() -> (TestNetwork?, String) {
        guard getuid() == 0 else { return (nil, "needs root to create a network namespace (ip netns)") }
        guard FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip") || FileManager.default.isExecutableFile(atPath: "/sbin/ip") else {
            return (nil, "needs iproute2 (ip)")
        }
        let n = Int(getpid() % 200) + Int.random(in: 0..<50)
        let network = TestNetwork(n: n)
        if let failure = network.setUp() {
            network.tearDown()
            return (nil, failure)
        }
        return (network, "")
    }

    private init(n: Int) {
        namespace = "rpcdt\(n)"
        hostLink = "rpcdh\(n)"
        hostAddress = "198.18.\(n).1"
        peerAddress = "198.18.\(n).2"
    }

    deinit { tearDown() }

    private func setUp() -> String? {
        let peerLink = "rpcdp" + hostLink.dropFirst(5)
        let steps = [
            ["netns", "add", namespace],
            ["link", "add", hostLink, "type", "veth", "peer", "name", peerLink],
            ["link", "set", peerLink, "netns", namespace],
            ["addr", "add", "\(hostAddress)/24", "dev", hostLink],
            ["link", "set", hostLink, "up"],
            ["netns", "exec", namespace, "ip", "addr", "add", "\(peerAddress)/24", "dev", peerLink],
            ["netns", "exec", namespace, "ip", "link", "set", peerLink, "up"],
            ["netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
        ]
        for step in steps {
            guard let out = try? runProcess(URL(fileURLWithPath: "/usr/sbin/ip"), step, timeout: 10), out.status == 0 else {
                return "could not set up the test network (ip \(step.joined(separator: " ")))"
            }
        }
        return nil
    }

    func tearDown() {
        _ = try? runProcess(URL(fileURLWithPath: "/usr/sbin/ip"), ["netns", "del", namespace], timeout: 10)
        _ = try? runProcess(URL(fileURLWithPath: "/usr/sbin/ip"), ["link", "del", hostLink], timeout: 10)
    }

    /// Sends `lines` from inside the namespace to HOST:PORT with nc and returns what came back.
    func request(host: String, port: Int, _ lines: String) throws -> String {
        let out = try runProcess(
            URL(fileURLWithPath: "/usr/sbin/ip"), ["netns", "exec", namespace, "nc", "-N", "-w", "3", host, "\(port)"],
            stdin: lines + "\n", timeout: 10)
        return out.stdout
    }
}
