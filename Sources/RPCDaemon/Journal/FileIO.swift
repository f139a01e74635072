import Foundation
import RPCTransport

#if canImport(Glibc)
import Glibc
#endif

/// The one place the journal, snapshot and data directory call libc for files: -1 becomes a thrown
/// `Errno`, EINTR is retried, and tests inject failures here (swift-system `valueOrErrno`).
///
/// Test-only environment hooks, compiled into debug builds only (a release binary reads none):
/// - `RPCD_TEST_FAIL_FSYNC_AFTER=N`: fsyncs after the first N fail with EIO.
/// - `RPCD_TEST_FAIL_WRITE_AFTER=N`: file writes after the first N fail with ENOSPC.
/// - `RPCD_TEST_CRASH_AT=POINT`: `_exit(99)` when the daemon reaches the named point (see `crashPoint`).
/// - `RPCD_TEST_FSYNC_DELAY_MS=N`: every fsync of the journal writer first sleeps N ms (0-10000), so a
///   test can act while a mutation waits for its fsync.
enum FileIO {
    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws(Errno) -> Int32 {
        try retrying("open(\(path))") { Glibc.open(path, flags | O_CLOEXEC, mode) }
    }

    static func close(_ fd: Int32) { _ = Glibc.close(fd) }

    /// Writes every byte (looping over partial writes).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(Errno) {
        if Faults.shared.writeFails() { throw Errno(ENOSPC, call: "write(\(path)) [test fault]") }
        var offset = 0
        while offset < bytes.count {
            let n = try retrying("write(\(path))") { Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
            offset += n
        }
    }

    /// Writes every byte at `offset` (pwrite(2), looping over partial writes); the file offset
    /// does not move. `faults: false` for a write that covers no record (the test faults count those).
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, at offset: Int, path: String, faults: Bool = true) throws(Errno) {
        if faults, Faults.shared.writeFails() { throw Errno(ENOSPC, call: "pwrite(\(path)) [test fault]") }
        var done = 0
        while done < bytes.count {
            let n = try retrying("pwrite(\(path))") { Glibc.pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + done)) }
            done += n
        }
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(Errno) {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(Errno) in try writeAll(fd, buffer, path: path) }
        }
        try result.get()
    }

    /// fsync, or fdatasync when only the data and size must be durable. `faults: false` for a
    /// sync that covers no record (the test faults count those).
    static func sync(_ fd: Int32, path: String, dataOnly: Bool = false, faults: Bool = true) throws(Errno) {
        if faults, Faults.shared.fsyncFails() { throw Errno(EIO, call: "fsync(\(path)) [test fault]") }
        if faults, Faults.shared.fsyncDelayMicroseconds > 0 { usleep(Faults.shared.fsyncDelayMicroseconds) }
        _ = try retrying("fsync(\(path))") { dataOnly ? Glibc.fdatasync(fd) : Glibc.fsync(fd) }
    }

    /// Makes a rename or create in `directory` durable.
    static func syncDirectory(_ directory: String) throws(Errno) {
        let fd = try open(directory, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        try sync(fd, path: directory)
    }

    /// `mkdir -p`: creates `path` and its missing parents.
    static func makeDirectories(_ path: String) throws(Errno) {
        var prefix = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            prefix += "/" + component
            if Glibc.mkdir(prefix, 0o755) == -1, errno != EEXIST { throw Errno(errno, call: "mkdir(\(prefix))") }
        }
    }

    static func rename(_ from: String, _ to: String) throws(Errno) {
        _ = try retrying("rename(\(from), \(to))") { Glibc.rename(from, to) }
    }

    /// A second name for a file; EEXIST if `to` exists (it never replaces one, unlike rename).
    static func link(_ from: String, _ to: String) throws(Errno) {
        _ = try retrying("link(\(from), \(to))") { Glibc.link(from, to) }
    }

    /// The directory holding `path` ("." for a bare name). Not NSString's `deletingLastPathComponent`,
    /// which traps on a one-character name.
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Writes `bytes` to a new file beside `path` with `mode` (and `owner`, if it differs) and
    /// fsyncs it; returns its name, for the caller to rename or link into place and then remove.
    static func writeTemporary(
        beside path: String, _ bytes: [UInt8], mode: mode_t, owner: (uid: uid_t, gid: gid_t)? = nil, faults: Bool = true
    ) throws(Errno) -> String {
        let temporary = "\(path).\(getpid()).tmp"
        try unlink(temporary)
        let fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
        defer { close(fd) }
        do {
            let info = try status(fd, path: temporary)
            if let owner, info.st_uid != owner.uid || info.st_gid != owner.gid {
                _ = try retrying("fchown(\(temporary))") { fchown(fd, owner.uid, owner.gid) }
            }
            // After fchown, which may clear mode bits; and the umask does not apply to fchmod.
            _ = try retrying("fchmod(\(temporary))") { fchmod(fd, mode) }
            try writeAll(fd, bytes, path: temporary)
            try sync(fd, path: temporary, faults: faults)
        } catch {
            try? unlink(temporary)
            throw error
        }
        return temporary
    }

    /// Replaces `path` with a file holding `bytes` (written beside it, renamed over it, both
    /// fsynced): a reader sees the old file or the new one, never a part of either. `faults: false`
    /// for a file that holds no record (the test faults count record syncs).
    static func replace(_ path: String, with bytes: [UInt8], mode: mode_t, owner: (uid: uid_t, gid: gid_t)? = nil, faults: Bool = true) throws(Errno) {
        let temporary = try writeTemporary(beside: path, bytes, mode: mode, owner: owner, faults: faults)
        do {
            try rename(temporary, path)
        } catch {
            try? unlink(temporary)
            throw error
        }
        try syncDirectory(directory(of: path))
    }

    /// Creates `path` holding `bytes` with `mode`, whole or not at all (written beside it, then
    /// linked into place, both fsynced); EEXIST if it exists.
    static func create(_ path: String, _ bytes: [UInt8], mode: mode_t) throws(Errno) {
        let temporary = try writeTemporary(beside: path, bytes, mode: mode)
        defer { try? unlink(temporary) }
        try link(temporary, path)
        try syncDirectory(directory(of: path))
    }

    static func truncate(_ fd: Int32, to length: Int, path: String) throws(Errno) {
        _ = try retrying("ftruncate(\(path))") { Glibc.ftruncate(fd, off_t(length)) }
    }

    /// Removes `path`; a missing file is fine.
    static func unlink(_ path: String) throws(Errno) {
        if Glibc.unlink(path) == -1, errno != ENOENT { throw Errno(errno, call: "unlink(\(path))") }
    }

    static func exists(_ path: String) -> Bool { access(path, F_OK) == 0 }

    /// fstat(2): the open file's owner, mode and size.
    static func status(_ fd: Int32, path: String) throws(Errno) -> stat {
        var info = stat()
        _ = try retrying("fstat(\(path))") { fstat(fd, &info) }
        return info
    }

    static func size(_ fd: Int32, path: String) throws(Errno) -> Int {
        Int(try status(fd, path: path).st_size)
    }

    /// The whole file, or nil if it does not exist.
    static func readAll(_ path: String) throws(Errno) -> [UInt8]? {
        try readWithStatus(path)?.bytes
    }

    /// The whole file and its fstat, from one descriptor (so the status is the bytes' file), or
    /// nil if it does not exist.
    static func readWithStatus(_ path: String) throws(Errno) -> (bytes: [UInt8], status: stat)? {
        guard let fd = try openIfExists(path) else { return nil }
        defer { close(fd) }
        let info = try status(fd, path: path)
        return (try readAll(fd, expected: Int(info.st_size), path: path), info)
    }

    /// The rest of an open file, `expected` bytes long by its fstat.
    private static func readAll(_ fd: Int32, expected: Int, path: String) throws(Errno) -> [UInt8] {
        // Read into uninitialized room for the size fstat gives plus one byte, for the read that
        // finds the end. (Zeroing first, then growing the array by 64 KiB to find the end, wrote and
        // copied a 100 MiB snapshot twice more at every start.)
        var failure: Errno?
        var bytes = [UInt8](unsafeUninitializedCapacity: expected + 1) { buffer, count in
            do throws(Errno) {
                count = try read(fd, into: UnsafeMutableRawBufferPointer(buffer), path: path)
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        guard bytes.count > expected else { return bytes }
        // The file grew while it was read: the rest, a chunk at a time.
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = try chunk.withUnsafeMutableBytes { buffer in
                Result { () throws(Errno) in try read(fd, into: buffer, path: path) }
            }.get()
            bytes.append(contentsOf: chunk[..<n])
            if n < chunk.count { return bytes }
        }
    }

    /// Reads until `buffer` is full or the file ends; how many bytes it read.
    private static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, path: String) throws(Errno) -> Int {
        var filled = 0
        while filled < buffer.count {
            let n = try retrying("read(\(path))") { Glibc.read(fd, buffer.baseAddress! + filled, buffer.count - filled) }
            if n == 0 { break }
            filled += n
        }
        return filled
    }

    /// Reads up to `buffer.count` bytes at `offset` (pread); 0 at the end of the file.
    static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int, path: String) throws(Errno) -> Int {
        try retrying("pread(\(path))") { pread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    /// A descriptor for reading `path`, or nil if it does not exist.
    private static func openIfExists(_ path: String) throws(Errno) -> Int32? {
        do {
            return try open(path, O_RDONLY)
        } catch where error.code == ENOENT {
            return nil
        }
    }

    /// The whole file mapped read-only, or nil if it does not exist.
    static func map(_ path: String) throws(Errno) -> MappedFile? {
        guard let fd = try openIfExists(path) else { return nil }
        defer { close(fd) }
        let count = try size(fd, path: path)
        guard count > 0 else { return MappedFile(base: nil, count: 0) }
        guard let base = Glibc.mmap(nil, count, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0), base != MAP_FAILED else {
            throw Errno(errno, call: "mmap(\(path))")
        }
        return MappedFile(base: base, count: count)
    }

    /// Takes an exclusive advisory lock (released when the process exits) without waiting; false if another process holds it.
    /// A POSIX record lock: closing any other descriptor of the same file in this process drops it.
    static func tryLock(_ fd: Int32, path: String) throws(Errno) -> Bool {
        // A POSIX record lock on the whole file (`flock` the struct, not the function `lock` calls).
        var request = flock()
        request.l_type = Int16(F_WRLCK)
        request.l_whence = Int16(SEEK_SET)
        if fcntl(fd, F_SETLK, &request) == 0 { return true }
        if errno == EAGAIN || errno == EACCES { return false }
        throw Errno(errno, call: "fcntl(F_SETLK, \(path))")
    }

    /// Waits for an exclusive flock(2) on `fd`, held until the descriptor closes: other
    /// descriptors of the same file, opened and closed meanwhile, leave it alone (unlike `tryLock`).
    static func lock(_ fd: Int32, path: String) throws(Errno) {
        // Unqualified: `Glibc.flock` names the struct.
        _ = try retrying("flock(\(path))") { flock(fd, LOCK_EX) }
    }

    /// Stops the process (exit 99, no cleanup) if `RPCD_TEST_CRASH_AT` names `point`.
    static func crashPoint(_ point: String) {
        #if DEBUG
        if Faults.shared.crashAt == point {
            LogSink.stderr.write("rpcd: test hook RPCD_TEST_CRASH_AT=\(point): exiting now\n")
            _exit(99)
        }
        #endif
    }

    @inline(__always)
    private static func retrying<T: FixedWidthInteger>(_ call: @autoclosure () -> String, _ body: () -> T) throws(Errno) -> T {
        try Syscall.retrying(call(), body)
    }
}

/// A file's bytes mapped read-only, all faulted in at once (MAP_POPULATE), unmapped when released:
/// a restart replays a 100 MiB snapshot from the page cache instead of copying it into fresh heap
/// pages first (a tenth of a restart, with the other core busy). Only for files nothing truncates
/// while they are mapped: the data directory's lock keeps other daemons and tools out.
final class MappedFile {
    private let base: UnsafeMutableRawPointer?
    let count: Int

    fileprivate init(base: UnsafeMutableRawPointer?, count: Int) {
        self.base = base
        self.count = count
    }

    deinit {
        if let base { _ = munmap(base, count) }
    }

    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }
}

/// Test-only failure injection, read once from the environment in debug builds; a release
/// build injects nothing and holds none of the variables' names (swift-system's `ENABLE_MOCKING`).
final class Faults: @unchecked Sendable {
    // @unchecked: the counters are guarded by `lock`; the limits are immutable.
    #if DEBUG
    static let shared = Faults(environment: ProcessInfo.processInfo.environment)
    #else
    static let shared = Faults(environment: [:])
    #endif

    let crashAt: String?
    /// Microseconds each fsync sleeps first (0: none).
    let fsyncDelayMicroseconds: UInt32
    /// Microseconds a compaction waits before it writes its snapshot (0: none).
    let compactionDelayMicroseconds: UInt32
    private let fsyncLimit: Int?
    private let writeLimit: Int?
    private let lock = NSLock()
    private var fsyncs = 0
    private var writes = 0

    init(environment: [String: String]) {
        #if DEBUG
        crashAt = environment["RPCD_TEST_CRASH_AT"]
        fsyncDelayMicroseconds = environment["RPCD_TEST_FSYNC_DELAY_MS"].flatMap { UInt32($0) }.map { min($0, 10_000) * 1000 } ?? 0
        compactionDelayMicroseconds = environment["RPCD_TEST_COMPACTION_DELAY_MS"].flatMap { UInt32($0) }.map { min($0, 10_000) * 1000 } ?? 0
        fsyncLimit = environment["RPCD_TEST_FAIL_FSYNC_AFTER"].flatMap { Int($0) }
        writeLimit = environment["RPCD_TEST_FAIL_WRITE_AFTER"].flatMap { Int($0) }
        #else
        (crashAt, fsyncDelayMicroseconds, compactionDelayMicroseconds, fsyncLimit, writeLimit) = (nil, 0, 0, nil, nil)
        #endif
    }

    func fsyncFails() -> Bool {
        guard let fsyncLimit else { return false }
        return lock.withLock {
            fsyncs += 1
            return fsyncs > fsyncLimit
        }
    }

    func writeFails() -> Bool {
        guard let writeLimit else { return false }
        return lock.withLock {
            writes += 1
            return writes > writeLimit
        }
    }
}
