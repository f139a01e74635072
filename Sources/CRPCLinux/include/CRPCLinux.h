// The Linux system headers that Swift's Glibc module leaves out (swift-nio's CNIOLinux does the
// same): the event loop's epoll set (and epoll_pwait2's nanosecond timeout), its thread's name (prctl), and getrandom(2) for tokens. Glibc's own declarations, no
// other library. And the CPU's CRC-32C instruction, for the journal's checksums (CRPCCRC32C.h), a prefetch hint, and an event loop's wake flag (CRPCWakeFlag.h).
#ifndef CRPCLINUX_H
#define CRPCLINUX_H
#ifdef __linux__
#include <errno.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/// epoll_wait with a timeout in nanoseconds (epoll_pwait2, Linux 5.11), called through syscall(2)
/// so that it builds against any glibc. -1 with errno ENOSYS where the kernel or headers lack it.
static inline int crpc_epoll_wait_ns(int epfd, struct epoll_event *events, int maxevents, long nanoseconds) {
#ifdef SYS_epoll_pwait2
    struct timespec timeout = { nanoseconds / 1000000000L, nanoseconds % 1000000000L };
    return (int)syscall(SYS_epoll_pwait2, epfd, events, maxevents, &timeout, (void *)0, (size_t)0);
#else
    (void)epfd; (void)events; (void)maxevents; (void)nanoseconds;
    errno = ENOSYS;
    return -1;
#endif
}

/// Names the calling thread (what `top -H`, `perf` and `/proc/PID/task/*/comm` show); the kernel
/// keeps the first 15 bytes.
static inline void crpc_set_thread_name(const char *name) {
    (void)prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}
#endif
#include "CRPCCRC32C.h"
#include "CRPCPrefetch.h"
#include "CRPCWakeFlag.h"
#endif
