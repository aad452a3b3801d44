//! What the poller remembers about one polled OID between answers: the last
//! raw value for counter increases (modular by the type the agent declared),
//! and when the value last changed, to find how often the agent really
//! updates it. Pure: the poller feeds it values and times; tests feed it
//! sequences.

/// A value as the agent sent it, exactly (Counter64 above 2^53 included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    Counter32(u32),
    Counter64(u64),
    /// Any other numeric value, as f64 bits.
    Other(u64),
}

/// Number of recent gaps between changes the update period is estimated from.
const GAPS: usize = 8;

#[derive(Debug, Clone, Default)]
pub struct OidTrack {
    last: Option<Raw>,
    last_change_ns: Option<i64>,
    gaps_ns: [i64; GAPS],
    n_gaps: usize,
    period_ns: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// Counter increase since the previous answer, modulo the counter's width;
    /// None on the first answer, after an agent restart, or for non-counters.
    pub increase: Option<u64>,
    /// The value repeats the previous one although the agent is known to
    /// refresh it only every `period` (> 1.5 intervals): an old answer.
    pub stale: bool,
    /// The update period estimate moved (by half an interval or more).
    pub period_changed: bool,
}

impl OidTrack {
    /// Records the value answered for the interval at `t_ns`. `restarted`: the
    /// agent's sysUpTime went backwards in this answer, so counters restarted
    /// from zero and the previous value is no baseline.
    pub fn observe(&mut self, raw: Raw, t_ns: i64, restarted: bool, interval_ns: i64) -> Observation {
        let increase = match (self.last, raw) {
            _ if restarted => None,
            (Some(Raw::Counter32(a)), Raw::Counter32(b)) => Some(b.wrapping_sub(a) as u64),
            (Some(Raw::Counter64(a)), Raw::Counter64(b)) => Some(b.wrapping_sub(a)),
            _ => None,
        };
        let repeated = self.last == Some(raw);
        let mut period_changed = false;
        if self.last.is_some() && !repeated {
            if let Some(prev) = self.last_change_ns {
                self.gaps_ns[self.n_gaps % GAPS] = t_ns - prev;
                self.n_gaps += 1;
                period_changed = self.estimate(interval_ns);
            }
            self.last_change_ns = Some(t_ns);
        }
        self.last = Some(raw);
        let stale = repeated && self.period_ns.is_some_and(|p| p * 2 > interval_ns * 3);
        Observation { increase, stale, period_changed }
    }

    /// The agent's effective update period for this value: the shortest of
    /// the last few gaps between changes (an agent cannot change a value more
    /// often than it refreshes it; a gap spanning refreshes without change is
    /// longer). Needs two gaps.
    pub fn period_ns(&self) -> Option<i64> {
        self.period_ns
    }

    fn estimate(&mut self, interval_ns: i64) -> bool {
        if self.n_gaps < 2 {
            return false;
        }
        let n = self.n_gaps.min(GAPS);
        let p = self.gaps_ns[..n].iter().copied().min();
        let moved = match (self.period_ns, p) {
            (Some(old), Some(new)) => (old - new).abs() * 2 >= interval_ns,
            _ => true,
        };
        self.period_ns = p;
        moved
    }
}

/// Whether sysUpTime going from `prev` to `now` (centiseconds) means the agent
/// restarted, rather than the 497-day wrap of a 32-bit TimeTicks.
pub fn restarted(prev: u32, now: u32) -> bool {
    now < prev && !(prev > 0xf000_0000 && now < 0x1000_0000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const I: i64 = 100_000_000;

    #[test]
    fn counter32_wraps_modulo_its_width() {
        let mut t = OidTrack::default();
        assert_eq!(t.observe(Raw::Counter32(u32::MAX - 10), 0, false, I).increase, None);
        assert_eq!(t.observe(Raw::Counter32(5), I, false, I).increase, Some(16));
        assert_eq!(t.observe(Raw::Counter32(5), 2 * I, false, I).increase, Some(0));
    }

    #[test]
    fn counter64_above_2_pow_53_is_exact() {
        let mut t = OidTrack::default();
        let base = (1u64 << 60) + 1;
        t.observe(Raw::Counter64(base), 0, false, I);
        assert_eq!(t.observe(Raw::Counter64(base + 1), I, false, I).increase, Some(1));
        assert_eq!(t.observe(Raw::Counter64(2), 2 * I, false, I).increase, Some(u64::MAX - base + 2), "wraps at 2^64");
    }

    #[test]
    fn restart_rebaselines_and_type_change_too() {
        let mut t = OidTrack::default();
        t.observe(Raw::Counter32(1000), 0, false, I);
        assert_eq!(t.observe(Raw::Counter32(3), I, true, I).increase, None, "no spike after a restart");
        assert_eq!(t.observe(Raw::Counter32(8), 2 * I, false, I).increase, Some(5));
        assert_eq!(t.observe(Raw::Counter64(9), 3 * I, false, I).increase, None);
        assert!(restarted(500, 10));
        assert!(!restarted(0xffff_fff0, 5), "the 497-day wrap is not a restart");
        assert!(!restarted(10, 500));
    }

    #[test]
    fn finds_a_three_second_cache_and_flags_repeats() {
        // The agent refreshes every 3 s (30 intervals); we poll every interval.
        let mut t = OidTrack::default();
        let mut stale = 0;
        for k in 0..200i64 {
            let v = (k / 30) as u32 * 7;
            let o = t.observe(Raw::Counter32(v), k * I, false, I);
            stale += o.stale as u32;
        }
        assert_eq!(t.period_ns(), Some(30 * I));
        // Known from the second gap (k = 90) on; of k = 91..=199 all but the
        // changes at 120, 150 and 180 repeat.
        assert_eq!(stale, 109 - 3);
    }

    #[test]
    fn a_value_changing_every_interval_is_never_stale() {
        let mut t = OidTrack::default();
        for k in 0..50i64 {
            assert!(!t.observe(Raw::Other((k as f64).to_bits()), k * I, false, I).stale);
        }
        assert_eq!(t.period_ns(), Some(I));
    }
}
