/* Diagnostic LD_PRELOAD for bench/xcp_deadlock.py: widens the window of XrdCl 5.5's
 * XCpSrc::Steal between its two lock acquisitions (its own source's mutex, then the
 * other source's) by sleeping WIDEN_US microseconds after the first, so two sources that
 * steal from each other meet there far more often than on an idle machine. It changes
 * no lock order: every deadlock it shows is one the unmodified client can reach.
 * Steal is called through the PLT from GetWork, so the preload sees it; the locks are
 * pthread_mutex_lock calls. Built by the bench: cc -O2 -shared -fPIC -o widen.so widen.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static __thread int in_steal, nlocks;

int pthread_mutex_lock(pthread_mutex_t *m)
{
    static int (*real)(pthread_mutex_t *);
    if (!real)
        real = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    int rc = real(m);
    if (in_steal && ++nlocks == 1) {
        const char *us = getenv("WIDEN_US");
        usleep(us ? (useconds_t)atoi(us) : 1000);
    }
    return rc;
}

/* XrdCl::XCpSrc::Steal(XrdCl::XCpSrc*) */
void _ZN5XrdCl6XCpSrc5StealEPS0_(void *self, void *src)
{
    static void (*real)(void *, void *);
    if (!real)
        real = (void (*)(void *, void *))dlsym(RTLD_NEXT, "_ZN5XrdCl6XCpSrc5StealEPS0_");
    in_steal = 1;
    nlocks = 0;
    real(self, src);
    in_steal = 0;
}
