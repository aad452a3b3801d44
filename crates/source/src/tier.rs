//! Downsampled tiers as readers see them: per period (a second, a minute),
//! the min, max, sum and count of a series' raw samples. How a store keeps
//! them on disk is its own (`store::tier`); this is the shape every store
//! answers `Source::read_tier` with, and the arithmetic that builds and
//! merges them.

use codec::decimal::{decimal_scale, round_decimal};

pub const SECOND: i64 = 1_000_000_000;
pub const MINUTE: i64 = 60 * SECOND;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierAgg {
    Min,
    Max,
    Sum,
    Count,
}

pub const AGGS: [TierAgg; 4] = [TierAgg::Min, TierAgg::Max, TierAgg::Sum, TierAgg::Count];

/// One tier of one series over some range: a point per non-empty period,
/// stamped with the period's start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tier {
    pub ts: Vec<i64>,
    pub min: Vec<f64>,
    pub max: Vec<f64>,
    pub sum: Vec<f64>,
    pub count: Vec<f64>,
    /// What `min` and `max` are to be divided by: 1 (they are the values)
    /// except in a part a query folds into buckets
    /// (`store::tier::TierBytes::decode_for_folding`).
    pub scale: Scale,
}

/// Divisors of a tier's `min` and `max` columns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub min: f64,
    pub max: f64,
}

impl Scale {
    pub const UNIT: Scale = Scale { min: 1.0, max: 1.0 };
}

impl Default for Scale {
    fn default() -> Scale {
        Scale::UNIT
    }
}

impl Tier {
    pub fn column(&self, agg: TierAgg) -> &[f64] {
        match agg {
            TierAgg::Min => &self.min,
            TierAgg::Max => &self.max,
            TierAgg::Sum => &self.sum,
            TierAgg::Count => &self.count,
        }
    }

    pub fn column_mut(&mut self, agg: TierAgg) -> &mut Vec<f64> {
        self.parts_mut(agg).1
    }

    /// Aggregates raw samples (time-ordered) into periods of `res` ns.
    /// Where the samples are decimals (counters in hundredths, say), each
    /// sum is rounded to their decimals: exact, and stored as compactly and
    /// decoded as fast as the samples themselves.
    pub fn build(ts: &[i64], vals: &[f64], res: i64) -> Tier {
        let mut t = Tier::default();
        let scale = decimal_scale(vals);
        let mut i = 0;
        while i < ts.len() {
            let start = ts[i] - ts[i].rem_euclid(res);
            // The last period of i64 has no end: it takes the rest.
            let j = match start.checked_add(res) {
                Some(end) => i + ts[i..].partition_point(|&x| x < end),
                None => ts.len(),
            };
            // Staleness markers end a series; they are not samples.
            let period = &vals[i..j];
            let v = || period.iter().copied().filter(|v| v.to_bits() != model::STALE_NAN);
            i = j;
            let count = v().count();
            if count == 0 {
                continue;
            }
            t.ts.push(start);
            t.min.push(v().fold(f64::INFINITY, f64::min));
            t.max.push(v().fold(f64::NEG_INFINITY, f64::max));
            let sum = compensated_sum(v());
            t.sum.push(scale.map_or(sum, |k| round_decimal(sum, k)));
            t.count.push(count as f64);
        }
        t
    }

    /// Appends `other`, which starts after this one ends (or merges a period
    /// both hold, as happens when a block boundary falls inside a second).
    pub fn extend(&mut self, other: &Tier) {
        debug_assert_eq!(self.scale, Scale::UNIT, "BUG: extending a tier left undivided");
        // `other`'s minima and maxima divided as they are copied; by 1 (its
        // values, or an XOR column) left as they are, to the bit (dividing
        // would quiet a signalling NaN).
        let divided = |v: f64, by: f64| if by == 1.0 { v } else { v / by };
        let (min, max) = (|v| divided(v, other.scale.min), |v| divided(v, other.scale.max));
        let mut k = 0;
        if let (Some(&last), Some(&first)) = (self.ts.last(), other.ts.first())
            && last == first
        {
            let n = self.ts.len() - 1;
            self.min[n] = self.min[n].min(min(other.min[0]));
            self.max[n] = self.max[n].max(max(other.max[0]));
            self.sum[n] += other.sum[0];
            self.count[n] += other.count[0];
            k = 1;
        }
        self.ts.extend_from_slice(&other.ts[k..]);
        self.min.extend(other.min[k..].iter().map(|&v| min(v)));
        self.max.extend(other.max[k..].iter().map(|&v| max(v)));
        self.sum.extend_from_slice(&other.sum[k..]);
        self.count.extend_from_slice(&other.count[k..]);
    }

    /// The timestamps and one column, both mutable.
    pub fn parts_mut(&mut self, agg: TierAgg) -> (&mut Vec<i64>, &mut Vec<f64>) {
        match agg {
            TierAgg::Min => (&mut self.ts, &mut self.min),
            TierAgg::Max => (&mut self.ts, &mut self.max),
            TierAgg::Sum => (&mut self.ts, &mut self.sum),
            TierAgg::Count => (&mut self.ts, &mut self.count),
        }
    }
}

/// The sum of `vals` with Neumaier's compensation (as Prometheus adds a
/// window): a period's sum is then its exact sum rounded once, not a plain
/// sum's accumulated rounding (1e16, 1, −1e16 sums to 1, not 0).
fn compensated_sum(vals: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut c) = (0.0f64, 0.0f64);
    for x in vals {
        let t = sum + x;
        c += if sum.abs() >= x.abs() { (sum - t) + x } else { (x - t) + sum };
        sum = t;
    }
    if sum.is_finite() { sum + c } else { sum }
}
