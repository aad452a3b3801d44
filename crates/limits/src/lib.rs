//! Component limits against theory — seed 004 (`seeds/004_54fe8b3ff29a2f4d.txt`)
//! measures each component's limit and sets it beside the data sheet's:
//! disk read speed by position (zones: sectors per track × bytes per sector
//! × rpm / 60) and by read size, Ethernet's payload limit (10⁹/8 ×
//! 1480/1521); seed 001 (`seeds/001_ad0cddd3f1c2901a.txt`) adds synchronous
//! against asynchronous writes (an fsync costs 2–3 rotations). Here: the
//! arithmetic with every step spelled out (`theory`), the disk measured with
//! O_DIRECT reads (never a write to what the user did not hand over) and
//! writes under each sync policy on a scratch file (`disk`), TCP payload
//! throughput between two network namespaces over a veth pair shaped by
//! `tc tbf` (`net`), and the CPU and memory baselines results from other
//! machines are put in proportion with (`cpu`). `kansoku lab limits`
//! (crate `lab`) runs them and writes the result and its report.
//!
//! The disk's reads go by position, by read size and by queue depth
//! (`disk::{target, by_position, by_size, by_depth}`), its writes under each
//! sync policy (`disk::writes`, `Sync`); a data sheet can come from a file
//! (`theory::DataSheet`); the network's two ends are `net::serve` and
//! `net::send` in a `net::Pair` of namespaces.

pub mod cpu;
pub mod disk;
pub mod net;
pub mod theory;

/// A quantile of sorted values (nearest rank); NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}
