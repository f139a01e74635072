// A hint that memory is about to be read: the state lock's holder asks for every slot its batch
// will look up before looking any up, so their cache misses overlap instead of queuing.
#ifndef CRPCPREFETCH_H
#define CRPCPREFETCH_H

static inline void crpc_prefetch(const void *address) { __builtin_prefetch(address); }

#endif
