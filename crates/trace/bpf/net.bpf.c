// SPDX-License-Identifier: GPL-2.0
// kansoku: time packets wait in network queueing disciplines, aggregated
// in the kernel.
//
// qdisc:qdisc_enqueue stamps a packet (by its skb's address) as it enters
// a device's qdisc; qdisc:qdisc_dequeue, as the qdisc hands it to the
// driver, counts the wait into a log-linear histogram by interface index.
// A rate-limited or congested link shows as packets waiting; an idle one
// as microseconds. Packets a qdisc drops never dequeue: the stamps live in
// an LRU map, so they age out. A bulk dequeue names its first packet only;
// the others are not counted.

#include "common.h"

enum { MAP_LRU_HASH = 9 };

// skb address -> when it was queued.
struct map_def SEC("maps") QUEUED = {MAP_LRU_HASH, sizeof(u64), sizeof(u64), 65536, 0};

#define SUM 0xffffffff
struct key {
    u32 ifindex;
    u32 bucket;
};
struct map_def SEC("maps") COUNTS = {MAP_HASH, sizeof(struct key), sizeof(u64), 4096, 0};

struct enqueue_args {
    u64 common;
    u64 qdisc;
    u64 txq;
    u64 skbaddr;
    int ifindex;
};

struct dequeue_args {
    u64 common;
    u64 qdisc;
    u64 txq;
    int packets;
    int pad;
    u64 skbaddr;
    int ifindex;
};

SEC("tracepoint/qdisc/qdisc_enqueue")
int qdisc_enqueue(struct enqueue_args *ctx) {
    u64 skb = ctx->skbaddr;
    u64 now = bpf_ktime_get_ns();
    bpf_map_update_elem(&QUEUED, &skb, &now, ANY);
    return 0;
}

SEC("tracepoint/qdisc/qdisc_dequeue")
int qdisc_dequeue(struct dequeue_args *ctx) {
    u64 skb = ctx->skbaddr;
    if (!skb)
        return 0; // nothing dequeued
    u64 *t = bpf_map_lookup_elem(&QUEUED, &skb);
    if (!t)
        return 0;
    u64 d = bpf_ktime_get_ns() - *t;
    bpf_map_delete_elem(&QUEUED, &skb);
    struct key k = {(u32)ctx->ifindex, bucket(d)};
    add_to(&COUNTS, &k, 1);
    k.bucket = SUM;
    add_to(&COUNTS, &k, d);
    return 0;
}

char LICENSE[] SEC("license") = "GPL";
