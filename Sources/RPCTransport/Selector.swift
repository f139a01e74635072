#if canImport(Glibc)
import CRPCLinux
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a registered fd is ready for, as the kernel reported it in one turn.
public struct IOEvents: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Bytes (or EOF) to read.
    public static let readable = IOEvents(rawValue: 1 << 0)
    /// Room to write.
    public static let writable = IOEvents(rawValue: 1 << 1)
    /// The peer shut its write side (EPOLLRDHUP): after the bytes still queued, reads return EOF.
    public static let readHangup = IOEvents(rawValue: 1 << 2)
    /// The socket is gone: reset by the peer, or an error is pending (EPOLLERR, EPOLLHUP).
    public static let reset = IOEvents(rawValue: 1 << 3)
}

/// What a registered fd wants to hear about. Errors and hang-ups are always reported.
public struct IOInterest: OptionSet, Sendable, Equatable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let read = IOInterest(rawValue: 1 << 0)
    public static let write = IOInterest(rawValue: 1 << 1)
}

/// One kernel readiness set (epoll on Linux, kqueue elsewhere), polled without blocking: the
/// event loop waits on its fd with one Dispatch read source and drains it in turns
/// (swift-nio `SelectorEpoll`, without a thread of its own).
///
/// Level-triggered: an fd is registered once and stays reported while it is ready, so a turn that
/// leaves bytes unread (fairness) is called back, and nothing is re-armed per event.
struct Selector {
    /// The epoll (or kqueue) fd; readable while any registered fd is ready.
    let fd: Int32

    init() throws(Errno) {
        #if os(Linux)
        fd = try Syscall.retrying("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
        #else
        fd = try Syscall.retrying("kqueue") { kqueue() }
        #endif
    }

    #if os(Linux)
    private static func mask(_ interest: IOInterest) -> UInt32 {
        var events: UInt32 = 0
        if interest.contains(.read) { events |= EPOLLIN.rawValue | EPOLLRDHUP.rawValue }
        if interest.contains(.write) { events |= EPOLLOUT.rawValue }
        return events
    }

    func add(_ target: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        var event = epoll_event(events: Self.mask(interest), data: epoll_data_t(u64: token))
        _ = try Syscall.retrying("epoll_ctl(ADD)") { epoll_ctl(fd, EPOLL_CTL_ADD, target, &event) }
    }

    func modify(_ target: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        var event = epoll_event(events: Self.mask(interest), data: epoll_data_t(u64: token))
        _ = try Syscall.retrying("epoll_ctl(MOD)") { epoll_ctl(fd, EPOLL_CTL_MOD, target, &event) }
    }

    /// Forgets `target`. Call before closing it; a closed fd leaves the set on its own, but only
    /// once every duplicate of it is closed.
    func remove(_ target: Int32) {
        var event = epoll_event()
        _ = epoll_ctl(fd, EPOLL_CTL_DEL, target, &event)
    }

    /// Whether the kernel has epoll_pwait2 (a wait shorter than a millisecond); cleared at the
    /// first ENOSYS.
    nonisolated(unsafe) private static var hasNanosecondWait = true

    /// Fills `events` with what is ready, waiting up to `waitNanoseconds` for something (0: not at
    /// all; where the kernel cannot wait less than a millisecond, not at all); returns how many.
    func poll(
        into events: UnsafeMutableBufferPointer<epoll_event>, waitNanoseconds: Int = 0, _ body: (UInt64, IOEvents) -> Void
    ) -> Int {
        let n: Int32
        do {
            if waitNanoseconds > 0 && Self.hasNanosecondWait {
                let waited = crpc_epoll_wait_ns(fd, events.baseAddress, Int32(events.count), waitNanoseconds)
                if waited < 0 && errno == ENOSYS {
                    Self.hasNanosecondWait = false
                    return 0
                }
                n = waited < 0 ? 0 : waited
            } else {
                n = try Syscall.retrying("epoll_wait") { epoll_wait(fd, events.baseAddress, Int32(events.count), 0) }
            }
        } catch {
            return 0
        }
        for i in 0..<Int(n) {
            let raw = events[i].events
            var ready: IOEvents = []
            if raw & EPOLLIN.rawValue != 0 { ready.insert(.readable) }
            if raw & EPOLLOUT.rawValue != 0 { ready.insert(.writable) }
            if raw & EPOLLRDHUP.rawValue != 0 { ready.insert(.readHangup) }
            if raw & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 { ready.insert(.reset) }
            body(events[i].data.u64, ready)
        }
        return Int(n)
    }

    typealias Event = epoll_event
    #else
    private func change(_ target: Int32, filter: Int16, flags: UInt16, token: UInt64) {
        var change = Darwin.kevent(
            ident: UInt(target), filter: filter, flags: flags, fflags: 0, data: 0,
            udata: UnsafeMutableRawPointer(bitPattern: UInt(token)))
        _ = Darwin.kevent(fd, &change, 1, nil, 0, nil)
    }

    func add(_ target: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        try modify(target, token: token, interest: interest)
    }

    func modify(_ target: Int32, token: UInt64, interest: IOInterest) throws(Errno) {
        change(target, filter: Int16(EVFILT_READ), flags: UInt16(interest.contains(.read) ? EV_ADD : EV_DELETE), token: token)
        change(target, filter: Int16(EVFILT_WRITE), flags: UInt16(interest.contains(.write) ? EV_ADD : EV_DELETE), token: token)
    }

    func remove(_ target: Int32) {
        change(target, filter: Int16(EVFILT_READ), flags: UInt16(EV_DELETE), token: 0)
        change(target, filter: Int16(EVFILT_WRITE), flags: UInt16(EV_DELETE), token: 0)
    }

    func poll(
        into events: UnsafeMutableBufferPointer<Darwin.kevent>, waitNanoseconds: Int = 0, _ body: (UInt64, IOEvents) -> Void
    ) -> Int {
        var wait = timespec(tv_sec: waitNanoseconds / 1_000_000_000, tv_nsec: waitNanoseconds % 1_000_000_000)
        let n = Darwin.kevent(fd, nil, 0, events.baseAddress, Int32(events.count), &wait)
        guard n > 0 else { return 0 }
        for i in 0..<Int(n) {
            let event = events[i]
            var ready: IOEvents = event.filter == Int16(EVFILT_WRITE) ? .writable : .readable
            if event.flags & UInt16(EV_EOF) != 0 {
                ready.insert(event.fflags != 0 ? .reset : .readHangup)
            }
            if event.flags & UInt16(EV_ERROR) != 0 { ready.insert(.reset) }
            body(UInt64(UInt(bitPattern: event.udata)), ready)
        }
        return Int(n)
    }

    typealias Event = Darwin.kevent
    #endif
}
