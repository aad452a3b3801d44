//! Baselines other results are put in proportion with: an integer
//! benchmark per core (alone, then every core at once) and memory
//! bandwidth (read, write, copy of a buffer far larger than the caches).

use std::hint::black_box;
use std::time::{Duration, Instant};

use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;
use serde::Serialize;

/// The integer kernel: xorshift64 and a multiply-add chain, 1 Mi
/// iterations a call (dependent, so it measures the core, not the
/// compiler's vectoriser).
fn kernel(mut x: u64) -> u64 {
    let mut acc = 0u64;
    for _ in 0..(1 << 20) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc = acc.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(x);
    }
    acc
}

/// Iterations per second of [`kernel`] on the calling thread for `time`.
fn integer_rate(time: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    while start.elapsed() < time {
        x = black_box(kernel(black_box(x)));
        n += 1 << 20;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn pin(cpu: usize) -> nix::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set)
}

#[derive(Debug, Clone, Serialize)]
pub struct Cpu {
    /// Million iterations per second on each core, alone.
    pub per_core_mips: Vec<f64>,
    /// With every core running at once, summed.
    pub all_cores_mips: f64,
}

/// The integer benchmark on each online CPU alone, then on all at once.
pub fn integer(cpus: &[u32], time: Duration) -> Cpu {
    let on = |c: u32| {
        std::thread::spawn(move || {
            let _ = pin(c as usize);
            integer_rate(time) / 1e6
        })
    };
    let per_core_mips = cpus.iter().map(|&c| on(c).join().unwrap_or(f64::NAN)).collect();
    let all: Vec<_> = cpus.iter().map(|&c| on(c)).collect();
    let all_cores_mips = all.into_iter().map(|h| h.join().unwrap_or(f64::NAN)).sum();
    Cpu { per_core_mips, all_cores_mips }
}

#[derive(Debug, Clone, Serialize)]
pub struct Memory {
    pub buffer_bytes: usize,
    /// Bytes per second, the best of the rounds.
    pub read: f64,
    pub write: f64,
    /// Bytes copied per second (each read once and written once).
    pub copy: f64,
}

/// Memory bandwidth over a buffer of `bytes` (one thread), best of `rounds`.
pub fn memory(bytes: usize, rounds: usize) -> Memory {
    let words = bytes / 8;
    let mut a = vec![1u64; words];
    let mut b = vec![2u64; words];
    let (mut read, mut write, mut copy) = (0f64, 0f64, 0f64);
    for r in 0..rounds.max(1) {
        let t = Instant::now();
        let sum = a.iter().fold(0u64, |s, &v| s.wrapping_add(v));
        black_box(sum);
        read = read.max(bytes as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        a.fill(r as u64);
        black_box(&a);
        write = write.max(bytes as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        b.copy_from_slice(&a);
        black_box(&b);
        copy = copy.max(bytes as f64 / t.elapsed().as_secs_f64());
    }
    Memory { buffer_bytes: bytes, read, write, copy }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_are_measured() {
        let c = integer(&[0], Duration::from_millis(30));
        assert_eq!(c.per_core_mips.len(), 1);
        assert!(c.per_core_mips[0] > 1.0 && c.all_cores_mips > 1.0, "{c:?}");
        let m = memory(16 << 20, 2);
        assert!(m.read > 1e8 && m.write > 1e8 && m.copy > 1e8, "{m:?}");
    }
}
