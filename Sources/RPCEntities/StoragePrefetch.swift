import CRPCLinux
import RPCSchema

/// A record whose strings a snapshot asks the CPU for a few records ahead of writing them
/// (`Records.drain`). A snapshot reads every record once, and a million records' strings are
/// nowhere near the cache: copying a record out retained each string, an atomic increment on a
/// line not yet loaded, which waits for that line before the next can start (two thirds of a
/// snapshot's time, `perf`). Asked for ahead, the lines arrive together.
protocol PrefetchedRecord {
    /// Where the record's `String` fields sit in it (`MemoryLayout.offset(of:)`).
    static var stringOffsets: [Int] { get }
}

extension PrefetchedRecord {
    /// Asks for the storage of the strings of the record at `record` (read as raw words, never
    /// through a copy).
    @inline(__always)
    static func prefetchStorage(of record: UnsafeRawPointer) {
        for offset in stringOffsets { prefetchStringStorage(record + offset) }
    }
}

/// Asks the CPU for the heap storage of the `String` at `string`, read as raw words: no retain,
/// and no read of the storage itself. On 64-bit platforms a string's second word is its storage
/// object's address under a 4-bit discriminator that is 0 for native heap storage; any other
/// string (bytes inline, immortal literal) asks for nothing. A hint only: were the layout ever
/// another, the address asked for would help nothing and harm nothing (a prefetch never faults).
@inline(__always)
func prefetchStringStorage(_ string: UnsafeRawPointer) {
    #if arch(x86_64) || arch(arm64)
    let object = string.load(fromByteOffset: MemoryLayout<UInt>.size, as: UInt.self)
    guard object >> 60 == 0 else { return }
    crpc_prefetch(UnsafeRawPointer(bitPattern: object))
    // The bytes start 32 bytes in: often the next cache line.
    crpc_prefetch(UnsafeRawPointer(bitPattern: object &+ 32))
    #endif
}

extension User: PrefetchedRecord {
    static let stringOffsets = [\User.id, \User.name, \User.email].compactMap { MemoryLayout<User>.offset(of: $0) }
}

extension Building: PrefetchedRecord {
    static let stringOffsets = [\Building.id, \Building.name, \Building.address].compactMap { MemoryLayout<Building>.offset(of: $0) }
}
