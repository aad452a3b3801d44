//! `sum|count|avg|min|max_over_time(selector[R])` in time linear in samples
//! plus steps, not samples × steps: each window `[t − R, t]` is a run of
//! raw samples, or (when `R` spans at least four periods of a tier) raw
//! samples at its two ragged edges around whole tier periods. Sums come
//! from compensated prefix sums (any run's sum is two subtractions, kept
//! exact with their rounding errors), extremes from monotonic deques (each
//! item enters and leaves once: steps only move forward).
//!
//! The answer is the one the raw samples give, for any input: a window's
//! sum from tier periods carries the periods' rounding (a stored sum is a
//! float, and older blocks and ClickHouse add without compensation), so a
//! window whose periods' error bound is not negligible beside its sum
//! (values that cancel: 1e16, 1, −1e16, …) and one whose periods'
//! sums overflowed are answered from its raw samples instead. A series
//! whose values are too large for prefix sums (past 1e300) is answered
//! window by window as Prometheus does.

use promql_parser::parser::Expr;

use crate::engine::{Error, Ev, duration_ns, is_stale, merge};
use crate::sum::Neumaier;
use crate::value::{self, Series, Value};

type Result<T> = std::result::Result<T, Error>;

/// A window's sum from tier periods is trusted when its error bound is at
/// most this share of it (answers are compared to 1e-9).
const TRUSTED: f64 = 1e-10;
/// Values whose running sum may pass this are summed window by window.
const PREFIX_MAX: f64 = 1e300;

/// Exact sum and rounding error of `a + b` (Knuth's TwoSum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// NaN and infinities seen in a run: what they make of its sum.
#[derive(Default, Clone, Copy)]
struct Specials {
    nan: u32,
    pinf: u32,
    ninf: u32,
}

impl Specials {
    fn of(v: f64) -> Specials {
        Specials {
            nan: u32::from(v.is_nan()),
            pinf: u32::from(v == f64::INFINITY),
            ninf: u32::from(v == f64::NEG_INFINITY),
        }
    }

    fn add(&mut self, o: Specials) {
        self.nan += o.nan;
        self.pinf += o.pinf;
        self.ninf += o.ninf;
    }

    fn sub(self, o: Specials) -> Specials {
        Specials { nan: self.nan - o.nan, pinf: self.pinf - o.pinf, ninf: self.ninf - o.ninf }
    }

    /// The sum a run with these takes, whatever its finite values.
    fn sum(self) -> Option<f64> {
        if self.nan > 0 || (self.pinf > 0 && self.ninf > 0) {
            Some(f64::NAN)
        } else if self.pinf > 0 {
            Some(f64::INFINITY)
        } else if self.ninf > 0 {
            Some(f64::NEG_INFINITY)
        } else {
            None
        }
    }
}

/// Prefix sums of a sequence of values: `hi[i] + c[i]` is the compensated
/// sum of the finite values before item `i`.
struct Prefix {
    hi: Vec<f64>,
    c: Vec<f64>,
    specials: Vec<Specials>,
    /// False when the finite values could overflow a prefix.
    usable: bool,
}

impl Prefix {
    fn new(vals: impl ExactSizeIterator<Item = f64>) -> Prefix {
        let n = vals.len();
        let mut p = Prefix {
            hi: Vec::with_capacity(n + 1),
            c: Vec::with_capacity(n + 1),
            specials: Vec::with_capacity(n + 1),
            usable: true,
        };
        let (mut acc, mut sp, mut abs) = (Neumaier::default(), Specials::default(), 0.0f64);
        for v in vals {
            p.hi.push(acc.sum);
            p.c.push(acc.c);
            p.specials.push(sp);
            if v.is_finite() {
                acc.add(v);
                abs += v.abs();
            } else {
                sp.add(Specials::of(v));
            }
        }
        p.hi.push(acc.sum);
        p.c.push(acc.c);
        p.specials.push(sp);
        p.usable = abs < PREFIX_MAX;
        p
    }

    /// Adds items `[a, b)` to `acc` (their exact difference, then the
    /// compensations') and their specials to `sp`.
    fn add_run(&self, a: usize, b: usize, acc: &mut Neumaier, sp: &mut Specials) {
        if a >= b {
            return;
        }
        let (d, e) = two_sum(self.hi[b], -self.hi[a]);
        acc.add(d);
        acc.add(e + (self.c[b] - self.c[a]));
        sp.add(self.specials[b].sub(self.specials[a]));
    }
}

/// The minimum (or maximum) of a window moving forward over values, by
/// Prometheus's rule: NaN is replaced by any number, the first of equal
/// values wins; None when the window holds only NaN.
struct Extreme {
    /// Indices of candidates, their values increasing (decreasing for max).
    deque: std::collections::VecDeque<usize>,
    next: usize,
    max: bool,
}

impl Extreme {
    fn new(max: bool) -> Extreme {
        Extreme { deque: std::collections::VecDeque::new(), next: 0, max }
    }

    /// The extreme of `vals[a..b]`; `a` and `b` never move back.
    fn of(&mut self, vals: &[f64], a: usize, b: usize) -> Option<f64> {
        self.next = self.next.max(a);
        while self.next < b {
            let v = vals[self.next];
            if !v.is_nan() {
                // Strictly better ones replace: an equal one earlier stays.
                while let Some(&back) = self.deque.back() {
                    let w = vals[back];
                    if (self.max && v > w) || (!self.max && v < w) {
                        self.deque.pop_back();
                    } else {
                        break;
                    }
                }
                self.deque.push_back(self.next);
            }
            self.next += 1;
        }
        while self.deque.front().is_some_and(|&i| i < a) {
            self.deque.pop_front();
        }
        self.deque.front().filter(|&&i| i < b).map(|&i| vals[i])
    }
}

/// Raw samples with what windows ask of them.
struct Raw {
    t: Vec<i64>,
    v: Vec<f64>,
    prefix: Prefix,
}

impl Raw {
    fn new(t: Vec<i64>, v: Vec<f64>) -> Raw {
        let prefix = Prefix::new(v.iter().copied());
        Raw { t, v, prefix }
    }

    /// Indices of the samples in `[from, to]`.
    fn run(&self, from: i64, to: i64) -> (usize, usize) {
        (self.t.partition_point(|&x| x < from), self.t.partition_point(|&x| x <= to))
    }
}

/// Tier periods, as values to slide over.
struct Periods {
    ts: Vec<i64>,
    /// Each period's min and max, NaN where it held only NaN.
    min: Vec<f64>,
    max: Vec<f64>,
    count_prefix: Vec<f64>,
    sum: Prefix,
    /// Prefix of each period's error bound on its stored sum.
    bound: Vec<f64>,
    /// Prefix count of periods whose sum overflowed (infinite from finite values).
    overflowed: Vec<u32>,
}

/// The distance from `x` to the next float away from zero: a bound on the
/// rounding of a sum stored as `x`.
fn ulp(x: f64) -> f64 {
    let a = x.abs();
    if a == 0.0 || !a.is_finite() { 0.0 } else { f64::from_bits(a.to_bits() + 1) - a }
}

impl Periods {
    fn new(tier: source::tier::Tier) -> Periods {
        let n = tier.ts.len();
        let only_nan = |k: usize| tier.min[k] == f64::INFINITY && tier.max[k] == f64::NEG_INFINITY;
        let min: Vec<f64> = (0..n).map(|k| if only_nan(k) { f64::NAN } else { tier.min[k] }).collect();
        let max: Vec<f64> = (0..n).map(|k| if only_nan(k) { f64::NAN } else { tier.max[k] }).collect();
        let (mut count_prefix, mut bound, mut overflowed) = (vec![0.0], vec![0.0], vec![0u32]);
        for k in 0..n {
            let (s, c) = (tier.sum[k], tier.count[k]);
            count_prefix.push(count_prefix[k] + c);
            // A float's rounding, and a plain sum's (older blocks, ClickHouse):
            // n² ε times the largest magnitude.
            let m = min[k].abs().max(max[k].abs());
            let plain = if m.is_finite() { c * c * f64::EPSILON * m } else { 0.0 };
            bound.push(bound[k] + ulp(s) + plain);
            let over = s.is_infinite() && min[k].is_finite() && max[k].is_finite();
            overflowed.push(overflowed[k] + u32::from(over));
        }
        let sum = Prefix::new(tier.sum.iter().copied());
        Periods { ts: tier.ts, min, max, count_prefix, sum, bound, overflowed }
    }
}

/// A window cut into its parts: raw `[w0, first)`, whole periods
/// `[first, end)`, raw `[end, t]` (or only raw `[w0, t]`: `first == end`).
#[derive(Clone, Copy)]
struct Cut {
    w0: i64,
    t: i64,
    first: i64,
    end: i64,
}

impl Cut {
    fn of(t: i64, range: i64, res: Option<i64>) -> Cut {
        let w0 = t.saturating_sub(range);
        let whole = Cut { w0, t, first: t.saturating_add(1), end: t.saturating_add(1) };
        let Some(res) = res else { return whole };
        let first = w0.div_euclid(res) * res + if w0.rem_euclid(res) == 0 { 0 } else { res };
        let end = t.saturating_add(1).div_euclid(res) * res;
        if end <= first { whole } else { Cut { w0, t, first, end } }
    }

    /// The raw intervals it reads, inclusive.
    fn raw(&self) -> [(i64, i64); 2] {
        [(self.w0, self.first - 1), (self.end, self.t)]
    }
}

/// Inclusive intervals sorted and merged where they touch.
fn merged(mut iv: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    iv.retain(|(a, b)| a <= b);
    iv.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(iv.len());
    for (a, b) in iv {
        match out.last_mut() {
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// What one window holds, part by part.
struct Acc {
    count: f64,
    sum: Neumaier,
    specials: Specials,
    min: Option<f64>,
    max: Option<f64>,
    /// The window's periods' error bound, and whether one overflowed.
    bound: f64,
    overflowed: bool,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            count: 0.0,
            sum: Neumaier::default(),
            specials: Specials::default(),
            min: None,
            max: None,
            bound: 0.0,
            overflowed: false,
        }
    }

    /// Adds an extreme in time order: the first of equals stays.
    fn extremes(&mut self, lo: Option<f64>, hi: Option<f64>) {
        if let Some(x) = lo
            && self.min.is_none_or(|m| x < m)
        {
            self.min = Some(x);
        }
        if let Some(x) = hi
            && self.max.is_none_or(|m| x > m)
        {
            self.max = Some(x);
        }
    }

    fn sum(&self) -> f64 {
        self.specials.sum().unwrap_or_else(|| self.sum.value())
    }

    /// Whether the raw samples must answer this window's sum.
    fn untrusted(&self) -> bool {
        if self.overflowed {
            return true;
        }
        let s = self.sum();
        s.is_finite() && self.bound > TRUSTED * s.abs()
    }

    fn result(&self, name: &str) -> Option<f64> {
        if self.count == 0.0 {
            return None;
        }
        Some(match name {
            "count_over_time" => self.count,
            "sum_over_time" => self.sum(),
            "avg_over_time" => match self.specials.sum() {
                Some(s) => s,
                None => self.sum.sum / self.count + self.sum.c / self.count,
            },
            // Only NaN in the window: NaN.
            "min_over_time" => self.min.unwrap_or(f64::NAN),
            _ => self.max.unwrap_or(f64::NAN),
        })
    }
}

/// Sliding state over one buffer of raw samples for one part of the windows.
struct RawPart<'r> {
    raw: &'r Raw,
    min: Extreme,
    max: Extreme,
}

impl<'r> RawPart<'r> {
    fn new(raw: &'r Raw) -> RawPart<'r> {
        RawPart { raw, min: Extreme::new(false), max: Extreme::new(true) }
    }

    fn add(&mut self, from: i64, to: i64, acc: &mut Acc, extremes: bool) {
        let (a, b) = self.raw.run(from, to);
        if a >= b {
            return;
        }
        acc.count += (b - a) as f64;
        self.raw.prefix.add_run(a, b, &mut acc.sum, &mut acc.specials);
        if extremes {
            let (lo, hi) = (self.min.of(&self.raw.v, a, b), self.max.of(&self.raw.v, a, b));
            acc.extremes(lo, hi);
        }
    }
}

/// The window `[w0, t]` of `raw`, as Prometheus computes it sample by
/// sample (values too large for prefix sums).
fn direct(name: &str, raw: &Raw, w0: i64, t: i64) -> Option<f64> {
    let (a, b) = raw.run(w0, t);
    let v = &raw.v[a..b];
    if v.is_empty() {
        return None;
    }
    Some(match name {
        "count_over_time" => v.len() as f64,
        "sum_over_time" => crate::sum::sum(v),
        "avg_over_time" => crate::sum::mean(v),
        "min_over_time" => v.iter().fold(v[0], |m, &x| if x < m || m.is_nan() { x } else { m }),
        _ => v.iter().fold(v[0], |m, &x| if x > m || m.is_nan() { x } else { m }),
    })
}

impl Ev<'_, '_> {
    /// Reads series `id`'s samples in the inclusive intervals, staleness
    /// markers left out (as range vectors leave them).
    fn read_intervals(&self, id: u32, intervals: &[(i64, i64)]) -> Result<Raw> {
        let (mut t, mut v) = (Vec::new(), Vec::new());
        for &(a, b) in intervals {
            let (ts, vs) = self.read(id, a, b)?;
            for (x, y) in ts.into_iter().zip(vs) {
                if !is_stale(y) {
                    t.push(x);
                    v.push(y);
                }
            }
        }
        Ok(Raw::new(t, v))
    }

    /// `sum|count|avg|min|max_over_time` of a plain range selector, from
    /// raw samples and the tier that fits (see the module's doc). None: the
    /// argument is not a plain range selector.
    pub fn over_time(&self, name: &str, e: &Expr, times: &[i64]) -> Result<Option<Value>> {
        let e = match e {
            Expr::Paren(p) => &*p.expr,
            e => e,
        };
        let Expr::MatrixSelector(ms) = e else { return Ok(None) };
        let range = duration_ns(&ms.range);
        let store = self.engine.store;
        let res = store.tiers().into_iter().rev().find(|&r| range >= 4 * r);
        let vs = &ms.vs;
        let ends = self.refs(times, &vs.at, &vs.offset)?;
        let (Some(&lo), Some(&hi)) = (ends.iter().min(), ends.iter().max()) else { return Ok(None) };
        let mut cuts: Vec<Cut> = ends.iter().map(|&t| Cut::of(t, range, res)).collect();
        let mut intervals = merged(cuts.iter().flat_map(Cut::raw).collect());
        // Steps so dense that their edges cover nearly all of the range
        // read the raw samples anyway: then the tier would only add work
        // (the tier path is never slower than the raw one).
        let covered: i128 = intervals.iter().map(|&(a, b)| i128::from(b) - i128::from(a) + 1).sum();
        let span = i128::from(hi) - i128::from(lo.saturating_sub(range)) + 1;
        let res = res.filter(|_| covered * 10 < span * 9);
        if res.is_none() {
            cuts = ends.iter().map(|&t| Cut::of(t, range, None)).collect();
            intervals = merged(cuts.iter().flat_map(Cut::raw).collect());
        }
        let extremes = matches!(name, "min_over_time" | "max_over_time");
        let sums = matches!(name, "sum_over_time" | "avg_over_time");
        let mut out = Vec::new();
        for (id, key) in self.select(vs)? {
            self.check_deadline("computing a range function")?;
            let periods = match res {
                Some(res) => {
                    let tier =
                        store.read_tier(id, res, model::Timestamp(lo.saturating_sub(range)), model::Timestamp(hi));
                    self.count(tier.ts.len())?;
                    Some(Periods::new(tier))
                }
                None => None,
            };
            let raw = self.read_intervals(id, &intervals)?;
            let mut points: Vec<Option<f64>> = Vec::with_capacity(cuts.len());
            let mut again = Vec::new();
            let (mut left, mut right) = (RawPart::new(&raw), RawPart::new(&raw));
            let (mut pmin, mut pmax) = (Extreme::new(false), Extreme::new(true));
            for (i, cut) in cuts.iter().enumerate() {
                if !raw.prefix.usable || periods.as_ref().is_some_and(|p| !p.sum.usable) {
                    again.push(i);
                    points.push(None);
                    continue;
                }
                let mut acc = Acc::new();
                left.add(cut.w0, cut.first - 1, &mut acc, extremes);
                if let Some(p) = &periods
                    && cut.first < cut.end
                {
                    let (a, b) = (p.ts.partition_point(|&x| x < cut.first), p.ts.partition_point(|&x| x < cut.end));
                    if a < b {
                        acc.count += p.count_prefix[b] - p.count_prefix[a];
                        p.sum.add_run(a, b, &mut acc.sum, &mut acc.specials);
                        acc.bound = p.bound[b] - p.bound[a];
                        acc.overflowed = p.overflowed[b] > p.overflowed[a];
                        if extremes {
                            acc.extremes(pmin.of(&p.min, a, b), pmax.of(&p.max, a, b));
                        }
                    }
                }
                right.add(cut.end, cut.t, &mut acc, extremes);
                if sums && acc.untrusted() {
                    again.push(i);
                }
                points.push(acc.result(name));
            }
            if !again.is_empty() {
                // Windows the periods cannot answer exactly: from raw samples.
                let whole =
                    self.read_intervals(id, &merged(again.iter().map(|&i| (cuts[i].w0, cuts[i].t)).collect()))?;
                let mut part = RawPart::new(&whole);
                for &i in &again {
                    let (w0, t) = (cuts[i].w0, cuts[i].t);
                    points[i] = if whole.prefix.usable {
                        let mut acc = Acc::new();
                        part.add(w0, t, &mut acc, extremes);
                        acc.result(name)
                    } else {
                        direct(name, &whole, w0, t)
                    };
                }
            }
            if points.iter().any(Option::is_some) {
                let mut labels = value::of_key(&key);
                value::drop_name(&mut labels);
                out.push(Series { labels, points });
            }
        }
        merge(out).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_runs_keep_what_a_plain_sum_loses() {
        let v = [1e16, 1.0, -1e16, 3.0, 1.0, 1e16, 1.0, -1e16, 3.0, 1.0];
        let p = Prefix::new(v.iter().copied());
        for a in 0..v.len() {
            for b in a + 1..=v.len() {
                let (mut acc, mut sp) = (Neumaier::default(), Specials::default());
                p.add_run(a, b, &mut acc, &mut sp);
                assert_eq!(acc.value(), crate::sum::sum(&v[a..b]), "[{a}, {b})");
            }
        }
    }

    #[test]
    fn specials_make_the_sum_they_make_in_prometheus() {
        let v = [1.0, f64::INFINITY, 2.0, f64::NEG_INFINITY, f64::NAN, 5.0];
        let p = Prefix::new(v.iter().copied());
        for a in 0..v.len() {
            for b in a + 1..=v.len() {
                let (mut acc, mut sp) = (Neumaier::default(), Specials::default());
                p.add_run(a, b, &mut acc, &mut sp);
                let got = sp.sum().unwrap_or(acc.value());
                let want = crate::sum::sum(&v[a..b]);
                assert!(got == want || (got.is_nan() && want.is_nan()), "[{a}, {b}): {got} {want}");
            }
        }
    }

    #[test]
    fn sliding_extremes_follow_prometheus_s_rule() {
        let v = [3.0, f64::NAN, 1.0, 1.0, 5.0, f64::NAN, f64::NAN, 2.0, -1.0, 7.0];
        let (mut lo, mut hi) = (Extreme::new(false), Extreme::new(true));
        for a in 0..v.len() {
            // Windows [a, b) moving forward.
            let b = (a + 3).min(v.len());
            let w = &v[a..b];
            let want_min = w.iter().fold(w[0], |m, &x| if x < m || m.is_nan() { x } else { m });
            let want_max = w.iter().fold(w[0], |m, &x| if x > m || m.is_nan() { x } else { m });
            let (got_min, got_max) = (lo.of(&v, a, b).unwrap_or(f64::NAN), hi.of(&v, a, b).unwrap_or(f64::NAN));
            assert!(got_min == want_min || (got_min.is_nan() && want_min.is_nan()), "{a}: {got_min} {want_min}");
            assert!(got_max == want_max || (got_max.is_nan() && want_max.is_nan()), "{a}: {got_max} {want_max}");
        }
    }

    #[test]
    fn windows_cut_at_whole_periods() {
        let c = Cut::of(10_500, 4_000, Some(1_000));
        assert_eq!((c.w0, c.first, c.end, c.t), (6_500, 7_000, 10_000, 10_500));
        // The window's end is a period's last ns: that period is whole.
        let c = Cut::of(9_999, 4_000, Some(1_000));
        assert_eq!((c.first, c.end), (6_000, 10_000));
        let c = Cut::of(10_500, 800, Some(1_000));
        assert_eq!(c.first, c.end, "no whole period: all raw");
        assert_eq!(merged(vec![(5, 9), (0, 3), (4, 4), (20, 19), (12, 15)]), vec![(0, 9), (12, 15)]);
    }
}
