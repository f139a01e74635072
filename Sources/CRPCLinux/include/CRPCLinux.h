// The Linux system headers that Swift's Glibc module leaves out (swift-nio's CNIOLinux does the
// same): the event loop's epoll set. Glibc's own declarations, no other library.
#ifndef CRPCLINUX_H
#define CRPCLINUX_H
#ifdef __linux__
#include <sys/epoll.h>
#endif
#endif
