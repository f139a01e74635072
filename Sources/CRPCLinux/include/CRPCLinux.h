// The Linux system headers that Swift's Glibc module leaves out (swift-nio's CNIOLinux does the
// same): the event loop's epoll set, and getrandom(2) for tokens. Glibc's own declarations, no
// other library. And the CPU's CRC-32C instruction, for the journal's checksums (CRPCCRC32C.h).
#ifndef CRPCLINUX_H
#define CRPCLINUX_H
#ifdef __linux__
#include <sys/epoll.h>
#include <sys/random.h>
#endif
#include "CRPCCRC32C.h"
#endif
