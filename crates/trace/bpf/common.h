// SPDX-License-Identifier: GPL-2.0
// What every kansoku BPF program shares: types, the few helpers (declared
// by number: no libbpf headers needed), the legacy map definition aya
// reads, and the log-linear bucket of a latency (src/hist.rs mirrors it).

typedef unsigned long long u64;
typedef long long s64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define SEC(name) __attribute__((section(name), used))
#define INLINE static inline __attribute__((always_inline))

enum { MAP_HASH = 1, MAP_ARRAY = 2 };
enum { ANY = 0, NOEXIST = 1 };
enum { F_MMAPABLE = 1 << 10 };

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *src) = (void *)113;

struct map_def {
    u32 type, key_size, value_size, max_entries, flags;
};

// 0..3 hold 0..3 exactly; above, 4 × the highest set bit plus the next
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

// Adds `n` to the counter at `key` of hash map `map`, creating it; when
// another CPU created it first, adds to theirs.
INLINE void add_to(void *map, const void *key, u64 n) {
    u64 *c = bpf_map_lookup_elem(map, key);
    if (c) {
        __sync_fetch_and_add(c, n);
    } else if (bpf_map_update_elem(map, key, &n, NOEXIST) != 0) {
        c = bpf_map_lookup_elem(map, key);
        if (c)
            __sync_fetch_and_add(c, n);
    }
}
