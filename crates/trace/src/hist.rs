//! The log-linear buckets the BPF programs count into (4 per power of two,
//! ±12 %): bucket `b < 4` holds exactly `b` ns; above, bucket `b` holds
//! `[(4 + b % 4) << (b / 4 − 2), (5 + b % 4) << (b / 4 − 2))` ns. The same
//! computation as `bucket()` in `bpf/common.h` (which the kernel runs);
//! the kernel test checks real latencies land in plausible buckets.

/// The bucket of a latency in ns (the kernel's computation).
pub fn bucket_of(v: u64) -> u32 {
    if v < 4 {
        return v as u32;
    }
    let msb = 63 - v.leading_zeros();
    msb * 4 + ((v >> (msb - 2)) & 3) as u32
}

/// The bucket's bounds in ns: `[lower, upper)` (upper saturates at u64::MAX).
pub fn bounds(b: u32) -> (u64, u64) {
    if b < 4 {
        return (u64::from(b), u64::from(b) + 1);
    }
    let (msb, sub) = (b / 4, u64::from(b % 4));
    let shift = msb.saturating_sub(2);
    ((4 + sub) << shift, (5 + sub).checked_shl(shift).filter(|u| u >> shift == 5 + sub).unwrap_or(u64::MAX))
}

/// A bucket's upper bound as a Prometheus `le` (seconds): the bucket holds
/// latencies below it, to the nanosecond.
pub fn le(b: u32) -> f64 {
    bounds(b).1 as f64 / 1e9
}

/// The lower bound (seconds) of the bucket whose `le` this is; None for an
/// `le` no bucket has (written by something else).
pub fn lower_of_le(le: f64) -> Option<f64> {
    let upper_ns = (le * 1e9).round();
    (0..crate::bpf::BUCKETS as u32).find(|&b| bounds(b).1 as f64 == upper_ns).map(|b| bounds(b).0 as f64 / 1e9)
}

/// Where the last bucket begins (ns): the BPF programs count every longer
/// latency there, and only `le="+Inf"` bounds it (3.76 s).
pub const OVERFLOW_NS: u64 = (4 + (crate::bpf::BUCKETS as u64 - 1) % 4) << ((crate::bpf::BUCKETS as u64 - 1) / 4 - 2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_within_its_buckets_bounds() {
        let mut vals: Vec<u64> = (0..5000).collect();
        vals.extend((0..64).flat_map(|s| [1u64 << s, (1u64 << s) - 1, (1u64 << s) + 1, (3u64 << s) / 2]));
        vals.push(u64::MAX);
        for v in vals {
            let b = bucket_of(v);
            let (lo, hi) = bounds(b);
            assert!(lo <= v && (v < hi || hi == u64::MAX), "{v} in bucket {b} = [{lo}, {hi})");
        }
        // From bucket 8 (4 ns) up, consecutive buckets tile the line.
        for b in 8..255 {
            assert_eq!(bounds(b).1, bounds(b + 1).0, "bucket {b}");
        }
        assert_eq!(bounds(3).1, bounds(8).0);
        assert_eq!(bucket_of(1000), 39); // 1 µs: [896, 1024)
        assert_eq!(bounds(39), (896, 1024));
        assert_eq!(lower_of_le(le(39)), Some(896e-9));
        assert_eq!(OVERFLOW_NS, bounds(crate::bpf::BUCKETS as u32 - 1).0);
        assert_eq!(lower_of_le(0.5), None);
    }
}
