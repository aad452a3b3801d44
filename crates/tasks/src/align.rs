//! Counters as they stood at the round's instant. A round is stamped with
//! the instant it was scheduled for (so hosts line up, and timestamps
//! compress to nothing), but its files are read later — by the thread's
//! wake-up delay and the scan before them, tens to hundreds of
//! milliseconds on a busy machine, different every round. A counter
//! stamped early by a varying amount makes its rate wrong by that amount
//! over the interval: a cgroup read 260 ms late after one read on time
//! "used" 2.52 cores of a 2-core machine (issue 44).
//!
//! So each counter is written as it stood at the stamp: interpolated
//! between the previous reading and this one, at the times they were
//! really read. Between two readings a counter is taken to grow evenly —
//! any rate computed from the stamped values is then a weighted mean of
//! rates that really happened, and so within their bounds. A reading with
//! no earlier one, a counter that went back (a reset), or a stamp outside
//! the two readings is written as read.

/// The last reading of each counter, by series id (ids are small and
/// dense: a vector).
#[derive(Debug, Default)]
pub struct Aligner {
    last: Vec<Option<(i64, f64)>>,
}

impl Aligner {
    /// `v`, read at `read_ns`, as the counter `id` stood at `t` (ns, the
    /// same clock); remembers the reading.
    pub fn at(&mut self, id: u32, read_ns: i64, v: f64, t: i64) -> f64 {
        let i = id as usize;
        if self.last.len() <= i {
            self.last.resize(i + 1, None);
        }
        let out = interpolate(self.last[i], read_ns, v, t);
        self.last[i] = Some((read_ns, v));
        out
    }

    /// Forgets `id`'s readings (its series ended; the id is free for
    /// another).
    pub fn forget(&mut self, id: u32) {
        if let Some(slot) = self.last.get_mut(id as usize) {
            *slot = None;
        }
    }
}

/// The counter at `t` on the line from `prev` (time, value) to (`read_ns`,
/// `v`), or `v` where there is no such line.
pub fn interpolate(prev: Option<(i64, f64)>, read_ns: i64, v: f64, t: i64) -> f64 {
    match prev {
        Some((p_ns, p)) if p_ns < t && t < read_ns && v >= p && v.is_finite() && p.is_finite() => {
            p + (v - p) * ((t - p_ns) as f64 / (read_ns - p_ns) as f64)
        }
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter growing at exactly 2 per second, read late by a different
    /// amount each 1 s round: the rate between stamped values is 2 every
    /// round; the readings as read would give 1.26 × and 0.74 × that.
    #[test]
    fn late_readings_keep_the_rate_between_stamps() {
        const S: i64 = 1_000_000_000;
        let mut a = Aligner::default();
        let lateness = [5_000_000, 260_000_000, 3_000_000, 120_000_000, 400_000_000, 1_000_000];
        let mut stamped = Vec::new();
        for (k, late) in lateness.iter().enumerate() {
            let t = 100 * S + k as i64 * S;
            let read = t + late;
            let v = 2.0 * read as f64 / 1e9;
            stamped.push(a.at(7, read, v, t));
        }
        // The first is as read (no earlier reading); every later one is
        // the counter at its stamp.
        assert_eq!(stamped[0], 2.0 * (100 * S + lateness[0]) as f64 / 1e9);
        for (k, w) in stamped.windows(2).enumerate().skip(1) {
            assert!((w[1] - w[0] - 2.0).abs() < 1e-9, "round {k}: {} per second", w[1] - w[0]);
        }
    }

    #[test]
    fn resets_first_readings_and_odd_stamps_are_written_as_read() {
        let mut a = Aligner::default();
        assert_eq!(a.at(3, 1_100, 50.0, 1_000), 50.0, "no earlier reading");
        assert_eq!(a.at(3, 2_100, 10.0, 2_000), 10.0, "a reset");
        assert_eq!(a.at(3, 3_100, 20.0, 3_000), 19.0, "on the line from (2100, 10) to (3100, 20)");
        assert_eq!(a.at(3, 4_100, 30.0, 5_000), 30.0, "a stamp after the reading");
        a.forget(3);
        assert_eq!(a.at(3, 5_100, 40.0, 5_000), 40.0, "a new series on the id");
        assert_eq!(interpolate(Some((0, 1.0)), 10, f64::NAN, 5).to_bits(), f64::NAN.to_bits());
    }
}
