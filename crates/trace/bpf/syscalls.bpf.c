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
//
// No libbpf headers: the few helpers are declared here by number.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long s64;

#define SEC(name) __attribute__((section(name), used))
#define INLINE static inline __attribute__((always_inline))

enum { MAP_HASH = 1, MAP_ARRAY = 2 };
enum { F_MMAPABLE = 1 << 10 };

// System calls kept apart (higher numbers are not counted) and buckets per
// call; the layout user space reads (src/bpf.rs).
#define NR_MAX 512
#define BUCKETS 128
enum { ANY = 0, NOEXIST = 1 };

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;

struct map_def {
    u32 type, key_size, value_size, max_entries, flags;
};

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

// 0..3 hold 0..3 ns exactly; above, 4 × the highest set bit plus the next
// two bits: bucket b (>= 8) holds [(4 + b%4) << (b/4 - 2), (5 + b%4) << (b/4 - 2)).
INLINE u32 bucket(u64 v) {
    if (v < 4)
        return (u32)v;
    u32 msb = 0;
    u64 x = v;
    if (x >> 32) { msb += 32; x >>= 32; }
    if (x >> 16) { msb += 16; x >>= 16; }
    if (x >> 8) { msb += 8; x >>= 8; }
    if (x >> 4) { msb += 4; x >>= 4; }
    if (x >> 2) { msb += 2; x >>= 2; }
    if (x >> 1) { msb += 1; }
    return msb * 4 + (u32)((v >> (msb - 2)) & 3);
}

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
