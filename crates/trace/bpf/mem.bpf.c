// SPDX-License-Identifier: GPL-2.0
// kansoku: memory allocation stalls, aggregated in the kernel.
//
// An allocation that finds too little free memory reclaims pages itself
// before it returns: vmscan's direct_reclaim_begin/end bracket that for
// the whole machine, memcg_reclaim_begin/end for a cgroup over its limit.
// The time between is a stall the allocating task pays; it goes into a
// log-linear histogram by kind (direct, memcg) in a hash map, with atomic
// adds. Reclaim is rare next to system calls: the cost per event matters
// little here.

#include "common.h"

// Task -> when its reclaim began.
struct map_def SEC("maps") RECLAIMING = {MAP_HASH, sizeof(u32), sizeof(u64), 65536, 0};

enum { DIRECT = 0, MEMCG = 1 };
#define SUM 0xffffffff
struct key {
    u32 kind;
    u32 bucket;
};
struct map_def SEC("maps") COUNTS = {MAP_HASH, sizeof(struct key), sizeof(u64), 4096, 0};

INLINE int begin(void) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 now = bpf_ktime_get_ns();
    bpf_map_update_elem(&RECLAIMING, &tid, &now, ANY);
    return 0;
}

INLINE int end(u32 kind) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 *t = bpf_map_lookup_elem(&RECLAIMING, &tid);
    if (!t)
        return 0;
    u64 d = bpf_ktime_get_ns() - *t;
    bpf_map_delete_elem(&RECLAIMING, &tid);
    struct key k = {kind, bucket(d)};
    add_to(&COUNTS, &k, 1);
    k.bucket = SUM;
    add_to(&COUNTS, &k, d);
    return 0;
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_begin")
int direct_begin(void *ctx) { return begin(); }

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_end")
int direct_end(void *ctx) { return end(DIRECT); }

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_begin")
int memcg_begin(void *ctx) { return begin(); }

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_end")
int memcg_end(void *ctx) { return end(MEMCG); }

char LICENSE[] SEC("license") = "GPL";
