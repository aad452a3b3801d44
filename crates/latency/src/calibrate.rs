//! What the injector really adds, per requested step: a probe makes many
//! `pread` calls of 8 bytes on /dev/zero (through glibc, so the injector
//! sees them) and times each; the same probe without the injector is the
//! base. Added = p50(with) − p50(base), and likewise at p99 (a preempted
//! busy-wait shows there). A step is honoured when its added p50 is within
//! the tolerance of the request (10 % by default); the zero step within the
//! smallest step's.

use std::os::unix::fs::FileExt;
use std::time::Instant;

/// The probe: `calls` timed reads; their durations (ns), sorted.
pub fn probe(calls: usize) -> std::io::Result<Vec<u64>> {
    let f = std::fs::File::open("/dev/zero")?;
    let mut buf = [0u8; 8];
    // Warm: page tables, the injector's lookups of the real functions.
    for _ in 0..1000 {
        f.read_at(&mut buf, 0)?;
    }
    let mut d = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        f.read_at(&mut buf, 0)?;
        d.push(t.elapsed().as_nanos() as u64);
    }
    d.sort_unstable();
    Ok(d)
}

/// The value at quantile `q` of sorted values.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1)]
}

/// One step's calibration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub requested_ns: u64,
    pub added_p50_ns: f64,
    pub added_p99_ns: f64,
    pub honoured: bool,
}

/// Judges a step from the base's and the injected probe's p50 and p99:
/// honoured when the added p50 is within `allowed_ns` of the request.
pub fn judge(requested_ns: u64, base: (u64, u64), with: (u64, u64), allowed_ns: f64) -> Step {
    let added_p50_ns = with.0 as f64 - base.0 as f64;
    let added_p99_ns = with.1 as f64 - base.1 as f64;
    let honoured = (added_p50_ns - requested_ns as f64).abs() <= allowed_ns;
    Step { requested_ns, added_p50_ns, added_p99_ns, honoured }
}

/// What a step may miss its request by: `tolerance` of it, and for the zero
/// step (the injector loaded, waiting for nothing: the curve's reference)
/// the tolerance of the smallest step asked for, below which no step of the
/// curve could be told apart from it anyway.
pub fn allowance_ns(requested_ns: u64, steps: &[u64], tolerance: f64) -> f64 {
    let scale =
        if requested_ns > 0 { requested_ns } else { steps.iter().copied().filter(|&s| s > 0).min().unwrap_or(1_000) };
    tolerance * scale as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_judged_against_their_tolerance() {
        let steps = [0, 300, 1000];
        let allow = |ns| allowance_ns(ns, &steps, 0.1);
        assert!(judge(1000, (100, 200), (1150, 1300), allow(1000)).honoured);
        let s = judge(300, (100, 200), (460, 700), allow(300));
        assert_eq!((s.added_p50_ns, s.added_p99_ns, s.honoured), (360.0, 500.0, false));
        // The zero step may add up to the smallest step's tolerance (30 ns here).
        assert_eq!(allow(0), 30.0);
        assert!(judge(0, (100, 200), (121, 230), allow(0)).honoured);
        assert!(!judge(0, (100, 200), (150, 230), allow(0)).honoured);
        assert_eq!(allowance_ns(0, &[0], 0.1), 100.0);
        assert_eq!(quantile(&[1, 2, 3, 4, 5], 0.5), 3);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn the_probe_times_every_call() {
        let d = probe(2000).unwrap();
        assert_eq!(d.len(), 2000);
        assert!(d.windows(2).all(|w| w[0] <= w[1]) && d[0] > 0);
    }
}

/// A latency step as written on the command line: `0`, `300ns`, `1.5us`
/// (or `µs`), `2ms`, `1s`; a bare number is nanoseconds.
pub fn parse_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: f64 = n.parse().map_err(|_| format!("{s:?}: a latency like 300ns, 1.5us, 2ms"))?;
    let per = match unit {
        "" | "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("{s:?}: the unit is ns, us, ms or s")),
    };
    Ok((n * per).round() as u64)
}

#[cfg(test)]
mod parse_tests {
    #[test]
    fn steps_parse_or_say_why_not() {
        use super::parse_ns;
        assert_eq!(parse_ns("0"), Ok(0));
        assert_eq!(parse_ns("300ns"), Ok(300));
        assert_eq!(parse_ns("1.5us"), Ok(1500));
        assert_eq!(parse_ns("2µs"), Ok(2000));
        assert_eq!(parse_ns("2ms"), Ok(2_000_000));
        assert!(parse_ns("5 parsecs").unwrap_err().contains("unit"));
        assert!(parse_ns("fast").unwrap_err().contains("like 300ns"));
    }
}
