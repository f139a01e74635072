// The Linux system headers that Swift's Glibc module leaves out (swift-nio's CNIOLinux does the
// same): the event loop's epoll set (and epoll_pwait2's nanosecond timeout), its thread's name (prctl), getrandom(2) for tokens, and malloc_trim(3). Glibc's own declarations, no
// other library. And the CPU's CRC-32C instruction, for the journal's checksums (CRPCCRC32C.h), a prefetch hint, and an event loop's wake flag (CRPCWakeFlag.h).
#ifndef CRPCLINUX_H
#define CRPCLINUX_H
#ifdef __linux__
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
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

/// CLOCK_MONOTONIC in nanoseconds: what `DispatchTime.now().uptimeNanoseconds` reads on Linux,
/// for code that must not import Dispatch.
static inline unsigned long long crpc_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (unsigned long long)now.tv_sec * 1000000000ULL + (unsigned long long)now.tv_nsec;
}

/// memchr(3), for code that must not import Glibc.
static inline const void *crpc_memchr(const void *bytes, int byte, unsigned long count) {
    return __builtin_memchr(bytes, byte, count);
}

/// A mutex that spins a moment before it sleeps (PTHREAD_MUTEX_ADAPTIVE_NP), behind an opaque
/// handle so its users need not import Glibc. Create once, destroy once.
/// Lock and unlock are inline: they run around every batch of requests.
typedef struct crpc_adaptive_mutex crpc_adaptive_mutex;
crpc_adaptive_mutex *crpc_adaptive_mutex_create(void);
void crpc_adaptive_mutex_destroy(crpc_adaptive_mutex *mutex);
/// The handle points at the mutex itself (shim.c's struct holds it first).
static inline void crpc_adaptive_mutex_lock(crpc_adaptive_mutex *mutex) { pthread_mutex_lock((pthread_mutex_t *)(void *)mutex); }
static inline void crpc_adaptive_mutex_unlock(crpc_adaptive_mutex *mutex) { pthread_mutex_unlock((pthread_mutex_t *)(void *)mutex); }

/// A mutex with a condition variable behind an opaque handle (what NSCondition is, without
/// Foundation): for the entities' replay, which must not import Glibc or Foundation.
typedef struct crpc_condition crpc_condition;
crpc_condition *crpc_condition_create(void);
void crpc_condition_destroy(crpc_condition *condition);
void crpc_condition_lock(crpc_condition *condition);
void crpc_condition_unlock(crpc_condition *condition);
/// Waits with the lock held; holds it again on return (spurious wake-ups happen: loop on the state).
void crpc_condition_wait(crpc_condition *condition);
void crpc_condition_broadcast(crpc_condition *condition);

/// Gives the kernel back the pages of the heap's free blocks, in every arena (malloc_trim(3)):
/// glibc returns only the top of each heap by itself. 1 if any memory went back.
static inline int crpc_release_free_heap(void) { return malloc_trim(0); }

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
