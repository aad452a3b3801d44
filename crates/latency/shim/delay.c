// SPDX-License-Identifier: Apache-2.0
// kansoku's latency injector, in-process: loaded with LD_PRELOAD, it adds
// a fixed delay to chosen libc calls by busy-waiting on CLOCK_MONOTONIC
// (the vDSO: no system call, ~20 ns a read), so steps of a few hundred
// nanoseconds are possible where nanosleep's floor is ~50-100 us.
//
//   KANSOKU_DELAY_NS=1500                       the delay per call
//   KANSOKU_DELAY_CALLS=pread,pwrite,fdatasync  which calls (default: all
//       of pread pwrite fdatasync fsync recv send recvfrom sendto)
//
// The delay comes before the real call. Calls made before the constructor
// ran, or with KANSOKU_DELAY_NS unset or 0, go straight through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum { PREAD = 1, PWRITE = 2, FDATASYNC = 4, FSYNC = 8, RECV = 16, SEND = 32 };

static uint64_t delay_ns;
static unsigned which = PREAD | PWRITE | FDATASYNC | FSYNC | RECV | SEND;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void delay(unsigned call) {
    if (delay_ns == 0 || !(which & call))
        return;
    uint64_t until = now_ns() + delay_ns;
    while (now_ns() < until) {
        __builtin_ia32_pause();
    }
}

__attribute__((constructor)) static void init(void) {
    const char *d = getenv("KANSOKU_DELAY_NS");
    if (d)
        delay_ns = strtoull(d, NULL, 10);
    const char *c = getenv("KANSOKU_DELAY_CALLS");
    if (c && *c) {
        static const struct { const char *name; unsigned bit; } names[] = {
            {"pread", PREAD}, {"pwrite", PWRITE}, {"fdatasync", FDATASYNC},
            {"fsync", FSYNC}, {"recv", RECV}, {"send", SEND},
        };
        which = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *at = strstr(c, names[i].name);
            size_t n = strlen(names[i].name);
            // A whole word of the list: "pread" does not match "preadv".
            if (at && (at == c || at[-1] == ',') && (at[n] == 0 || at[n] == ','))
                which |= names[i].bit;
        }
    }
}

#define REAL(ret, name, params)                                  \
    static ret (*real_##name) params;                            \
    static ret (*get_##name(void)) params {                      \
        if (!real_##name)                                        \
            real_##name = (ret(*) params)dlsym(RTLD_NEXT, #name); \
        return real_##name;                                      \
    }

REAL(ssize_t, pread, (int, void *, size_t, off_t))
REAL(ssize_t, pread64, (int, void *, size_t, off_t))
REAL(ssize_t, pwrite, (int, const void *, size_t, off_t))
REAL(ssize_t, pwrite64, (int, const void *, size_t, off_t))
REAL(int, fdatasync, (int))
REAL(int, fsync, (int))
REAL(ssize_t, recv, (int, void *, size_t, int))
REAL(ssize_t, send, (int, const void *, size_t, int))
REAL(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *))
REAL(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t))

ssize_t pread(int fd, void *b, size_t n, off_t o) { delay(PREAD); return get_pread()(fd, b, n, o); }
ssize_t pread64(int fd, void *b, size_t n, off_t o) { delay(PREAD); return get_pread64()(fd, b, n, o); }
ssize_t pwrite(int fd, const void *b, size_t n, off_t o) { delay(PWRITE); return get_pwrite()(fd, b, n, o); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) { delay(PWRITE); return get_pwrite64()(fd, b, n, o); }
int fdatasync(int fd) { delay(FDATASYNC); return get_fdatasync()(fd); }
int fsync(int fd) { delay(FSYNC); return get_fsync()(fd); }
ssize_t recv(int fd, void *b, size_t n, int f) { delay(RECV); return get_recv()(fd, b, n, f); }
ssize_t send(int fd, const void *b, size_t n, int f) { delay(SEND); return get_send()(fd, b, n, f); }
ssize_t recvfrom(int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l) {
    delay(RECV);
    return get_recvfrom()(fd, b, n, f, a, l);
}
ssize_t sendto(int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l) {
    delay(SEND);
    return get_sendto()(fd, b, n, f, a, l);
}
