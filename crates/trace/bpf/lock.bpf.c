// SPDX-License-Identifier: GPL-2.0
// kansoku: kernel lock contention, aggregated in the kernel.
//
// lock:contention_begin stamps a task's wait for a contended kernel lock
// (the first stamp of an acquisition wins: a mutex may spin, then sleep,
// each announced); lock:contention_end ends it. The wait goes into a
// log-linear histogram by kind of lock — spinlock, rwlock, mutex, rwsem,
// rtmutex, percpu-rwsem — in a hash map, with atomic adds. Seed 001's
// "global kernel lock on top" is this histogram's time.

#include "common.h"

struct wait {
    u64 ns;
    u64 flags;
};
// Task -> when it began to wait, and how.
struct map_def SEC("maps") WAITING = {MAP_HASH, sizeof(u32), sizeof(struct wait), 65536, 0};

enum { SPINLOCK = 0, RWLOCK = 1, MUTEX = 2, RWSEM = 3, RTMUTEX = 4, PERCPU_RWSEM = 5, OTHER = 6 };
#define SUM 0xffffffff
struct key {
    u32 kind;
    u32 bucket;
};
struct map_def SEC("maps") COUNTS = {MAP_HASH, sizeof(struct key), sizeof(u64), 4096, 0};

struct begin_args {
    u64 common;
    u64 lock_addr;
    u32 flags;
};

// LCB_F_*: SPIN 1, READ 2, WRITE 4, RT 8, PERCPU 16, MUTEX 32.
INLINE u32 kind_of(u64 f) {
    if (f & 32)
        return MUTEX;
    if (f & 16)
        return PERCPU_RWSEM;
    if (f & 8)
        return RTMUTEX;
    if (f & 1)
        return (f & 6) ? RWLOCK : SPINLOCK;
    if (f & 6)
        return RWSEM;
    return OTHER;
}

INLINE void add(u32 kind, u32 b, u64 n) {
    struct key k = {kind, b};
    add_to(&COUNTS, &k, n);
}

SEC("tracepoint/lock/contention_begin")
int contention_begin(struct begin_args *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct wait w = {bpf_ktime_get_ns(), ctx->flags};
    bpf_map_update_elem(&WAITING, &tid, &w, NOEXIST);
    return 0;
}

SEC("tracepoint/lock/contention_end")
int contention_end(void *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct wait *w = bpf_map_lookup_elem(&WAITING, &tid);
    if (!w)
        return 0;
    u64 d = bpf_ktime_get_ns() - w->ns;
    u32 kind = kind_of(w->flags);
    bpf_map_delete_elem(&WAITING, &tid);
    add(kind, bucket(d), 1);
    add(kind, SUM, d);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
