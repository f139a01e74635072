import Testing
@testable import RPCTransport

@Suite struct OutboundBufferTests {
    /// A scripted peer: each write takes at most the next scripted amount (nil = would block).
    final class ScriptedPeer {
        var script: [Int?]
        var received: [UInt8] = []
        init(_ script: [Int?]) { self.script = script }
        func write(_ bytes: UnsafeRawBufferPointer) -> IOResult<Int> {
            guard !script.isEmpty, let take = script.removeFirst() else { return .wouldBlock }
            let n = min(take, bytes.count)
            received += bytes.prefix(n)
            return .processed(n)
        }
    }

    @Test func partialWritesKeepOrderAndResumeWhereTheyStopped() {
        var buffer = OutboundBuffer()
        buffer.append(Array("hello ".utf8))
        buffer.append(Array("world\n".utf8))
        let peer = ScriptedPeer([3, 2, nil, 100])
        #expect(buffer.flush(using: peer.write) == .pending)
        #expect(buffer.count == 7)
        buffer.append(Array("again\n".utf8))
        #expect(buffer.flush(using: peer.write) == .flushed)
        #expect(buffer.isEmpty)
        #expect(String(decoding: peer.received, as: UTF8.self) == "hello world\nagain\n")
    }

    @Test func errorsPropagateAndKeepUnwrittenBytes() {
        struct Broken: Error {}
        var buffer = OutboundBuffer()
        buffer.append(Array("abc".utf8))
        #expect(throws: Broken.self) {
            try buffer.flush { _ throws(Broken) -> IOResult<Int> in throw Broken() }
        }
        #expect(buffer.count == 3)
    }

    @Test func appendInPlace() {
        var buffer = OutboundBuffer()
        buffer.append { $0 += Array("xyz".utf8) }
        #expect(buffer.count == 3)
        let peer = ScriptedPeer([1, 1, 1])
        #expect(buffer.flush(using: peer.write) == .flushed)
        #expect(peer.received == Array("xyz".utf8))
    }
}
