// The Linux system headers that Swift's Glibc module leaves out (swift-nio's CNIOLinux does the
// same): the event loop's epoll set, and getrandom(2) for tokens. Glibc's own declarations, no
// other library.
#ifndef CRPCLINUX_H
#define CRPCLINUX_H
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/random.h>
#endif
#endif
