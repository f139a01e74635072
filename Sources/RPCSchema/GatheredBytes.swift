/// A few pieces of a line written to the stack, then appended to an output buffer at once.
///
/// `Array.append(contentsOf:)` costs about 90 instructions before its copy, whatever the length,
/// and a reply line or a record is a dozen short pieces: literals and strings that need no escape.
/// `JSONWriter.gathered` writes them here and appends once; a piece that needs an escape, or more
/// bytes than fit, makes it give up, and the caller writes the same bytes the ordinary way.
/// Package-internal: the snapshot writer gathers its record lines too.
package struct GatheredBytes: ~Copyable {
    static var capacity: Int { 256 }
    private let base: UnsafeMutableRawPointer
    private(set) var count = 0
    /// A piece did not fit or needed an escape: nothing gathered is appended.
    private(set) var failed = false

    fileprivate init(base: UnsafeMutableRawPointer) { self.base = base }

    @inline(__always)
    package mutating func literal(_ s: StaticString) {
        bytes(UnsafeRawBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    @inline(__always)
    package mutating func byte(_ b: UInt8) {
        guard !failed, count < Self.capacity else { return failed = true }
        base.storeBytes(of: b, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    /// Bytes written as they are (already JSON text).
    @inline(__always)
    package mutating func raw(_ piece: UnsafeRawBufferPointer) { bytes(piece) }

    /// `s` as the body of a JSON string, when it needs no escape (else the gathering fails).
    @inline(__always)
    package mutating func plain(_ s: String) {
        let done: Void? = s.utf8.withContiguousStorageIfAvailable { utf8 in
            guard JSONWriter.plainEnd(utf8, from: 0) == utf8.count else { return failed = true }
            bytes(UnsafeRawBufferPointer(utf8))
        }
        if done == nil { failed = true }
    }

    /// UTF-8 `bytes` as the body of a JSON string, when they need no escape (else the gathering fails).
    @inline(__always)
    package mutating func plain(bytes: UnsafeBufferPointer<UInt8>) {
        guard JSONWriter.plainEnd(bytes, from: 0) == bytes.count else { return failed = true }
        self.bytes(UnsafeRawBufferPointer(bytes))
    }

    /// `value` as `JSONWriter.write` writes it, when no string in it needs an escape.
    package mutating func value(_ value: JSONValue) {
        guard !failed else { return }
        switch value {
        case .null: literal("null")
        case .bool(let b): literal(b ? "true" : "false")
        case .number(let text): plain(text)  // a parsed or written number's text: digits, sign, point, exponent
        case .string(let s):
            byte(0x22)
            plain(s)
            byte(0x22)
        case .array(let items):
            byte(0x5B)
            for (index, item) in items.enumerated() where !failed {
                if index > 0 { byte(0x2C) }
                self.value(item)
            }
            byte(0x5D)
        case .object(let object):
            byte(0x7B)
            for (index, pair) in object.pairs.enumerated() where !failed {
                if index > 0 { byte(0x2C) }
                byte(0x22)
                plain(pair.key)
                literal(#"":"#)
                self.value(pair.value)
            }
            byte(0x7D)
        }
    }

    @inline(__always)
    private mutating func bytes(_ piece: UnsafeRawBufferPointer) {
        guard !failed, piece.count <= Self.capacity - count else { return failed = true }
        if let source = piece.baseAddress { (base + count).copyMemory(from: source, byteCount: piece.count) }
        count += piece.count
    }

    fileprivate func append(to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeRawBufferPointer(start: base, count: count))
    }
}

extension JSONWriter {
    /// Runs `body` over a stack buffer and appends what it wrote to `out` in one go; false (and
    /// `out` unchanged) when a piece did not fit or needed an escape.
    @inline(__always)
    package static func gathered(into out: inout [UInt8], _ body: (inout GatheredBytes) -> Void) -> Bool {
        withUnsafeTemporaryAllocation(byteCount: GatheredBytes.capacity, alignment: 8) { buffer in
            guard let base = buffer.baseAddress else { return false }
            var gathered = GatheredBytes(base: base)
            body(&gathered)
            guard !gathered.failed else { return false }
            gathered.append(to: &out)
            return true
        }
    }
}
