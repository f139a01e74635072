import RPCSchema

/// A record as its shard keeps it (`Records`): its fields as bytes in the shard's arena, read back
/// into a value when asked for. A value of three strings took 48 bytes, a heap object for any
/// field past 15 bytes (64 to 80 bytes with malloc's header), and its id again beside it; as
/// bytes, the same user takes its text and a length byte per field.
public protocol StoredRecord: Sendable {
    /// Writes the record's fields, its id aside (the store writes the id).
    func store(into writer: inout RecordWriter)
    /// The record of `id` whose fields `store` wrote.
    init(id: String, from reader: inout RecordReader)
}

/// Where a record's fields are written: lengths as LEB128, text as its UTF-8 bytes.
public struct RecordWriter {
    var bytes: [UInt8]

    public mutating func write(_ string: String) {
        var string = string
        string.withUTF8 { write(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// Text given as its UTF-8 bytes (a plain param's value, as `write(_ string:)` writes it).
    public mutating func write(bytes text: UnsafeRawBufferPointer) {
        write(text.count)
        bytes.append(contentsOf: text)
    }

    /// A count or length (not negative).
    public mutating func write(_ count: Int) {
        var value = UInt(bitPattern: count)
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(truncatingIfNeeded: value))
    }
}

/// Reads what a `RecordWriter` wrote, in the same order. Bytes the store wrote itself, under its
/// lock: a read past them is a bug, and stops the daemon.
public struct RecordReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var position: Int

    public mutating func readCount() -> Int {
        var value: UInt = 0
        var shift: UInt = 0
        while true {
            let byte = bytes[position]
            position += 1
            value |= UInt(byte & 0x7F) << shift
            if byte < 0x80 { return Int(bitPattern: value) }
            shift += 7
        }
    }

    public mutating func readString() -> String {
        let count = readCount()
        defer { position += count }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[position..<(position + count)]), as: UTF8.self)
    }

    /// The next `count`-prefixed bytes, not copied.
    mutating func readBytes() -> UnsafeBufferPointer<UInt8> {
        let count = readCount()
        defer { position += count }
        return UnsafeBufferPointer(rebasing: bytes[position..<(position + count)])
    }
}

extension User: StoredRecord {
    public func store(into writer: inout RecordWriter) {
        writer.write(name)
        writer.write(email)
    }

    /// What `store(into:)` writes for a user with these fields' UTF-8 bytes.
    static func store(name: UnsafeRawBufferPointer, email: UnsafeRawBufferPointer, into writer: inout RecordWriter) {
        writer.write(bytes: name)
        writer.write(bytes: email)
    }

    public init(id: String, from reader: inout RecordReader) {
        self.init(id: id, name: reader.readString(), email: reader.readString())
    }
}

extension User {
    /// What `gather` writes for the user whose stored bytes these are (`Records.drainStored`),
    /// read in place; the gathering fails when a field needs an escape.
    static func gatherStored(id: UnsafeBufferPointer<UInt8>, _ fields: inout RecordReader, into line: inout GatheredBytes) {
        line.literal(#"{"id":""#)
        line.plain(bytes: id)
        line.literal(#"","name":""#)
        line.plain(bytes: fields.readBytes())
        line.literal(#"","email":""#)
        line.plain(bytes: fields.readBytes())
        line.literal(#""}"#)
    }
}

extension Building: StoredRecord {
    public func store(into writer: inout RecordWriter) {
        writer.write(name)
        writer.write(address)
        writer.write(residents.count)
        for resident in residents { writer.write(resident) }
    }

    public init(id: String, from reader: inout RecordReader) {
        let name = reader.readString()
        let address = reader.readString()
        let count = reader.readCount()
        var residents: [String] = []
        residents.reserveCapacity(count)
        for _ in 0..<count { residents.append(reader.readString()) }
        self.init(id: id, name: name, address: address, residents: residents)
    }
}

/// A string kept by id (tests, and any store of plain text).
extension String: StoredRecord {
    public func store(into writer: inout RecordWriter) { writer.write(self) }
    public init(id: String, from reader: inout RecordReader) { self = reader.readString() }
}

extension Int: StoredRecord {
    public func store(into writer: inout RecordWriter) { writer.write(self) }
    public init(id: String, from reader: inout RecordReader) { self = reader.readCount() }
}
