// The module's header holds most of it (static inline); what needs a glibc extension is here.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include "CRPCLinux.h"

#ifdef __linux__
struct crpc_adaptive_mutex {
    pthread_mutex_t mutex;
};

crpc_adaptive_mutex *crpc_adaptive_mutex_create(void) {
    crpc_adaptive_mutex *made = malloc(sizeof(crpc_adaptive_mutex));
    if (made == NULL) abort();
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&made->mutex, &attributes);
    pthread_mutexattr_destroy(&attributes);
    return made;
}

void crpc_adaptive_mutex_destroy(crpc_adaptive_mutex *mutex) {
    pthread_mutex_destroy(&mutex->mutex);
    free(mutex);
}

struct crpc_condition {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
};

crpc_condition *crpc_condition_create(void) {
    crpc_condition *made = malloc(sizeof(crpc_condition));
    if (made == NULL) abort();
    pthread_mutex_init(&made->mutex, NULL);
    pthread_cond_init(&made->cond, NULL);
    return made;
}

void crpc_condition_destroy(crpc_condition *condition) {
    pthread_cond_destroy(&condition->cond);
    pthread_mutex_destroy(&condition->mutex);
    free(condition);
}

void crpc_condition_lock(crpc_condition *condition) { pthread_mutex_lock(&condition->mutex); }
void crpc_condition_unlock(crpc_condition *condition) { pthread_mutex_unlock(&condition->mutex); }
void crpc_condition_wait(crpc_condition *condition) { pthread_cond_wait(&condition->cond, &condition->mutex); }
void crpc_condition_broadcast(crpc_condition *condition) { pthread_cond_broadcast(&condition->cond); }

#endif
