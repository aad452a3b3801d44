//! Compensated sums, as Prometheus adds: Kahan's summation with
//! Neumaier's improvement (`kahanSumInc` in Prometheus's engine), so that
//! `sum_over_time` over 1e16, 1, −1e16, 3, 1 is 5, not the 4 a plain sum
//! gives; and the mean `avg_over_time` takes from it.

/// A running sum and its compensation (the low-order bits the sum lost).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Neumaier {
    pub sum: f64,
    pub c: f64,
}

impl Neumaier {
    /// Adds `x` (Prometheus 2.42's `kahanSumInc`: past an infinity the
    /// compensation is NaN, which `stddev_over_time` of huge values shows).
    #[inline]
    pub fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.c += (self.sum - t) + x;
        } else {
            self.c += (x - t) + self.sum;
        }
        self.sum = t;
    }

    /// [`Neumaier::add`] as Prometheus 3 adds: an infinite sum keeps no
    /// compensation (the running mean of [`mean`]).
    #[inline]
    fn add_clearing_inf(&mut self, x: f64) {
        self.add(x);
        if self.sum.is_infinite() {
            self.c = 0.0;
        }
    }

    /// The sum, compensated; an infinite sum as it is.
    pub fn value(&self) -> f64 {
        if self.sum.is_infinite() { self.sum } else { self.sum + self.c }
    }
}

/// The sum of `v` as Prometheus's `sum_over_time` computes it.
pub(crate) fn sum(v: &[f64]) -> f64 {
    let mut s = Neumaier::default();
    v.iter().for_each(|&x| s.add(x));
    s.value()
}

/// The mean of `v` (not empty) as `avg_over_time` is computed since
/// Prometheus 3 (prometheus/prometheus#16714): the compensated sum divided
/// by the count while the sum stays finite, then a running mean. Prometheus
/// 2.42 kept a running mean throughout, which drifts where values cancel
/// (1e16, 1, −1e16, 3, 1 averages 0.8 there, truly 1); both agree to
/// rounding elsewhere (`docs/promql.md`).
pub(crate) fn mean(v: &[f64]) -> f64 {
    let mut s = Neumaier { sum: v[0], c: 0.0 };
    let mut running: Option<Neumaier> = None;
    for (i, &x) in v.iter().enumerate().skip(1) {
        let count = (i + 1) as f64;
        if running.is_none() {
            let mut next = s;
            next.add_clearing_inf(x);
            if next.sum.is_finite() || !s.sum.is_finite() || !x.is_finite() {
                s = next;
                continue;
            }
            // The sum overflows where the values do not: a running mean
            // from here on.
            running = Some(Neumaier { sum: s.sum / (count - 1.0), c: s.c / (count - 1.0) });
        }
        let m = running.as_mut().expect("set above");
        let q = (count - 1.0) / count;
        let mut next = Neumaier { sum: q * m.sum, c: q * m.c };
        next.add_clearing_inf(x / count);
        *m = next;
    }
    match running {
        Some(m) => m.sum + m.c,
        None if s.sum.is_infinite() => s.sum,
        None => s.sum / v.len() as f64 + s.c / v.len() as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_keep_what_a_plain_sum_loses() {
        let v = [1e16, 1.0, -1e16, 3.0, 1.0];
        assert_eq!(v.iter().sum::<f64>(), 4.0, "the plain sum loses the 1");
        assert_eq!(sum(&v), 5.0);
        assert_eq!(mean(&v), 1.0);
        assert_eq!(sum(&[f64::INFINITY, 1.0]), f64::INFINITY);
        assert!(sum(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
    }

    #[test]
    fn a_mean_of_values_whose_sum_overflows_is_finite() {
        let big = 1.6e308;
        assert_eq!(sum(&[big, big]), f64::INFINITY);
        assert!((mean(&[big, big, big]) / big - 1.0).abs() < 1e-15);
        assert!(mean(&[big, big, -big, -big]).abs() < 1e-15 * big, "zero, to the rounding of the running mean");
        assert_eq!(mean(&[f64::INFINITY, 1.0]), f64::INFINITY);
        assert!(mean(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(mean(&[1.0, f64::NAN]).is_nan());
    }
}
