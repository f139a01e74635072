import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A listening TCP or Unix stream socket whose accepts run on a Dispatch read source.
public final class Listener: @unchecked Sendable {
    // @unchecked: `source`, `spareFD` and `isClosed` are only touched on `queue`.
    public private(set) var address: SocketAddress
    private let fd: Int32
    private let queue: DispatchQueue
    private var source: (any DispatchSourceRead)?
    /// Kept open to be given up when the process runs out of fds, so one pending connection can
    /// be accepted and shed instead of spinning on a readable listener (libuv's trick).
    private var spareFD: Int32 = -1
    private var isClosed = false
    private var pausedSource: (any DispatchSourceRead)?
    /// Connections shed for want of fds (for the log).
    private var shed = 0
    private let onAccept: @Sendable (_ fd: Int32, _ peer: SocketAddress?, _ listener: SocketAddress) -> Void
    /// The socket file this listener created (Unix), removed on close if it is still ours.
    private var ownedPath: (path: String, device: UInt64, inode: UInt64)?
    private let onError: @Sendable (String) -> Void

    /// Binds and listens on `address` (port 0 picks a free one; `address` then holds the real port).
    /// A Unix socket gets file mode `unixMode`; a stale socket file at its path (nobody accepting)
    /// is replaced, anything else there is an error.
    public convenience init(
        binding address: SocketAddress, backlog: Int32 = 1024, unixMode: mode_t = 0o660, queue: DispatchQueue,
        onAccept: @escaping @Sendable (_ fd: Int32, _ peer: SocketAddress?, _ listener: SocketAddress) -> Void,
        onError: @escaping @Sendable (String) -> Void
    ) throws(Errno) {
        if case .unix(let path) = address { try Self.removeStaleSocket(at: path) }
        let fd = try Syscall.socket(domain: address.family, type: Int32(SOCK_STREAM.rawValue))
        var owned: (String, UInt64, UInt64)?
        do {
            switch address {
            case .ipv4, .ipv6:
                try Syscall.setOption(fd, level: SOL_SOCKET, name: SO_REUSEADDR, value: 1)
                if case .ipv6 = address {
                    try Syscall.setOption(fd, level: Int32(IPPROTO_IPV6), name: IPV6_V6ONLY, value: 1)
                }
                try Syscall.bind(fd, address)
            case .unix(let path):
                try Syscall.bind(fd, address)
                _ = try Syscall.retrying("chmod(\(path))") { chmod(path, unixMode) }
                var info = stat()
                _ = try Syscall.retrying("stat(\(path))") { stat(path, &info) }
                owned = (path, UInt64(info.st_dev), UInt64(info.st_ino))
            }
            try Syscall.listen(fd, backlog: backlog)
        } catch {
            Syscall.close(fd)
            if let owned { _ = unlink(owned.0) }
            throw Errno(error.code, call: "\(error.call) \(address)")
        }
        try self.init(listening: fd, queue: queue, onAccept: onAccept, onError: onError)
        if case .unix(let path) = address { self.address = .unix(path) }
        ownedPath = owned.map { (path: $0.0, device: $0.1, inode: $0.2) }
    }

    /// Adopts a socket that is already listening (e.g. inherited from systemd).
    public init(
        listening fd: Int32, queue: DispatchQueue,
        onAccept: @escaping @Sendable (_ fd: Int32, _ peer: SocketAddress?, _ listener: SocketAddress) -> Void,
        onError: @escaping @Sendable (String) -> Void
    ) throws(Errno) {
        try Syscall.setNonBlocking(fd)
        self.fd = fd
        self.address = try Syscall.localAddress(fd)
        self.queue = queue
        self.onAccept = onAccept
        self.onError = onError
        self.spareFD = Self.openSpare()
    }

    /// Starts accepting.
    public func start() {
        queue.async { [self] in
            guard !isClosed else { return }
            let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
            source.setEventHandler { [unowned self] in self.acceptAll() }
            source.setCancelHandler { [self] in
                Syscall.close(fd)
                if spareFD >= 0 { Syscall.close(spareFD) }
            }
            self.source = source
            source.resume()
        }
        // libdispatch opens its timer fd on first use; make that happen now, not when out of fds.
        queue.asyncAfter(deadline: .now() + .milliseconds(1)) {}
    }

    /// Stops accepting and closes the socket (in the source's cancel handler).
    public func close() {
        queue.async { [self] in
            guard !isClosed else { return }
            isClosed = true
            // Now, not in the cancel handler: a daemon that exits right after must leave no socket file.
            removeOwnedPath()
            if let source {
                source.cancel()
            } else {
                Syscall.close(fd)
                if spareFD >= 0 { Syscall.close(spareFD) }
            }
            source = nil
        }
    }

    private func acceptAll() {
        dispatchPrecondition(condition: .onQueue(queue))
        // Bounded, so one busy listener cannot starve the others on this queue.
        for _ in 0..<256 where !isClosed {
            do {
                guard case .processed(let (client, peer)) = try Syscall.accept(fd) else { return }
                // Replies leave when written: Nagle would hold a second small reply until the
                // first is acknowledged (40 ms with a delayed ACK). Not for Unix sockets.
                if case .unix = address {} else {
                    try? Syscall.setOption(client, level: Int32(IPPROTO_TCP), name: TCP_NODELAY, value: 1)
                }
                onAccept(client, peer, address)
            } catch let error where error.code == EMFILE || error.code == ENFILE {
                guard shedOne(error) else {
                    pause()
                    return
                }
            } catch let error where error.code == ECONNABORTED || error.code == EPROTO {
                continue
            } catch {
                onError("accept on \(address) failed: \(error)")
                pause()
                return
            }
        }
    }

    /// Out of fds: gives up the spare fd to accept one pending connection and close it at once, so
    /// the peer sees a close instead of hanging in the backlog, and the listener stops being
    /// readable (libuv's EMFILE trick). False if there is no spare to give up.
    private func shedOne(_ error: Errno) -> Bool {
        guard spareFD >= 0 else { return false }
        Syscall.close(spareFD)
        spareFD = -1
        if case .processed(let (client, _))? = try? Syscall.accept(fd) { Syscall.close(client) }
        spareFD = Self.openSpare()
        shed += 1
        if shed == 1 || shed.isMultiple(of: 1000) {
            onError("out of file descriptors (\(error)); shed \(shed) connection(s) on \(address) so far; raise LimitNOFILE or lower max_connections")
        }
        return true
    }

    /// Stops accepting for a moment (back off rather than spin on a readable listener).
    private func pause() {
        guard let source, !isClosed, pausedSource == nil else { return }
        source.suspend()
        pausedSource = source
        // Resumed even if closed meanwhile: a cancelled source must be resumed to be released.
        // (The timer fd behind asyncAfter exists already: `start` made it while fds were free.)
        queue.asyncAfter(deadline: .now() + .milliseconds(100)) { [self] in
            pausedSource?.resume()
            pausedSource = nil
        }
    }

    /// A socket file left by a daemon that is gone (connecting is refused) is removed; a live one
    /// (another daemon listening) or a file that is not a socket is an error.
    private static func removeStaleSocket(at path: String) throws(Errno) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard info.st_mode & S_IFMT == S_IFSOCK else { throw Errno(EEXIST, call: "bind unix:\(path) (a file that is not a socket is there)") }
        let probe = try Syscall.socket(domain: AF_UNIX, type: Int32(SOCK_STREAM.rawValue))
        defer { Syscall.close(probe) }
        let attempt: Result<IOResult<Int32>, Errno>
        do {
            attempt = .success(try Syscall.connect(probe, .unix(path)))
        } catch {
            attempt = .failure(error)
        }
        switch attempt {
        case .success:
            throw Errno(EADDRINUSE, call: "bind unix:\(path) (another process is accepting on it)")
        case .failure(let error) where error.code == ECONNREFUSED || error.code == ENOENT:
            _ = unlink(path)
        case .failure(let error):
            throw error
        }
    }

    /// Removes the socket file this listener created, unless something else has replaced it since.
    private func removeOwnedPath() {
        guard let owned = ownedPath else { return }
        ownedPath = nil
        var info = stat()
        guard lstat(owned.path, &info) == 0 else {
            return onError("socket file \(owned.path) was already gone at close (\(Errno(errno, call: "lstat")))")
        }
        guard UInt64(info.st_dev) == owned.device, UInt64(info.st_ino) == owned.inode else {
            return onError("left \(owned.path) in place: another process replaced this daemon's socket file there")
        }
        if unlink(owned.path) == -1 {
            onError("cannot remove socket file \(owned.path) (\(Errno(errno, call: "unlink"))); remove it by hand")
        }
    }

    private static func openSpare() -> Int32 {
        open("/dev/null", O_RDONLY | O_CLOEXEC)
    }
}
