//! PromQL's functions, each as Prometheus 2.42 computes it: the range
//! functions over windows of samples (`rate`'s extrapolation, `irate`,
//! `deriv`'s least squares, `*_over_time`), math and calendar functions on
//! each value, and the ones that build or relabel series (`vector`,
//! `scalar`, `absent`, `label_replace`, `histogram_quantile`, `sort`).

use promql_parser::parser::{Call, Expr};

use crate::aggregate::quantile;
use crate::engine::{Error, Ev, Matrix, merge};
use crate::sum::Neumaier;
use crate::value::{self, Labels, Series, Value};

type Result<T> = std::result::Result<T, Error>;

/// Go's `math.Max` and `math.Min`: NaN wins (Rust's `max` drops it).
fn go_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) }
}
fn go_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) }
}

fn scalar_arg(ev: &Ev<'_, '_>, e: &Expr, times: &[i64]) -> Result<Vec<f64>> {
    match ev.eval(e, times)? {
        Value::Scalar(s) => Ok(s),
        other => Err(Error::BadData(format!("expected a scalar, got a {}", other.kind()))),
    }
}

fn string_arg(ev: &Ev<'_, '_>, e: &Expr, times: &[i64]) -> Result<String> {
    match ev.eval(e, times)? {
        Value::String(s) => Ok(s),
        other => Err(Error::BadData(format!("expected a string, got a {}", other.kind()))),
    }
}

fn vector_arg(ev: &Ev<'_, '_>, e: &Expr, times: &[i64]) -> Result<Vec<Series>> {
    match ev.eval(e, times)? {
        Value::Vector(v) => Ok(v),
        other => Err(Error::BadData(format!("expected an instant vector, got a {}", other.kind()))),
    }
}

/// Each value mapped by `f` (given the step), the metric name dropped.
fn map_values(mut v: Vec<Series>, f: impl Fn(f64, usize) -> Option<f64>) -> Result<Value> {
    for s in &mut v {
        value::drop_name(&mut s.labels);
        for (i, p) in s.points.iter_mut().enumerate() {
            *p = p.and_then(|x| f(x, i));
        }
    }
    merge(v)
}

pub(crate) fn call(ev: &Ev<'_, '_>, c: &Call, times: &[i64]) -> Result<Value> {
    let name = c.func.name;
    let args: Vec<&Expr> = c.args.args.iter().map(|a| a.as_ref()).collect();
    let arg = |i: usize| args.get(i).copied().ok_or_else(|| Error::BadData(format!("{name}: missing argument {i}")));
    let steps = times.len();
    match name {
        "time" => Ok(Value::Scalar(times.iter().map(|&t| value::seconds(t)).collect())),
        "pi" => Ok(Value::Scalar(vec![std::f64::consts::PI; steps])),
        "vector" => {
            let s = scalar_arg(ev, arg(0)?, times)?;
            Ok(Value::Vector(vec![Series { labels: Labels::new(), points: s.into_iter().map(Some).collect() }]))
        }
        "scalar" => {
            let v = vector_arg(ev, arg(0)?, times)?;
            Ok(Value::Scalar(
                (0..steps)
                    .map(|i| {
                        let mut present = v.iter().filter_map(|s| s.points[i]);
                        match (present.next(), present.next()) {
                            (Some(x), None) => x,
                            _ => f64::NAN,
                        }
                    })
                    .collect(),
            ))
        }
        "timestamp" => match arg(0)? {
            // The sample's own time, not the step's.
            Expr::VectorSelector(vs) => map_values(ev.vector_selector(vs, times, true)?, |x, _| Some(x)),
            e => map_values(vector_arg(ev, e, times)?, |_, i| Some(value::seconds(times[i]))),
        },
        "absent" => {
            let v = vector_arg(ev, arg(0)?, times)?;
            let points = (0..steps).map(|i| (!v.iter().any(|s| s.points[i].is_some())).then_some(1.0)).collect();
            Ok(Value::Vector(vec![Series { labels: absent_labels(arg(0)?), points }]))
        }
        "absent_over_time" => {
            let m = ev.matrix(arg(0)?, times)?;
            let points = (0..steps)
                .map(|i| (!(0..m.series.len()).any(|s| !m.window(s, i).0.is_empty())).then_some(1.0))
                .collect();
            Ok(Value::Vector(vec![Series { labels: absent_labels(arg(0)?), points }]))
        }
        "avg_over_time" | "min_over_time" | "max_over_time" | "sum_over_time" | "count_over_time"
            if let Some(v) = ev.over_time(name, arg(0)?, times)? =>
        {
            Ok(v)
        }
        "rate" | "increase" | "delta" | "irate" | "idelta" | "deriv" | "resets" | "changes" | "avg_over_time"
        | "min_over_time" | "max_over_time" | "sum_over_time" | "count_over_time" | "last_over_time"
        | "present_over_time" | "stddev_over_time" | "stdvar_over_time" => {
            let m = ev.matrix(arg(0)?, times)?;
            range_fn(ev, name, &m, times, |_| 0.0)
        }
        "quantile_over_time" => {
            let q = scalar_arg(ev, arg(0)?, times)?;
            let m = ev.matrix(arg(1)?, times)?;
            range_fn(ev, name, &m, times, |i| q[i])
        }
        "predict_linear" => {
            let m = ev.matrix(arg(0)?, times)?;
            let d = scalar_arg(ev, arg(1)?, times)?;
            range_fn(ev, name, &m, times, |i| d[i])
        }
        "holt_winters" | "double_exponential_smoothing" => {
            let m = ev.matrix(arg(0)?, times)?;
            let sf = scalar_arg(ev, arg(1)?, times)?;
            let tf = scalar_arg(ev, arg(2)?, times)?;
            // As in Prometheus, the factors are checked where there is a
            // window to smooth: with no data, no error.
            let check = |s: f64, t: f64| {
                if !(s > 0.0 && s < 1.0) {
                    return Err(Error::Execution(format!(
                        "invalid smoothing factor. Expected: 0 < sf < 1, got: {}",
                        go_fixed(s)
                    )));
                }
                if !(t > 0.0 && t < 1.0) {
                    return Err(Error::Execution(format!(
                        "invalid trend factor. Expected: 0 < tf < 1, got: {}",
                        go_fixed(t)
                    )));
                }
                Ok(())
            };
            let mut out = Vec::new();
            for (s, (labels, _, _)) in m.series.iter().enumerate() {
                ev.check_deadline("computing holt_winters")?;
                let points = (0..steps)
                    .map(|i| {
                        let w = m.window(s, i).1;
                        if !w.is_empty() {
                            check(sf[i], tf[i])?;
                        }
                        Ok(holt_winters(w, sf[i], tf[i]))
                    })
                    .collect::<Result<_>>()?;
                let mut labels = labels.clone();
                value::drop_name(&mut labels);
                out.push(Series { labels, points });
            }
            merge(out)
        }
        "abs" | "ceil" | "floor" | "exp" | "sqrt" | "ln" | "log2" | "log10" | "sgn" | "sin" | "cos" | "tan"
        | "asin" | "acos" | "atan" | "sinh" | "cosh" | "tanh" | "asinh" | "acosh" | "atanh" | "deg" | "rad" => {
            let f: fn(f64) -> f64 = match name {
                "abs" => f64::abs,
                "ceil" => f64::ceil,
                "floor" => f64::floor,
                "exp" => f64::exp,
                "sqrt" => f64::sqrt,
                "ln" => f64::ln,
                "log2" => f64::log2,
                "log10" => f64::log10,
                "sgn" => |x| {
                    if x < 0.0 {
                        -1.0
                    } else if x > 0.0 {
                        1.0
                    } else {
                        x
                    }
                },
                "sin" => f64::sin,
                "cos" => f64::cos,
                "tan" => f64::tan,
                "asin" => f64::asin,
                "acos" => f64::acos,
                "atan" => f64::atan,
                "sinh" => f64::sinh,
                "cosh" => f64::cosh,
                "tanh" => f64::tanh,
                "asinh" => go::asinh,
                "acosh" => go::acosh,
                "atanh" => go::atanh,
                "deg" => |x| x * 180.0 / std::f64::consts::PI,
                _ => |x| x * std::f64::consts::PI / 180.0,
            };
            map_values(vector_arg(ev, arg(0)?, times)?, |x, _| Some(f(x)))
        }
        "round" => {
            let v = vector_arg(ev, arg(0)?, times)?;
            let to = match args.get(1) {
                Some(e) => scalar_arg(ev, e, times)?,
                None => vec![1.0; steps],
            };
            map_values(v, |x, i| {
                let inv = 1.0 / to[i];
                Some((x * inv + 0.5).floor() / inv)
            })
        }
        "clamp" => {
            let v = vector_arg(ev, arg(0)?, times)?;
            let (lo, hi) = (scalar_arg(ev, arg(1)?, times)?, scalar_arg(ev, arg(2)?, times)?);
            map_values(v, |x, i| (hi[i] >= lo[i]).then(|| go_max(lo[i], go_min(hi[i], x))))
        }
        "clamp_min" | "clamp_max" => {
            let v = vector_arg(ev, arg(0)?, times)?;
            let b = scalar_arg(ev, arg(1)?, times)?;
            let max = name == "clamp_min";
            map_values(v, |x, i| Some(if max { go_max(b[i], x) } else { go_min(b[i], x) }))
        }
        "minute" | "hour" | "day_of_month" | "day_of_week" | "day_of_year" | "days_in_month" | "month" | "year" => {
            let v = match args.first() {
                Some(e) => vector_arg(ev, e, times)?,
                None => vec![Series {
                    labels: Labels::new(),
                    points: times.iter().map(|&t| Some(value::seconds(t))).collect(),
                }],
            };
            map_values(v, |x, _| Some(crate::time::field(name, x)))
        }
        "sort" | "sort_desc" => {
            let mut v = vector_arg(ev, arg(0)?, times)?;
            // Only an instant query has an order; by the last step's value,
            // NaN last in both (Prometheus 2.42 sorts its heaps reversed).
            let key = |s: &Series| s.points.last().copied().flatten().unwrap_or(f64::NAN);
            let desc = name == "sort_desc";
            v.sort_by(|a, b| {
                let (x, y) = (key(a), key(b));
                match (x.is_nan(), y.is_nan()) {
                    (true, true) => std::cmp::Ordering::Equal,
                    (true, false) => std::cmp::Ordering::Greater,
                    (false, true) => std::cmp::Ordering::Less,
                    _ if desc => y.partial_cmp(&x).expect("not NaN"),
                    _ => x.partial_cmp(&y).expect("not NaN"),
                }
            });
            Ok(Value::Vector(v))
        }
        "label_replace" => {
            let mut v = vector_arg(ev, arg(0)?, times)?;
            let dst = string_arg(ev, arg(1)?, times)?;
            let repl = string_arg(ev, arg(2)?, times)?;
            let src = string_arg(ev, arg(3)?, times)?;
            let re = string_arg(ev, arg(4)?, times)?;
            // Errors of the arguments are `execution` errors in Prometheus
            // (raised as the function runs), not `bad_data`.
            let re = regex::Regex::new(&format!("^(?s:{re})$"))
                .map_err(|e| Error::Execution(format!("invalid regular expression in label_replace(): {e}")))?;
            check_label_name(&dst, "destination", name)?;
            for s in &mut v {
                let src_value = value::get(&s.labels, &src).to_owned();
                if let Some(caps) = re.captures(&src_value) {
                    let mut res = String::new();
                    caps.expand(&repl, &mut res);
                    value::set(&mut s.labels, &dst, &res);
                }
            }
            merge(v)
        }
        "label_join" => {
            let mut v = vector_arg(ev, arg(0)?, times)?;
            let dst = string_arg(ev, arg(1)?, times)?;
            let sep = string_arg(ev, arg(2)?, times)?;
            let srcs: Vec<String> = args[3..].iter().map(|e| string_arg(ev, e, times)).collect::<Result<_>>()?;
            for src in &srcs {
                check_label_name(src, "source", name)?;
            }
            check_label_name(&dst, "destination", name)?;
            for s in &mut v {
                let joined: Vec<&str> = srcs.iter().map(|l| value::get(&s.labels, l)).collect();
                let joined = joined.join(&sep);
                value::set(&mut s.labels, &dst, &joined);
            }
            merge(v)
        }
        "histogram_quantile" => {
            let q = scalar_arg(ev, arg(0)?, times)?;
            let v = vector_arg(ev, arg(1)?, times)?;
            histogram_quantile(&q, v, steps)
        }
        other => Err(Error::BadData(format!("the function {other}() is not supported yet"))),
    }
}

/// Whether `l` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`).
pub(crate) fn valid_label_name(l: &str) -> bool {
    !l.is_empty()
        && l.chars().enumerate().all(|(i, c)| c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
}

fn check_label_name(l: &str, role: &str, f: &str) -> Result<()> {
    if valid_label_name(l) { Ok(()) } else { Err(Error::Execution(format!("invalid {role} label name in {f}(): {l}"))) }
}

/// Go's `%f`: six decimals.
fn go_fixed(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{x:.6}")
    }
}

/// The labels `absent()` reports: the selector's equality matchers, less
/// the name and any label matched otherwise or twice.
fn absent_labels(e: &Expr) -> Labels {
    let vs = match e {
        Expr::VectorSelector(vs) => vs,
        Expr::MatrixSelector(ms) => &ms.vs,
        _ => return Labels::new(),
    };
    let mut out = Labels::new();
    let mut drop = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == value::NAME {
            continue;
        }
        let equal = matches!(m.op, promql_parser::label::MatchOp::Equal);
        if equal && value::get(&out, &m.name).is_empty() && !drop.contains(&m.name) {
            value::set(&mut out, &m.name, &m.value);
        } else {
            drop.push(m.name.clone());
        }
    }
    for d in drop {
        value::set(&mut out, &d, "");
    }
    out
}

/// A range function over every series and step; `param(i)` is its scalar
/// argument at step `i` (φ, the prediction horizon), if it has one.
fn range_fn(ev: &Ev<'_, '_>, name: &str, m: &Matrix, times: &[i64], param: impl Fn(usize) -> f64) -> Result<Value> {
    let mut out = Vec::with_capacity(m.series.len());
    for (s, (labels, _, _)) in m.series.iter().enumerate() {
        // Each series walks every window: the deadline is checked per series.
        ev.check_deadline("computing a range function")?;
        let points = (0..times.len())
            .map(|i| {
                let (t, v) = m.window(s, i);
                window_fn(name, t, v, m.ends[i], m.range, times[i], param(i))
            })
            .collect();
        let mut labels = labels.clone();
        if name != "last_over_time" {
            value::drop_name(&mut labels);
        }
        out.push(Series { labels, points });
    }
    merge(out)
}

/// One range function on one window `[end - range, end]` of samples.
#[allow(clippy::too_many_arguments)]
fn window_fn(name: &str, t: &[i64], v: &[f64], end: i64, range: i64, step_time: i64, param: f64) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let secs = |ns: i64| ns as f64 / 1e9;
    Some(match name {
        "rate" | "increase" | "delta" => return extrapolated(name, t, v, end - range, end, range),
        "irate" | "idelta" => {
            if n < 2 {
                return None;
            }
            let (pt, pv, lt, lv) = (t[n - 2], v[n - 2], t[n - 1], v[n - 1]);
            let mut r = if name == "irate" && lv < pv { lv } else { lv - pv };
            let dt = lt - pt;
            if dt == 0 {
                return None;
            }
            if name == "irate" {
                r /= secs(dt);
            }
            r
        }
        "deriv" => {
            if n < 2 {
                return None;
            }
            linear_regression(t, v, t[0]).0
        }
        "predict_linear" => {
            if n < 2 {
                return None;
            }
            let (slope, intercept) = linear_regression(t, v, step_time);
            intercept + slope * param
        }
        "resets" => v.windows(2).filter(|w| w[1] < w[0]).count() as f64,
        "changes" => v.windows(2).filter(|w| w[1] != w[0] && !(w[1].is_nan() && w[0].is_nan())).count() as f64,
        "avg_over_time" => crate::sum::mean(v),
        "min_over_time" => v.iter().fold(v[0], |m, &x| if x < m || m.is_nan() { x } else { m }),
        "max_over_time" => v.iter().fold(v[0], |m, &x| if x > m || m.is_nan() { x } else { m }),
        "sum_over_time" => crate::sum::sum(v),
        "count_over_time" => n as f64,
        "last_over_time" => v[n - 1],
        "present_over_time" => 1.0,
        "stddev_over_time" | "stdvar_over_time" => {
            // Welford's, both sums compensated (Prometheus 2.42).
            let (mut count, mut mean, mut aux) = (0.0, Neumaier::default(), Neumaier::default());
            for &x in v {
                count += 1.0;
                let delta = x - (mean.sum + mean.c);
                mean.add(delta / count);
                aux.add(delta * (x - (mean.sum + mean.c)));
            }
            let var = (aux.sum + aux.c) / count;
            if name == "stdvar_over_time" { var } else { var.sqrt() }
        }
        "quantile_over_time" => quantile(param, &mut v.to_vec()),
        _ => return None,
    })
}

/// `rate`, `increase` and `delta` as Prometheus extrapolates them to the
/// window's edges (`extrapolatedRate` in its engine).
fn extrapolated(name: &str, t: &[i64], v: &[f64], range_start: i64, range_end: i64, range: i64) -> Option<f64> {
    let n = v.len();
    if n < 2 {
        return None;
    }
    let counter = name != "delta";
    let mut result = v[n - 1] - v[0];
    if counter {
        let mut last = 0.0;
        for &x in v {
            if x < last {
                result += last;
            }
            last = x;
        }
    }
    let secs = |ns: i64| ns as f64 / 1e9;
    let mut to_start = secs(t[0] - range_start);
    let to_end = secs(range_end - t[n - 1]);
    let sampled = secs(t[n - 1] - t[0]);
    let avg_between = sampled / (n - 1) as f64;
    if counter && result > 0.0 && v[0] >= 0.0 {
        let to_zero = sampled * (v[0] / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = avg_between * 1.1;
    let mut interval = sampled;
    interval += if to_start < threshold { to_start } else { avg_between / 2.0 };
    interval += if to_end < threshold { to_end } else { avg_between / 2.0 };
    result *= interval / sampled;
    if name == "rate" {
        result /= secs(range);
    }
    Some(result)
}

/// Least squares over (time − `intercept_time` in s, value): (slope, intercept).
fn linear_regression(t: &[i64], v: &[f64], intercept_time: i64) -> (f64, f64) {
    if v.iter().all(|&x| x == v[0]) {
        return if v[0].is_infinite() { (f64::NAN, f64::NAN) } else { (0.0, v[0]) };
    }
    let n = v.len() as f64;
    // Compensated sums, as Prometheus 2.42 adds them.
    let (mut sx, mut sy, mut sxy, mut sx2) =
        (Neumaier::default(), Neumaier::default(), Neumaier::default(), Neumaier::default());
    for (&ti, &y) in t.iter().zip(v) {
        let x = (ti - intercept_time) as f64 / 1e9;
        sx.add(x);
        sy.add(y);
        sxy.add(x * y);
        sx2.add(x * x);
    }
    let (sx, sy, sxy, sx2) = (sx.sum + sx.c, sy.sum + sy.c, sxy.sum + sxy.c, sx2.sum + sx2.c);
    let cov = sxy - sx * sy / n;
    let var = sx2 - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

fn holt_winters(v: &[f64], sf: f64, tf: f64) -> Option<f64> {
    if v.len() < 2 {
        return None;
    }
    let (mut s0, mut s1, mut b) = (0.0, v[0], v[1] - v[0]);
    for (i, &x) in v.iter().enumerate().skip(1) {
        if i > 1 {
            b = tf * (s1 - s0) + (1.0 - tf) * b;
        }
        let y = (1.0 - sf) * (s1 + b);
        (s0, s1) = (s1, sf * x + y);
    }
    Some(s1)
}

/// `histogram_quantile` over classic buckets (`le` labels), per group of
/// series that differ only in `le`.
fn histogram_quantile(q: &[f64], v: Vec<Series>, steps: usize) -> Result<Value> {
    let mut groups: std::collections::HashMap<Labels, Vec<(f64, &Series)>> = std::collections::HashMap::new();
    for s in &v {
        let le = value::get(&s.labels, "le");
        let bound = match le {
            "+Inf" | "Inf" | "+inf" | "inf" => f64::INFINITY,
            "-Inf" | "-inf" => f64::NEG_INFINITY,
            other => match other.parse::<f64>() {
                Ok(b) => b,
                Err(_) => continue,
            },
        };
        let mut key = s.labels.clone();
        value::drop_name(&mut key);
        value::set(&mut key, "le", "");
        groups.entry(key).or_default().push((bound, s));
    }
    let mut out = Vec::new();
    for (labels, buckets) in groups {
        let points = (0..steps)
            .map(|i| {
                let mut b: Vec<(f64, f64)> =
                    buckets.iter().filter_map(|(le, s)| s.points[i].map(|c| (*le, c))).collect();
                (!b.is_empty()).then(|| bucket_quantile(q[i], &mut b))
            })
            .collect();
        out.push(Series { labels, points });
    }
    merge(out)
}

/// The quantile `q` of one classic histogram's buckets (`le`, cumulative
/// count), as `histogram_quantile` computes it: sorted by `le`, counts made
/// monotonic, NaN without a `+Inf` bucket. Sorts `b`.
pub fn bucket_quantile(q: f64, b: &mut [(f64, f64)]) -> f64 {
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    b.sort_by(|x, y| x.0.partial_cmp(&y.0).unwrap_or(std::cmp::Ordering::Equal));
    if b.last().is_none_or(|l| l.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Coalesce equal bounds, then make the counts monotonic.
    let mut c: Vec<(f64, f64)> = Vec::with_capacity(b.len());
    for &(le, n) in b.iter() {
        match c.last_mut() {
            Some(last) if last.0 == le => last.1 += n,
            _ => c.push((le, n)),
        }
    }
    for i in 1..c.len() {
        if c[i].1 < c[i - 1].1 {
            c[i].1 = c[i - 1].1;
        }
    }
    if c.len() < 2 {
        return f64::NAN;
    }
    let observations = c[c.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let k = c[..c.len() - 1].partition_point(|x| x.1 < rank);
    if k == c.len() - 1 {
        return c[c.len() - 2].0;
    }
    if k == 0 && c[0].0 <= 0.0 {
        return c[0].0;
    }
    let (mut start, end, mut count) = (0.0, c[k].0, c[k].1);
    if k > 0 {
        start = c[k - 1].0;
        count -= c[k - 1].1;
        rank -= c[k - 1].1;
    }
    start + (end - start) * (rank / count)
}

/// Go's inverse hyperbolic functions (`math.Asinh`, `Acosh`, `Atanh`, pure
/// Go on every platform Prometheus ships for), so that `acosh(1.5e308)` is
/// 710.29 as there, not +Inf: past 2^28 they take `ln(2x)` without
/// squaring `x`.
mod go {
    const LARGE: f64 = (1u64 << 28) as f64;
    const NEAR_ZERO: f64 = 1.0 / LARGE;

    pub fn acosh(x: f64) -> f64 {
        if x < 1.0 || x.is_nan() {
            f64::NAN
        } else if x == 1.0 {
            0.0
        } else if x >= LARGE {
            x.ln() + std::f64::consts::LN_2
        } else if x > 2.0 {
            (2.0 * x - 1.0 / (x + (x * x - 1.0).sqrt())).ln()
        } else {
            let t = x - 1.0;
            (t + (2.0 * t + t * t).sqrt()).ln_1p()
        }
    }

    pub fn asinh(x: f64) -> f64 {
        if x.is_nan() || x.is_infinite() {
            return x;
        }
        let a = x.abs();
        if a < NEAR_ZERO {
            return x;
        }
        let r = if a > LARGE {
            a.ln() + std::f64::consts::LN_2
        } else if a > 2.0 {
            (2.0 * a + 1.0 / ((a * a + 1.0).sqrt() + a)).ln()
        } else {
            (a + a * a / (1.0 + (1.0 + a * a).sqrt())).ln_1p()
        };
        if x < 0.0 { -r } else { r }
    }

    pub fn atanh(x: f64) -> f64 {
        if !(-1.0..=1.0).contains(&x) || x.is_nan() {
            return f64::NAN;
        }
        if x == 1.0 {
            return f64::INFINITY;
        }
        if x == -1.0 {
            return f64::NEG_INFINITY;
        }
        let a = x.abs();
        if a < NEAR_ZERO {
            return x;
        }
        let r = if a < 0.5 {
            let t = a + a;
            0.5 * (t + t * a / (1.0 - a)).ln_1p()
        } else {
            0.5 * ((a + a) / (1.0 - a)).ln_1p()
        };
        if x < 0.0 { -r } else { r }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn huge_values_do_not_overflow_and_small_ones_are_as_in_go() {
            // Prometheus 2.42 answers acosh(1.5e308) = 710.2946… (ln 2x).
            let want = 1.5e308f64.ln() + std::f64::consts::LN_2;
            assert!((710.29..710.30).contains(&want));
            assert_eq!((super::acosh(1.5e308), super::asinh(-1.5e308)), (want, -want));
            for x in [1.5, 3.0, 1e5, 1e20] {
                assert!((super::acosh(x) - x.acosh()).abs() <= 1e-15 * x.acosh(), "{x}");
                assert!((super::asinh(-x) - (-x).asinh()).abs() <= 1e-15 * x.asinh(), "{x}");
            }
            for x in [-0.99, -0.3, 1e-10, 0.4, 0.7] {
                assert!((super::atanh(x) - x.atanh()).abs() <= 1e-15 * x.atanh().abs(), "{x}");
            }
            assert!(super::acosh(0.5).is_nan() && super::atanh(1.5).is_nan());
            assert_eq!(super::asinh(-0.0).to_bits(), (-0.0f64).to_bits());
        }
    }
}
