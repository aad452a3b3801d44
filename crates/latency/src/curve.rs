//! The degradation curve's arithmetic: PD[x] = (P[0] − P[x]) / P[0] × 100
//! from the median throughput at each step, a 95 % bootstrap interval of
//! each PD (both steps' runs resampled), the knee by the kneedle method
//! (Satopää et al. 2011: on the curve scaled to the unit square, the point
//! farthest below the line from its first to its last point — for a curve
//! that stays flat and then climbs, where it turns up) with a bootstrap
//! interval, and the tier budget: the most hops of a given latency whose
//! summed latency keeps PD within a budget (PD interpolated linearly
//! between measured steps, never extrapolated past the last one).

use experiment::stats::{Rng, interval95 as interval, median};

/// One step of the curve.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// Injected latency (ns).
    pub x_ns: f64,
    /// Median throughput of its runs.
    pub throughput: f64,
    /// Degradation against the step at 0, per cent.
    pub pd: f64,
    /// 95 % bootstrap interval of `pd`.
    pub pd_interval: Option<(f64, f64)>,
}

/// PD of throughput `p` against `p0`, per cent.
pub fn pd(p0: f64, p: f64) -> f64 {
    (p0 - p) / p0 * 100.0
}

/// The curve from each step's throughputs (`(x_ns, runs)`, x ascending, the
/// first at 0); None without a step at 0 or with an empty one.
pub fn curve(steps: &[(f64, Vec<f64>)], rounds: usize) -> Option<Vec<Point>> {
    let (x0, base) = steps.first()?;
    if *x0 != 0.0 || steps.iter().any(|s| s.1.is_empty()) {
        return None;
    }
    let p0 = median(base);
    let mut rng = Rng::new(0x006b_616e_736f_6b75);
    Some(
        steps
            .iter()
            .map(|(x, runs)| {
                let p = median(runs);
                let boot: Vec<f64> =
                    (0..rounds).map(|_| pd(median(&rng.resample(base)), median(&rng.resample(runs)))).collect();
                Point { x_ns: *x, throughput: p, pd: pd(p0, p), pd_interval: interval(boot) }
            })
            .collect(),
    )
}

/// The kneedle knee of an increasing curve (x ascending): the x where the
/// curve, scaled to the unit square, lies farthest below the diagonal.
/// None for fewer than three points, a flat curve, or one that never lies
/// below the diagonal (no knee: it climbs from the start).
pub fn knee(xs: &[f64], ys: &[f64]) -> Option<f64> {
    if xs.len() < 3 || xs.len() != ys.len() {
        return None;
    }
    let (x0, x1) = (xs[0], xs[xs.len() - 1]);
    let (y0, y1) = ys.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &y| (a.min(y), b.max(y)));
    if x1 <= x0 || y1 <= y0 {
        return None;
    }
    let (best, gap) = xs
        .iter()
        .zip(ys)
        .map(|(&x, &y)| (x, (x - x0) / (x1 - x0) - (y - y0) / (y1 - y0)))
        .fold((f64::NAN, 0.0), |(bx, bg), (x, g)| if g > bg { (x, g) } else { (bx, bg) });
    (gap > 0.0).then_some(best)
}

/// The knee's 95 % bootstrap interval: each step's runs resampled, the
/// curve and its knee found again.
pub fn knee_interval(steps: &[(f64, Vec<f64>)], rounds: usize) -> Option<(f64, f64)> {
    if steps.len() < 3 || steps.iter().any(|s| s.1.is_empty()) {
        return None;
    }
    let xs: Vec<f64> = steps.iter().map(|s| s.0).collect();
    let mut rng = Rng::new(0x6b6e_6565);
    let knees: Vec<f64> = (0..rounds)
        .filter_map(|_| {
            let p: Vec<f64> = steps.iter().map(|s| median(&rng.resample(&s.1))).collect();
            let ys: Vec<f64> = p.iter().map(|&v| pd(p[0], v)).collect();
            knee(&xs, &ys)
        })
        .collect();
    interval(knees)
}

/// The closed-loop model's PD at `x_ns` (per cent): `in_flight` requests
/// outstanding, each operation making `calls` delayed calls; by Little's
/// law throughput is N / R, and R grows by K·x: P[x] = N / (N/P0 + K·x).
pub fn closed_loop_pd(p0: f64, in_flight: f64, calls: f64, x_ns: f64) -> f64 {
    let added = calls * x_ns * 1e-9 * p0;
    added / (in_flight + added) * 100.0
}

/// How many hops of `hop_ns` fit within `budget` per cent of degradation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub tiers: usize,
    /// The last step measured was reached still within budget: "at least".
    pub at_least: bool,
}

/// PD at `x` on the curve, linear between steps; None past the last.
pub fn pd_at(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let i = points.iter().position(|p| p.0 >= x)?;
    if i == 0 || points[i].0 == x {
        return Some(points[i].1);
    }
    let ((xa, ya), (xb, yb)) = (points[i - 1], points[i]);
    Some(ya + (yb - ya) * (x - xa) / (xb - xa))
}

/// The tier budget on a curve of (x_ns, PD %).
pub fn tier_budget(points: &[(f64, f64)], hop_ns: f64, budget: f64) -> Budget {
    let mut tiers = 0;
    loop {
        match pd_at(points, (tiers + 1) as f64 * hop_ns) {
            Some(pd) if pd <= budget => tiers += 1,
            Some(_) => return Budget { tiers, at_least: false },
            None => return Budget { tiers, at_least: true },
        }
    }
}

/// Seed 003's OLTP curve as its text states it: PD under 5 % up to the
/// knee at 1,500 ns (five switch stages), then ~15 % at 2,100 ns (seven):
/// 1.4 times the knee. Its figure's other points are not in the text.
pub const PAPER_KNEE_NS: f64 = 1500.0;
pub const PAPER_PD_AT_KNEE: f64 = 5.0;
pub const PAPER_PD_PAST_KNEE: f64 = 15.0;
/// Where the paper's last point lies, in knees.
pub const PAPER_PAST_KNEE: f64 = 2100.0 / 1500.0;

/// A curve's shape in the paper's terms: its knee, PD at it and at 1.4
/// times it (where the paper measured its last point); None without a
/// knee. PD past the last step is None.
pub fn shape(points: &[(f64, f64)], knee_ns: Option<f64>) -> Option<(f64, Option<f64>, Option<f64>)> {
    let k = knee_ns?;
    Some((k, pd_at(points, k), pd_at(points, k * PAPER_PAST_KNEE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's OLTP shape: under 5 % to a knee near 1,500 ns, then up
    /// to 15 % at 2,100.
    const XS: [f64; 8] = [0.0, 300.0, 600.0, 900.0, 1200.0, 1500.0, 1800.0, 2100.0];
    const PD: [f64; 8] = [0.0, 0.5, 1.0, 1.5, 2.5, 4.0, 9.0, 15.0];

    #[test]
    fn the_paper_s_shape_in_its_own_terms() {
        let pairs: Vec<(f64, f64)> = XS.iter().copied().zip(PD).collect();
        let (k, at, past) = shape(&pairs, Some(1500.0)).unwrap();
        assert_eq!((k, at, past), (1500.0, Some(4.0), Some(15.0)));
        assert_eq!(shape(&pairs, Some(1800.0)).unwrap().2, None, "1.4 x 1,800 is past the last step");
        assert_eq!(shape(&pairs, None), None);
    }

    #[test]
    fn the_knee_of_the_paper_s_curve() {
        assert_eq!(knee(&XS, &PD), Some(1500.0));
        // A straight line or a curve that climbs at once has none.
        assert_eq!(knee(&[0.0, 1.0, 2.0], &[0.0, 1.0, 2.0]), None);
        assert_eq!(knee(&[0.0, 1.0, 2.0], &[0.0, 5.0, 6.0]), None);
        assert_eq!(knee(&[0.0, 1.0], &[0.0, 1.0]), None);
    }

    #[test]
    fn the_closed_loop_model() {
        // One request in flight at 1,000,000/s (1 us each): 1 us more
        // halves it; 8 in flight barely notice.
        assert!((closed_loop_pd(1e6, 1.0, 1.0, 1000.0) - 50.0).abs() < 1e-9);
        assert!((closed_loop_pd(1e6, 8.0, 1.0, 1000.0) - 100.0 / 9.0).abs() < 1e-9);
        assert!((closed_loop_pd(1e6, 1.0, 2.0, 1000.0) - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!(closed_loop_pd(1e6, 1.0, 1.0, 0.0), 0.0);
    }

    #[test]
    fn tier_budgets() {
        let points: Vec<(f64, f64)> = XS.iter().copied().zip(PD).collect();
        // 300 ns hops: PD(1500) = 4 %, PD(1800) = 9 %: five tiers within 5 %.
        assert_eq!(tier_budget(&points, 300.0, 5.0), Budget { tiers: 5, at_least: false });
        // 150 ns hops: PD(1650) = 6.5 % (between 4 and 9): ten.
        assert_eq!(tier_budget(&points, 150.0, 5.0), Budget { tiers: 10, at_least: false });
        // Within budget up to the last step measured: at least seven.
        assert_eq!(tier_budget(&points, 300.0, 20.0), Budget { tiers: 7, at_least: true });
        assert_eq!(tier_budget(&points, 2000.0, 1.0), Budget { tiers: 0, at_least: false });
    }

    #[test]
    fn curves_from_runs_with_intervals() {
        // Throughputs falling with PD; three runs each, ±1 % around it.
        let steps: Vec<(f64, Vec<f64>)> = XS
            .iter()
            .zip(PD)
            .map(|(&x, pd)| {
                let p = 1000.0 * (1.0 - pd / 100.0);
                (x, vec![p * 0.99, p, p * 1.01])
            })
            .collect();
        let c = curve(&steps, 1000).unwrap();
        for (point, want) in c.iter().zip(PD) {
            assert!((point.pd - want).abs() < 1e-9, "{point:?}");
            let (lo, hi) = point.pd_interval.unwrap();
            assert!(lo <= point.pd + 1e-9 && point.pd <= hi + 1e-9 && hi - lo < 5.0, "{point:?}");
        }
        let (lo, hi) = knee_interval(&steps, 500).unwrap();
        assert!(lo <= 1500.0 && 1500.0 <= hi, "{lo} {hi}");
        assert!(curve(&steps[1..], 10).is_none(), "no step at 0");
    }
}
