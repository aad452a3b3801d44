//! The paper's table of an event type over a range (seed 001's LKST
//! tables): count, total and mean time, and the distribution's minimum,
//! median, p99 and maximum — from the stored histogram counters' increases.
//! Pure; the API reads the series and shapes the JSON.

/// One event type (a system call) over a range.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub name: String,
    pub count: f64,
    pub sum_s: f64,
    pub mean_s: Option<f64>,
    /// The lowest used bucket's lower bound (latencies are at least this).
    pub min_s: Option<f64>,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    /// The highest used bucket's upper bound (None: past the last bound).
    pub max_s: Option<f64>,
}

/// How much a counter grew over its samples (a drop is a restart from 0,
/// as PromQL's `increase` reads it), from `baseline` (its value at the
/// range's start; 0 if it began inside the range).
pub fn increase(baseline: f64, vals: &[f64]) -> f64 {
    let mut prev = baseline;
    let mut total = 0.0;
    for &v in vals {
        total += if v < prev { v } else { v - prev };
        prev = v;
    }
    total
}

/// The quantile `q` of a cumulative histogram (`le` ascending, `+Inf`
/// last), interpolated within its bucket as `histogram_quantile` does —
/// from the bucket's own lower bound where it is one of ours (only used
/// buckets are stored, so the previous `le` may be far below); in the
/// `+Inf` bucket, the last finite bound.
pub fn quantile(q: f64, cumulative: &[(f64, f64)]) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, c) in cumulative {
        if c >= rank {
            if le.is_infinite() {
                return Some(lower.0);
            }
            let within = if c > lower.1 { (rank - lower.1) / (c - lower.1) } else { 1.0 };
            let from = crate::hist::lower_of_le(le).unwrap_or(lower.0).max(lower.0);
            return Some(from + (le - from) * within);
        }
        lower = (le, c);
    }
    Some(lower.0)
}

/// The row of one event type from its buckets' increases (`le` ascending,
/// `+Inf` last; not cumulative: each bucket's own count), its time's
/// increase (seconds) and its count's.
pub fn row(name: &str, buckets: &[(f64, f64)], sum_s: f64, count: f64) -> Row {
    let mut cumulative = Vec::with_capacity(buckets.len());
    let mut running = 0.0;
    for &(le, n) in buckets {
        running += n;
        cumulative.push((le, running));
    }
    let used: Vec<usize> = (0..buckets.len()).filter(|&i| buckets[i].1 > 0.0).collect();
    let min_s = used.first().map(|&i| {
        let prev = if i == 0 { 0.0 } else { buckets[i - 1].0 };
        crate::hist::lower_of_le(buckets[i].0).unwrap_or(prev).max(prev)
    });
    let max_s = used.last().and_then(|&i| buckets[i].0.is_finite().then_some(buckets[i].0));
    Row {
        name: name.to_owned(),
        count,
        sum_s,
        mean_s: (count > 0.0).then(|| sum_s / count),
        min_s,
        p50_s: quantile(0.5, &cumulative),
        p99_s: quantile(0.99, &cumulative),
        max_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_grow_through_restarts() {
        assert_eq!(increase(10.0, &[12.0, 15.0]), 5.0);
        assert_eq!(increase(10.0, &[12.0, 3.0, 4.0]), 2.0 + 3.0 + 1.0);
        assert_eq!(increase(0.0, &[]), 0.0);
    }

    #[test]
    fn rows_read_their_distribution() {
        // 90 calls under 1 µs, 9 under 2 µs, 1 past every bound (bounds
        // that are none of our buckets: interpolated from the previous).
        let b = [(1e-6, 90.0), (2e-6, 9.0), (f64::INFINITY, 1.0)];
        let r = row("read", &b, 0.5, 100.0);
        assert_eq!((r.count, r.mean_s), (100.0, Some(0.005)));
        assert_eq!((r.min_s, r.max_s), (Some(0.0), None));
        let p50 = r.p50_s.unwrap();
        assert!((p50 - 50.0 / 90.0 * 1e-6).abs() < 1e-15, "{p50}");
        assert!((r.p99_s.unwrap() - 2e-6).abs() < 1e-15);
        let quiet = row("x", &[(1e-6, 0.0), (2e-6, 4.0), (f64::INFINITY, 0.0)], 6e-6, 4.0);
        assert_eq!((quiet.min_s, quiet.max_s), (Some(1e-6), Some(2e-6)));
        assert_eq!(row("none", &[], 0.0, 0.0).p50_s, None);
        // Our buckets: the lowest used one's own lower bound is the minimum,
        // and the median interpolates within [896 ns, 1024 ns).
        let ours = row("getppid", &[(crate::hist::le(39), 10.0), (f64::INFINITY, 0.0)], 9e-6, 10.0);
        assert_eq!(ours.min_s, Some(896e-9));
        assert!((ours.p50_s.unwrap() - 960e-9).abs() < 1e-15, "{:?}", ours.p50_s);
    }
}
