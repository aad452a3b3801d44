// SPDX-License-Identifier: GPL-2.0
// kansoku: system call latency, aggregated in the kernel.
//
// sys_enter stamps the thread's entry time and call; sys_exit takes the
// difference and counts it into a log-linear histogram per system call
// (4 buckets per power of two: ±12 % resolution from 4 ns to 4.3 s; longer
// ones in the last bucket), and adds it to the call's total time. Calls
// that wait on a futex (futex WAIT, WAIT_BITSET, LOCK_PI, LOCK_PI2,
// WAIT_REQUEUE_PI; futex_waitv, futex_wait) also go into a histogram of
// their own, the pseudo-call FUTEX_WAITS: user-space lock waits. The
// histograms are one array, indexed directly (the verifier inlines the
// lookup: no hashing) and counted with atomic adds; user space maps the
// array into its memory and reads it without a system call. Nothing per
// event leaves the kernel.

#include "common.h"

// System calls kept apart (higher numbers are not counted) and buckets per
// call; the layout user space reads (src/bpf.rs).
#define NR_MAX 512
#define BUCKETS 128
// The pseudo-call of futex waits (no system call has this number).
#define FUTEX_WAITS (NR_MAX - 1)

// Entry time and call, in a slot per thread: slot = thread id mod SLOTS,
// an array (the verifier inlines the lookup: no hashing, nothing to create
// or delete). A slot names its thread; when two threads of the same slot
// are inside a call at once, the later entry takes the slot and the
// earlier's exit is counted as lost (LOST), not measured.
#define SLOTS 65536
struct start {
    u64 ns;
    u32 tid;
    u32 nr; // the call, | WAITS_BIT when it waits on a futex
};
#define WAITS_BIT (1U << 31)
struct map_def SEC("maps") START = {MAP_ARRAY, sizeof(u32), sizeof(struct start), SLOTS, 0};

// The pseudo-call whose first bucket counts exits that found their slot
// taken by another thread.
#define LOST (NR_MAX - 2)

// [nr * BUCKETS + bucket]: count; [NR_MAX * BUCKETS + nr]: total ns.
struct map_def SEC("maps") HIST = {MAP_ARRAY, sizeof(u32), sizeof(u64), NR_MAX * BUCKETS + NR_MAX, F_MMAPABLE};

// Raw tracepoints (not the classic ones): the kernel calls the program
// with the tracepoint's own arguments instead of first formatting a trace
// record — the record is most of a classic tracepoint's cost.
// sys_enter(struct pt_regs *regs, long id); sys_exit(struct pt_regs *regs, long ret).
struct raw_args {
    u64 args[2];
};

// The futex operation is the second argument, struct pt_regs's si (its
// 14th word on x86-64), read from the registers the call was made with.
#define PT_REGS_SI 13

INLINE int waits(s64 nr, u64 regs) {
    if (nr == 449 || nr == 455) // futex_waitv, futex_wait
        return 1;
    if (nr != 202) // futex
        return 0;
    u64 op = 0;
    bpf_probe_read_kernel(&op, sizeof(op), (const void *)(regs + PT_REGS_SI * 8));
    op &= 127; // FUTEX_CMD_MASK: without PRIVATE_FLAG (128) and CLOCK_REALTIME (256)
    return op == 0 || op == 9 || op == 6 || op == 13 || op == 11;
}

SEC("raw_tracepoint/sys_enter")
int sys_enter(struct raw_args *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u32 slot = tid & (SLOTS - 1);
    struct start *st = bpf_map_lookup_elem(&START, &slot);
    if (!st)
        return 0;
    s64 nr = (s64)ctx->args[1];
    st->ns = bpf_ktime_get_ns();
    st->tid = tid;
    st->nr = (u32)nr | (waits(nr, ctx->args[0]) ? WAITS_BIT : 0);
    return 0;
}

// One event of call `nr` in bucket `b`, `d` ns long.
INLINE void count(u64 nr, u32 b, u64 d) {
    u32 at = (u32)nr * BUCKETS + b;
    u64 *c = bpf_map_lookup_elem(&HIST, &at);
    if (c)
        __sync_fetch_and_add(c, 1);
    at = NR_MAX * BUCKETS + (u32)nr;
    u64 *sum = bpf_map_lookup_elem(&HIST, &at);
    if (sum)
        __sync_fetch_and_add(sum, d);
}

INLINE void count_lost(void) {
    u32 at = LOST * BUCKETS;
    u64 *c = bpf_map_lookup_elem(&HIST, &at);
    if (c)
        __sync_fetch_and_add(c, 1);
}

SEC("raw_tracepoint/sys_exit")
int sys_exit(struct raw_args *ctx) {
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u32 slot = tid & (SLOTS - 1);
    struct start *st = bpf_map_lookup_elem(&START, &slot);
    if (!st || st->tid == 0)
        return 0; // no entry since we attached
    // Another thread's name: it entered after this thread did and took
    // the slot (or this call began before we attached). Not measured.
    if (st->tid != tid) {
        count_lost();
        return 0;
    }
    u64 d = bpf_ktime_get_ns() - st->ns;
    u32 nr = st->nr & ~WAITS_BIT;
    u32 wait = st->nr & WAITS_BIT;
    if (nr >= LOST)
        return 0;
    u32 b = bucket(d);
    if (b >= BUCKETS)
        b = BUCKETS - 1;
    count(nr, b, d);
    if (wait)
        count(FUTEX_WAITS, b, d);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
