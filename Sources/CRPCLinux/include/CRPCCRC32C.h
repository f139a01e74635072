// CRC-32C with the CPU's own instruction (x86-64 SSE4.2 `crc32`, AArch64 CRC extension `crc32c`),
// for RPCEntities' CRC32C, which keeps its portable tables for CPUs without one. The update works
// on the running value as the instruction does: no initial or final inversion (the caller's).
#ifndef CRPCCRC32C_H
#define CRPCCRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

// 1 when crpc_crc32c_update may be called on this CPU.
static inline int crpc_crc32c_available(void) {
#if defined(__x86_64__)
    unsigned int eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_SSE4_2) != 0;
#elif defined(__aarch64__) && defined(__linux__)
    return (getauxval(AT_HWCAP) & (1UL << 7)) != 0;  // HWCAP_CRC32
#else
    return 0;
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static inline uint32_t crpc_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = (const unsigned char *)bytes;
    uint64_t wide = crc;
    for (; count >= 8; p += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = __builtin_ia32_crc32di(wide, word);
    }
    uint32_t narrow = (uint32_t)wide;
    for (; count > 0; p++, count--) narrow = __builtin_ia32_crc32qi(narrow, *p);
    return narrow;
}
#elif defined(__aarch64__)
__attribute__((target("crc")))
static inline uint32_t crpc_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    const unsigned char *p = (const unsigned char *)bytes;
    for (; count >= 8; p += 8, count -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = __builtin_arm_crc32cd(crc, word);
    }
    for (; count > 0; p++, count--) crc = __builtin_arm_crc32cb(crc, *p);
    return crc;
}
#else
// No instruction: never called (crpc_crc32c_available() is 0).
static inline uint32_t crpc_crc32c_update(uint32_t crc, const void *bytes, size_t count) {
    (void)bytes;
    (void)count;
    return crc;
}
#endif
#endif
