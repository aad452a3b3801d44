//! Whether a change between two results is real: the Mann–Whitney U test
//! (two-sided; exact for small samples without ties, else the normal
//! approximation with tie and continuity corrections — as scipy's
//! `mannwhitneyu` does) and a bootstrap confidence interval of the
//! difference of medians. Rank tests, not means: benchmark repetitions are
//! rarely normal, and an outlier run should not decide.

/// A seeded generator (xorshift64*): enough to shuffle and resample, and
/// the same sequence on every machine, so orders and intervals repeat.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// A number in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }

    /// `v` resampled with replacement (as many values).
    pub fn resample(&mut self, v: &[f64]) -> Vec<f64> {
        (0..v.len()).map(|_| v[self.below(v.len())]).collect()
    }
}

/// The central 95 % of some values (the finite ones); None if there are none.
pub fn interval95(mut v: Vec<f64>) -> Option<(f64, f64)> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * (v.len() - 1) as f64).round() as usize).min(v.len() - 1)];
    Some((at(0.025), at(0.975)))
}

/// The median (the mean of the middle two for an even count); NaN if empty.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// Mann–Whitney U of `a` against `b` and its two-sided p-value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MannWhitney {
    /// U of `a`: pairs (x in a, y in b) with x > y, ties counting half.
    pub u: f64,
    pub p: f64,
    /// Whether p is exact (small samples, no ties) or the normal approximation.
    pub exact: bool,
}

pub fn mann_whitney(a: &[f64], b: &[f64]) -> Option<MannWhitney> {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return None;
    }
    // Ranks of the pooled samples, ties given their mean rank.
    let mut pooled: Vec<(f64, bool)> = a.iter().map(|&x| (x, true)).chain(b.iter().map(|&y| (y, false))).collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = pooled.len();
    let (mut rank_sum_a, mut tie_term, mut ties) = (0.0, 0.0, false);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && pooled[j + 1].0 == pooled[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum_a += rank * pooled[i..=j].iter().filter(|p| p.1).count() as f64;
        if t > 1.0 {
            ties = true;
            tie_term += t * t * t - t;
        }
        i = j + 1;
    }
    let (f1, f2) = (n1 as f64, n2 as f64);
    let u = rank_sum_a - f1 * (f1 + 1.0) / 2.0;
    if !ties && n1 <= 20 && n2 <= 20 {
        return Some(MannWhitney { u, p: exact_p(n1, n2, u), exact: true });
    }
    let mu = f1 * f2 / 2.0;
    let nf = n as f64;
    let var = f1 * f2 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var <= 0.0 {
        return Some(MannWhitney { u, p: 1.0, exact: false });
    }
    let z = ((u - mu).abs() - 0.5).max(0.0) / var.sqrt();
    Some(MannWhitney { u, p: (2.0 * normal_sf(z)).min(1.0), exact: false })
}

/// Exact two-sided p of U for samples of n1 and n2 without ties: the
/// share of the C(n1+n2, n1) orderings whose U is at least as far from
/// the middle.
fn exact_p(n1: usize, n2: usize, u: f64) -> f64 {
    let max = n1 * n2;
    // f[i][j][k]: orderings of i and j values with U = k (counts, as f64).
    let mut f = vec![vec![vec![0.0f64; max + 1]; n2 + 1]; n1 + 1];
    // One ordering of nothing against anything: U = 0.
    for row in f.iter_mut() {
        row[0][0] = 1.0;
    }
    for cell in f[0].iter_mut() {
        cell[0] = 1.0;
    }
    for i in 1..=n1 {
        for j in 1..=n2 {
            for k in 0..=i * j {
                // The largest value is from the first sample (it beats all j
                // of the second) or from the second.
                let from_a = if k >= j { f[i - 1][j][k - j] } else { 0.0 };
                f[i][j][k] = from_a + f[i][j - 1][k];
            }
        }
    }
    let total: f64 = f[n1][n2].iter().sum();
    let lo = u.min(max as f64 - u);
    let tail: f64 = f[n1][n2].iter().enumerate().filter(|(k, _)| (*k as f64) <= lo + 1e-9).map(|(_, c)| c).sum();
    (2.0 * tail / total).min(1.0)
}

/// P(Z > z) of the standard normal (erfc, Numerical Recipes' Chebyshev
/// fit: relative error below 1.2e-7).
fn normal_sf(z: f64) -> f64 {
    let x = z / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x.abs());
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    let erfc = if x >= 0.0 { erfc } else { 2.0 - erfc };
    erfc / 2.0
}

/// A 95 % bootstrap interval of median(b) − median(a): both samples
/// resampled `rounds` times with a seeded generator (the same interval on
/// every machine).
pub fn bootstrap_median_diff(a: &[f64], b: &[f64], rounds: usize, seed: u64) -> Option<(f64, f64)> {
    if a.is_empty() || b.is_empty() || rounds == 0 {
        return None;
    }
    let mut rng = Rng::new(seed);
    let diffs: Vec<f64> = (0..rounds).map(|_| median(&rng.resample(b)) - median(&rng.resample(a))).collect();
    interval95(diffs)
}

/// A 95 % bootstrap interval of the median of `v` (the difference from a
/// sample that is always 0).
pub fn bootstrap_median(v: &[f64], rounds: usize, seed: u64) -> Option<(f64, f64)> {
    bootstrap_median_diff(&[0.0], v, rounds, seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    /// Exact p-values from the counts of orderings: fully separated samples
    /// of 3 and 3 are 2 of C(6,3) = 20 orderings; of 5 and 5, 2 of 252.
    #[test]
    fn exact_p_values() {
        let m = mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert_eq!((m.u, m.exact), (0.0, true));
        assert!((m.p - 0.1).abs() < 1e-12, "{m:?}");
        let m = mann_whitney(&[6.0, 7.0, 8.0, 9.0, 10.0], &[1.0, 2.0, 3.0, 4.0, 5.0]).unwrap();
        assert_eq!(m.u, 25.0);
        assert!((m.p - 2.0 / 252.0).abs() < 1e-12, "{m:?}");
        // Interleaved: no evidence of a difference.
        let m = mann_whitney(&[1.0, 3.0, 5.0], &[2.0, 4.0, 6.0]).unwrap();
        assert!(m.p > 0.5, "{m:?}");
    }

    /// The normal approximation, by hand: U = 0 of 10 and 10 with one tie
    /// of two, mean 50, variance 10·10/12 · (21 − 6/380) = 174.868,
    /// z = (50 − 0.5) / 13.2238 = 3.74326, two-sided p = erfc(z/√2) =
    /// 1.8165e-4 (Python's math.erfc).
    #[test]
    fn normal_approximation_with_ties() {
        let a: Vec<f64> = (1..=10).map(f64::from).collect();
        let mut b: Vec<f64> = (11..=20).map(f64::from).collect();
        b[0] = 11.0;
        b[1] = 11.0; // a tie: the approximation
        let m = mann_whitney(&a, &b).unwrap();
        assert!(!m.exact);
        assert!((m.p - 1.8165e-4).abs() < 1e-7, "{m:?}");
        assert!((normal_sf(1.959_963_985) - 0.025).abs() < 1e-7);
        assert_eq!(mann_whitney(&[1.0; 4], &[1.0; 4]).unwrap().p, 1.0);
    }

    #[test]
    fn bootstrap_interval_covers_the_shift() {
        let a: Vec<f64> = (0..30).map(|i| 100.0 + f64::from(i % 7)).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 10.0).collect();
        let (lo, hi) = bootstrap_median_diff(&a, &b, 2000, 7).unwrap();
        assert!(lo <= 10.0 && 10.0 <= hi && hi - lo < 8.0, "{lo} {hi}");
        assert_eq!(bootstrap_median_diff(&a, &b, 2000, 7), Some((lo, hi)));
        let (lo, hi) = bootstrap_median(&a, 2000, 7).unwrap();
        assert!(lo <= median(&a) && median(&a) <= hi, "{lo} {hi}");
    }
}
