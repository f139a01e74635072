// A flag any thread raises and one thread takes: an event loop's pending wake. The loop checks it
// after every eighth connection it serves (a plain load, then an exchange only when it is raised),
// so work handed to the loop does not wait behind every connection a turn found ready.
#ifndef CRPCWAKEFLAG_H
#define CRPCWAKEFLAG_H

// Raises the flag; 1 if it was raised already (the loop has not taken it yet).
static inline int crpc_wake_flag_raise(int *flag) { return __atomic_exchange_n(flag, 1, __ATOMIC_ACQ_REL); }

// Whether the flag is raised (a plain load: the check between two connections).
static inline int crpc_wake_flag_raised(const int *flag) { return __atomic_load_n(flag, __ATOMIC_RELAXED); }

// Lowers the flag; 1 if it was raised (the caller runs what the wake asked for).
static inline int crpc_wake_flag_take(int *flag) { return __atomic_exchange_n(flag, 0, __ATOMIC_ACQ_REL); }

// Tells the CPU this thread is spinning (a loop's busy poll between two epoll_wait calls): the
// sibling hyperthread gets the core's resources, and the spin draws less power.
static inline void crpc_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
