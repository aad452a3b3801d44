// SPDX-License-Identifier: GPL-2.0
// kansoku: block I/O latency and sizes, aggregated in the kernel.
//
// block_rq_insert stamps a request's queueing; block_rq_issue ends its
// queue time (insert -> issue), starts its service time and counts its
// size; block_rq_complete ends its service time (issue -> completion). A
// request is known by (device, sector) — the tracepoint records carry no
// pointer. Counts go into a hash map by (device, what, operation, bucket)
// with atomic adds: block requests are thousands a second, not millions,
// so a hash costs nothing that matters here.
//
// Classic tracepoints (their records are what carries the device and the
// sector); layouts from /sys/kernel/tracing/events/block/*/format.

#include "common.h"

struct req {
    u32 dev;
    u32 pad;
    u64 sector;
};
// Request -> when it was inserted / issued (ns).
struct map_def SEC("maps") QUEUED = {MAP_HASH, sizeof(struct req), sizeof(u64), 16384, 0};
struct map_def SEC("maps") ISSUED = {MAP_HASH, sizeof(struct req), sizeof(u64), 16384, 0};

// What is counted: WHAT_* × OP_* × bucket; bucket SUM holds the total
// (ns or bytes).
enum { WHAT_QUEUE = 0, WHAT_SERVICE = 1, WHAT_BYTES = 2 };
enum { OP_READ = 0, OP_WRITE = 1, OP_OTHER = 2 };
#define SUM 0xffff
struct key {
    u32 dev;
    u8 what;
    u8 op;
    u16 bucket;
};
struct map_def SEC("maps") COUNTS = {MAP_HASH, sizeof(struct key), sizeof(u64), 8192, 0};

struct rq_args { // block_rq_insert, block_rq_issue
    u64 common;
    u32 dev;
    u32 pad;
    u64 sector;
    u32 nr_sector;
    u32 bytes;
    u16 ioprio;
    char rwbs[10];
};

struct done_args { // block_rq_complete
    u64 common;
    u32 dev;
    u32 pad;
    u64 sector;
    u32 nr_sector;
    int error;
    u16 ioprio;
    char rwbs[10];
};

// rwbs: an optional F (flush), then R, W, D (discard), N (none), ...
INLINE u8 op_of(const char *rwbs) {
    char c = rwbs[0] == 'F' ? rwbs[1] : rwbs[0];
    return c == 'R' ? OP_READ : c == 'W' ? OP_WRITE : OP_OTHER;
}

INLINE void add(u32 dev, u8 what, u8 op, u16 b, u64 n) {
    struct key k = {dev, what, op, b};
    add_to(&COUNTS, &k, n);
}

INLINE void count(u32 dev, u8 what, u8 op, u64 v) {
    add(dev, what, op, (u16)bucket(v), 1);
    add(dev, what, op, SUM, v);
}

SEC("tracepoint/block/block_rq_insert")
int rq_insert(struct rq_args *ctx) {
    struct req r = {ctx->dev, 0, ctx->sector};
    u64 now = bpf_ktime_get_ns();
    bpf_map_update_elem(&QUEUED, &r, &now, ANY);
    return 0;
}

SEC("tracepoint/block/block_rq_issue")
int rq_issue(struct rq_args *ctx) {
    struct req r = {ctx->dev, 0, ctx->sector};
    u64 now = bpf_ktime_get_ns();
    u8 op = op_of(ctx->rwbs);
    u64 *q = bpf_map_lookup_elem(&QUEUED, &r);
    if (q) {
        count(r.dev, WHAT_QUEUE, op, now - *q);
        bpf_map_delete_elem(&QUEUED, &r);
    }
    bpf_map_update_elem(&ISSUED, &r, &now, ANY);
    count(r.dev, WHAT_BYTES, op, ctx->bytes);
    return 0;
}

SEC("tracepoint/block/block_rq_complete")
int rq_complete(struct done_args *ctx) {
    struct req r = {ctx->dev, 0, ctx->sector};
    u64 *s = bpf_map_lookup_elem(&ISSUED, &r);
    if (!s)
        return 0; // issued before we attached
    u64 d = bpf_ktime_get_ns() - *s;
    bpf_map_delete_elem(&ISSUED, &r);
    count(r.dev, WHAT_SERVICE, op_of(ctx->rwbs), d);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
