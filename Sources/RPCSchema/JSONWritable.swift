/// A value that writes its own JSON text, straight into an output buffer.
///
/// Every `Encodable` value can be written through `JSONValueEncoder` (`JSONWriter.write(encodable:)`);
/// the records replies carry most often write themselves directly instead, which skips building a
/// `JSONValue` tree per reply. A unit test checks each direct writer against its `Encodable` output.
public protocol JSONWritable {
    func writeJSON(into out: inout [UInt8])
}

extension JSONWriter {
    /// Writes an `Encodable` value through `JSONValueEncoder`; nil, or the encoding error.
    public static func write<T: Encodable>(encodable value: T, into out: inout [UInt8]) -> (any Error)? {
        do {
            write(try JSONValueEncoder().encode(value), into: &out)
            return nil
        } catch {
            return error
        }
    }

    /// `"key":` — the key must need no escaping (it is a Swift identifier).
    @inline(__always)
    static func writeKey(_ key: StaticString, into out: inout [UInt8]) {
        out.append(0x22)
        out.append(contentsOf: UnsafeBufferPointer(start: key.utf8Start, count: key.utf8CodeUnitCount))
        out.append(contentsOf: [0x22, 0x3A])
    }

    /// `{"id":"ID","name":"NAME` (no closing quote): how a user and a building begin.
    @inline(__always)
    static func beginRecord(id: String, name: String, into out: inout [UInt8]) {
        appendASCII(#"{"id":""#, into: &out)
        appendEscaped(id, into: &out)
        appendASCII(#"","name":""#, into: &out)
        appendEscaped(name, into: &out)
    }

    static func writeStrings(_ strings: [String], into out: inout [UInt8]) {
        out.append(0x5B)
        for (i, s) in strings.enumerated() {
            if i > 0 { out.append(0x2C) }
            writeString(s, into: &out)
        }
        out.append(0x5D)
    }
}

extension User: JSONWritable {
    // Punctuation, keys and the quotes around each value in one literal apiece: an append costs
    // about as much for one byte as for twenty, and a get writes one of these per reply.
    public func writeJSON(into out: inout [UInt8]) {
        guard !JSONWriter.gathered(into: &out, { gather(into: &$0) }) else { return }
        JSONWriter.beginRecord(id: id, name: name, into: &out)
        JSONWriter.appendASCII(#"","email":""#, into: &out)
        JSONWriter.appendEscaped(email, into: &out)
        JSONWriter.appendASCII(#""}"#, into: &out)
    }

    /// `writeJSON` into a gathering (which fails when a field needs an escape).
    package func gather(into line: inout GatheredBytes) {
        line.literal(#"{"id":""#)
        line.plain(id)
        line.literal(#"","name":""#)
        line.plain(name)
        line.literal(#"","email":""#)
        line.plain(email)
        line.literal(#""}"#)
    }
}

extension Building: JSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        JSONWriter.beginRecord(id: id, name: name, into: &out)
        JSONWriter.appendASCII(#"","address":""#, into: &out)
        JSONWriter.appendEscaped(address, into: &out)
        JSONWriter.appendASCII(#"","residents":"#, into: &out)
        JSONWriter.writeStrings(residents, into: &out)
        out.append(0x7D)
    }
}

extension Deleted: JSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        JSONWriter.appendASCII(#"{"deleted":""#, into: &out)
        JSONWriter.appendEscaped(deleted, into: &out)
        JSONWriter.appendASCII(#""}"#, into: &out)
    }
}

extension UserPage: JSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        JSONWriter.writePage("users", users, next: next, into: &out)
    }
}

extension BuildingPage: JSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        JSONWriter.writePage("buildings", buildings, next: next, into: &out)
    }
}

extension JSONWriter {
    /// `{"<key>":[…],"next":"…"}` (`next` only when there is one), the shape of every list reply.
    static func writePage(_ key: StaticString, _ items: [some JSONWritable], next: String?, into out: inout [UInt8]) {
        out.append(0x7B)
        writeKey(key, into: &out)
        out.append(0x5B)
        for (i, item) in items.enumerated() {
            if i > 0 { out.append(0x2C) }
            item.writeJSON(into: &out)
        }
        out.append(0x5D)
        if let next {
            out.append(0x2C)
            writeKey("next", into: &out)
            writeString(next, into: &out)
        }
        out.append(0x7D)
    }
}
