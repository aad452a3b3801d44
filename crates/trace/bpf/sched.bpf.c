// SPDX-License-Identifier: GPL-2.0
// kansoku: scheduler latency, aggregated in the kernel.
//
// Run-queue latency: from a task's wakeup (or its preemption, when it goes
// back on the queue still runnable) to the moment it runs. Off-CPU time:
// from a task's switch out to its switch back in, by the state it left in —
// R (preempted), S (sleeping), D (uninterruptible: disk I/O, mostly), I
// (idle kernel threads), other. Both into log-linear histograms by
// (what, bucket) in a hash map, with atomic adds.
//
// Classic tracepoints: their records carry the pids and the state (a raw
// tracepoint would give task pointers to read). Context switches come by
// thousands a second, so a few map operations each cost ~0.1 % of a core.

#include "common.h"

struct off {
    u64 ns;
    u64 state;
};
// Task -> when it became runnable; task -> when and how it left the CPU.
struct map_def SEC("maps") WAKE = {MAP_HASH, sizeof(u32), sizeof(u64), 65536, 0};
struct map_def SEC("maps") OFF = {MAP_HASH, sizeof(u32), sizeof(struct off), 65536, 0};

enum { RUNQ = 0, OFF_R = 1, OFF_S = 2, OFF_D = 3, OFF_I = 4, OFF_OTHER = 5 };
#define SUM 0xffffffff
struct key {
    u32 what;
    u32 bucket;
};
struct map_def SEC("maps") COUNTS = {MAP_HASH, sizeof(struct key), sizeof(u64), 4096, 0};

struct wakeup_args {
    u64 common;
    char comm[16];
    int pid;
    int prio;
    int target_cpu;
};

struct switch_args {
    u64 common;
    char prev_comm[16];
    int prev_pid;
    int prev_prio;
    long prev_state;
    char next_comm[16];
    int next_pid;
    int next_prio;
};

INLINE void add(u32 what, u32 b, u64 n) {
    struct key k = {what, b};
    add_to(&COUNTS, &k, n);
}

INLINE void count(u32 what, u64 d) {
    add(what, bucket(d), 1);
    add(what, SUM, d);
}

INLINE int woken(int pid) {
    if (pid == 0)
        return 0;
    u32 p = (u32)pid;
    u64 now = bpf_ktime_get_ns();
    bpf_map_update_elem(&WAKE, &p, &now, ANY);
    return 0;
}

SEC("tracepoint/sched/sched_wakeup")
int sched_wakeup(struct wakeup_args *ctx) { return woken(ctx->pid); }

SEC("tracepoint/sched/sched_wakeup_new")
int sched_wakeup_new(struct wakeup_args *ctx) { return woken(ctx->pid); }

SEC("tracepoint/sched/sched_switch")
int sched_switch(struct switch_args *ctx) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = (u32)ctx->prev_pid, next = (u32)ctx->next_pid;
    u64 state = (u64)ctx->prev_state & 0xff;
    if (prev != 0) {
        if (state & 0x30) {
            // Dead (X) or zombie (Z): it never comes back.
            bpf_map_delete_elem(&OFF, &prev);
        } else {
            if (state == 0)
                bpf_map_update_elem(&WAKE, &prev, &now, ANY); // preempted: queued again
            struct off o = {now, state};
            bpf_map_update_elem(&OFF, &prev, &o, ANY);
        }
    }
    if (next == 0)
        return 0;
    u64 *w = bpf_map_lookup_elem(&WAKE, &next);
    if (w) {
        count(RUNQ, now - *w);
        bpf_map_delete_elem(&WAKE, &next);
    }
    struct off *o = bpf_map_lookup_elem(&OFF, &next);
    if (o) {
        u64 s = o->state;
        u32 what = s == 0 ? OFF_R : s == 1 ? OFF_S : s == 2 ? OFF_D : (s & 0x80) ? OFF_I : OFF_OTHER;
        count(what, now - o->ns);
        bpf_map_delete_elem(&OFF, &next);
    }
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
