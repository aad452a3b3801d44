// SPDX-License-Identifier: GPL-2.0
// kansoku: system call latency, aggregated in the kernel.
//
// sys_enter stamps the thread's entry time and call; sys_exit takes the
// difference and counts it into a log-linear histogram per system call
// (4 buckets per power of two: ±12 % resolution from 4 ns to 4.3 s; longer
// ones in the last bucket), and adds it to the call's total time. The
// histograms are one array, indexed directly (the verifier inlines the
// lookup: no hashing) and counted with atomic adds; user space maps the
// array into its memory and reads it without a system call. Nothing per
// event leaves the kernel.

#include "common.h"

// System calls kept apart (higher numbers are not counted) and buckets per
// call; the layout user space reads (src/bpf.rs).
#define NR_MAX 512
#define BUCKETS 128

// Thread id -> entry time (ns). Not deleted at each exit (the next entry
// overwrites it, and a delete costs a third of the whole); a thread's
// entry goes when it enters exit/exit_group, the way threads end.
struct start {
    u64 ns;
    u64 nr;
};
struct map_def SEC("maps") START = {MAP_HASH, sizeof(u32), sizeof(struct start), 65536, 0};

// [nr * BUCKETS + bucket]: count; [NR_MAX * BUCKETS + nr]: total ns.
struct map_def SEC("maps") HIST = {MAP_ARRAY, sizeof(u32), sizeof(u64), NR_MAX * BUCKETS + NR_MAX, F_MMAPABLE};

// Raw tracepoints (not the classic ones): the kernel calls the program
// with the tracepoint's own arguments instead of first formatting a trace
// record — the record is most of a classic tracepoint's cost.
// sys_enter(struct pt_regs *regs, long id); sys_exit(struct pt_regs *regs, long ret).
struct raw_args {
    u64 args[2];
};

SEC("raw_tracepoint/sys_enter")
int sys_enter(struct raw_args *ctx) {
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tid = (u32)pid_tgid;
    s64 nr = (s64)ctx->args[1];
    if (nr == 60 || nr == 231) {
        // exit, exit_group: the thread ends here; so does its entry.
        bpf_map_delete_elem(&START, &tid);
        return 0;
    }
    struct start st = {bpf_ktime_get_ns(), (u64)nr};
    bpf_map_update_elem(&START, &tid, &st, ANY);
    return 0;
}

SEC("raw_tracepoint/sys_exit")
int sys_exit(struct raw_args *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct start *st = bpf_map_lookup_elem(&START, &tid);
    if (!st)
        return 0; // entered before we attached
    u64 d = bpf_ktime_get_ns() - st->ns;
    u64 nr = st->nr;
    if (nr >= NR_MAX)
        return 0;
    u32 b = bucket(d);
    if (b >= BUCKETS)
        b = BUCKETS - 1;
    u32 at = (u32)nr * BUCKETS + b;
    u64 *c = bpf_map_lookup_elem(&HIST, &at);
    if (c)
        __sync_fetch_and_add(c, 1);
    at = NR_MAX * BUCKETS + (u32)nr;
    u64 *sum = bpf_map_lookup_elem(&HIST, &at);
    if (sum)
        __sync_fetch_and_add(sum, d);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
