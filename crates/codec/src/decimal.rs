//! Exact decimals in binary floats: the smallest number of decimals that
//! holds every value of a column exactly, and a sum rounded back to them.
//! The store's chunks code such columns as integers (docs/format/chunk.md),
//! and tiers round their sums to the samples' decimals so that a sum of
//! hundredths stays a hundredth (`source::tier::Tier::build`).

/// Largest decimal exponent tried: µs-resolution values in seconds need 6;
/// beyond 9 the scaled integers stop fitting in 53 bits for real magnitudes.
pub const SCALE_MAX: u8 = 9;

pub const POW10: [f64; 10] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
pub const EXACT_INT_MAX: f64 = 9_007_199_254_740_992.0; // 2^53

/// The smallest k such that every value is exactly `round(v * 10^k) / 10^k`
/// with the integer below 2^53; `None` if there is none (then XOR).
pub fn decimal_scale(vals: &[f64]) -> Option<u8> {
    'scales: for k in 0..=SCALE_MAX {
        let p = POW10[k as usize];
        for &v in vals {
            if !exact_decimal(v, p) {
                continue 'scales;
            }
        }
        return Some(k);
    }
    None
}

/// `v` rounded to `k` decimals (`k` from [`decimal_scale`]): the nearest
/// float to a decimal, which the decimal codec stores in a few bits. A sum
/// of decimals is a decimal, but adding floats leaves it an ulp off, which
/// would make its whole chunk fall back to XOR. Magnitudes past 2^53 units
/// are left as they are.
pub fn round_decimal(v: f64, k: u8) -> f64 {
    let p = POW10[k as usize];
    let m = round(v * p);
    if m.abs() < EXACT_INT_MAX { m / p } else { v }
}

/// `x.round()` (half away from zero, the sign of a zero kept), inline:
/// `f64::round` is a call into libm on baseline x86-64 (no SSE4.1), and
/// the decimal checks round every value of every chunk and tier sum
/// (6 % of a flush of 100,000 series). Below 2^53 the truncation through
/// `i64` and the fraction `x - t` are exact.
#[inline]
pub fn round(x: f64) -> f64 {
    if x.is_nan() || x.abs() >= EXACT_INT_MAX {
        return x.round(); // past 2^53 (already whole), infinite or NaN
    }
    let t = (x as i64) as f64;
    let frac = x - t;
    if frac >= 0.5 {
        t + 1.0
    } else if frac <= -0.5 {
        t - 1.0
    } else {
        t.copysign(x)
    }
}

/// Whether `v` survives the trip through the integer the codec stores. The
/// check goes through `i64` exactly as decoding does: `-0.0` fails it (the
/// integer 0 decodes as `+0.0`), so a chunk holding `-0.0` uses XOR.
pub fn exact_decimal(v: f64, p: f64) -> bool {
    let m = round(v * p);
    m.abs() < EXACT_INT_MAX && ((m as i64) as f64 / p).to_bits() == v.to_bits()
}
