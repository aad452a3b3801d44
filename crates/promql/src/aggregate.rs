//! Aggregations (`sum avg min max count group stddev stdvar topk bottomk
//! quantile count_values`, `by` and `without`), with Prometheus 2.42's
//! arithmetic: running means (never a sum that overflows), Welford's
//! variance, NaN replaced by any number in `min`/`max`.

use std::collections::HashMap;

use promql_parser::parser::{AggregateExpr, LabelModifier};

use crate::engine::{Error, Ev};
use crate::value::{self, Labels, Series, Value};

type Result<T> = std::result::Result<T, Error>;

/// The labels a series is grouped by.
fn group_labels(labels: &Labels, modifier: &Option<LabelModifier>) -> Labels {
    match modifier {
        Some(LabelModifier::Include(by)) => {
            labels.iter().filter(|(k, _)| by.labels.iter().any(|b| b == k)).cloned().collect()
        }
        Some(LabelModifier::Exclude(without)) => {
            labels.iter().filter(|(k, _)| k != value::NAME && !without.labels.iter().any(|b| b == k)).cloned().collect()
        }
        None => Labels::new(),
    }
}

/// Go's `math.Max`/`math.Min` keep NaN; Rust's drop it.
pub(crate) fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()).reverse()));
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    values[lower as usize] * (1.0 - weight) + values[upper as usize] * weight
}

#[derive(Clone, Copy)]
struct Acc {
    n: f64,
    value: f64,
    mean: f64,
}

pub(crate) fn aggregate(ev: &Ev<'_, '_>, a: &AggregateExpr, times: &[i64]) -> Result<Value> {
    let op = a.op.to_string();
    let input = match ev.eval(&a.expr, times)? {
        Value::Vector(v) => v,
        other => return Err(Error::BadData(format!("expected an instant vector in {op}, got a {}", other.kind()))),
    };
    let param = match &a.param {
        Some(p) => Some(ev.eval(p, times)?),
        None => None,
    };
    let steps = times.len();
    let keys: Vec<Labels> = input.iter().map(|s| group_labels(&s.labels, &a.modifier)).collect();
    match op.as_str() {
        "topk" | "bottomk" => {
            let Some(Value::Scalar(k)) = param else { return Err(Error::BadData(format!("{op} needs a number k"))) };
            let top = op == "topk";
            // Ties are broken as Prometheus breaks them: in its input order
            // (series sorted by labels), through its heap.
            let mut by_labels: Vec<usize> = (0..input.len()).collect();
            by_labels.sort_by(|&a, &b| input[a].labels.cmp(&input[b].labels));
            // Prometheus refuses a k that is no int64 at any step, data or not.
            if let Some(bad) = k.iter().find(|&&k| !(-9.223372036854776e18..=9.223372036854776e18).contains(&k)) {
                return Err(Error::Execution(format!("Scalar value {} overflows int64", go_float(*bad))));
            }
            let mut out: Vec<Series> =
                input.iter().map(|s| Series { labels: s.labels.clone(), points: vec![None; steps] }).collect();
            for i in 0..steps {
                let k = k[i] as i64;
                if k < 1 {
                    continue;
                }
                let mut groups: HashMap<&Labels, Vec<usize>> = HashMap::new();
                for &s in &by_labels {
                    if input[s].points[i].is_some() {
                        groups.entry(&keys[s]).or_default().push(s);
                    }
                }
                for members in groups.values() {
                    let v = |s: usize| input[s].points[i].expect("present");
                    for s in heap_select(members, k as usize, top, v) {
                        out[s].points[i] = input[s].points[i];
                    }
                }
            }
            Ok(Value::Vector(out.into_iter().filter(|s| s.points.iter().any(Option::is_some)).collect()))
        }
        "count_values" => {
            let Some(Value::String(label)) = param else {
                return Err(Error::BadData("count_values needs a label name".into()));
            };
            if !crate::functions::valid_label_name(&label) {
                return Err(Error::Execution(format!("invalid label name {label:?}")));
            }
            let mut out: HashMap<Labels, Vec<Option<f64>>> = HashMap::new();
            for (s, series) in input.iter().enumerate() {
                for (i, p) in series.points.iter().enumerate() {
                    if let Some(v) = p {
                        let mut l = keys[s].clone();
                        value::set(&mut l, &label, &value::format_float(*v));
                        let pts = match out.entry(l) {
                            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                            std::collections::hash_map::Entry::Vacant(v) => {
                                // Up to one series per distinct value: counted
                                // before it is allocated.
                                ev.charge_series(steps)?;
                                v.insert(vec![None; steps])
                            }
                        };
                        pts[i] = Some(pts[i].unwrap_or(0.0) + 1.0);
                    }
                }
            }
            Ok(Value::Vector(out.into_iter().map(|(labels, points)| Series { labels, points }).collect()))
        }
        "quantile" => {
            let Some(Value::Scalar(q)) = param else { return Err(Error::BadData("quantile needs a number φ".into())) };
            let mut groups: HashMap<&Labels, Vec<usize>> = HashMap::new();
            for (s, k) in keys.iter().enumerate() {
                groups.entry(k).or_default().push(s);
            }
            let mut out = Vec::new();
            for (k, members) in groups {
                let points = (0..steps)
                    .map(|i| {
                        let mut vals: Vec<f64> = members.iter().filter_map(|&s| input[s].points[i]).collect();
                        (!vals.is_empty()).then(|| quantile(q[i], &mut vals))
                    })
                    .collect();
                out.push(Series { labels: k.clone(), points });
            }
            Ok(Value::Vector(out))
        }
        "sum" | "avg" | "min" | "max" | "count" | "group" | "stddev" | "stdvar" => {
            let mut groups: HashMap<&Labels, Vec<Option<Acc>>> = HashMap::new();
            for (s, series) in input.iter().enumerate() {
                let accs = groups.entry(&keys[s]).or_insert_with(|| vec![None; steps]);
                for (i, p) in series.points.iter().enumerate() {
                    let Some(v) = *p else { continue };
                    accs[i] = Some(match accs[i] {
                        None => Acc { n: 1.0, value: if op == "stddev" || op == "stdvar" { 0.0 } else { v }, mean: v },
                        Some(mut g) => {
                            g.n += 1.0;
                            match op.as_str() {
                                "sum" => g.value += v,
                                "min" if g.value > v || g.value.is_nan() => g.value = v,
                                "max" if g.value < v || g.value.is_nan() => g.value = v,
                                "avg" => {
                                    let same_inf =
                                        g.mean.is_infinite() && v.is_infinite() && (g.mean > 0.0) == (v > 0.0);
                                    let finite_into_inf = g.mean.is_infinite() && v.is_finite();
                                    if !same_inf && !finite_into_inf {
                                        g.mean += v / g.n - g.mean / g.n;
                                    }
                                }
                                "stddev" | "stdvar" => {
                                    let delta = v - g.mean;
                                    g.mean += delta / g.n;
                                    g.value += delta * (v - g.mean);
                                }
                                _ => {}
                            }
                            g
                        }
                    });
                }
            }
            let out = groups
                .into_iter()
                .map(|(k, accs)| Series {
                    labels: k.clone(),
                    points: accs
                        .into_iter()
                        .map(|a| {
                            a.map(|g| match op.as_str() {
                                "avg" => g.mean,
                                "count" => g.n,
                                "group" => 1.0,
                                "stdvar" => g.value / g.n,
                                "stddev" => (g.value / g.n).sqrt(),
                                _ => g.value,
                            })
                        })
                        .collect(),
                })
                .collect();
            Ok(Value::Vector(out))
        }
        other => Err(Error::BadData(format!("the aggregation {other} is not supported"))),
    }
}

/// Go's `%v` of a float: `NaN`, `+Inf`, or the shortest decimal (with an
/// exponent from 1e21, as Go writes it).
fn go_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if x.abs() >= 1e21 || (x != 0.0 && x.abs() < 1e-4) {
        value::go_exponent(x)
    } else {
        format!("{x}")
    }
}

/// The `k` members `topk` (`top`) or `bottomk` keeps, chosen as Prometheus
/// 2.42 chooses them: a heap of `k` (Go's `container/heap`) whose root is
/// replaced by a better value, NaN counting as the worst, so ties go to the
/// later series as there.
fn heap_select(members: &[usize], k: usize, top: bool, v: impl Fn(usize) -> f64) -> Vec<usize> {
    // Go's `vectorByValueHeap.Less` (topk) and `vectorByReverseValueHeap.Less`.
    let less = |h: &[usize], i: usize, j: usize| {
        let (a, b) = (v(h[i]), v(h[j]));
        a.is_nan() || if top { a < b } else { a > b }
    };
    let up = |h: &mut Vec<usize>, mut j: usize| {
        while j > 0 {
            let i = (j - 1) / 2;
            if !less(h, j, i) {
                break;
            }
            h.swap(i, j);
            j = i;
        }
    };
    let down = |h: &mut Vec<usize>, mut i: usize, n: usize| {
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            if j1 + 1 < n && less(h, j1 + 1, j1) {
                j = j1 + 1;
            }
            if !less(h, j, i) {
                break;
            }
            h.swap(i, j);
            i = j;
        }
    };
    // k may be 2e10 (`topk(21799978951, x)`, found by the fuzzer): the heap
    // never holds more than the members.
    let mut h: Vec<usize> = Vec::with_capacity(k.min(members.len()));
    for (n, &s) in members.iter().enumerate() {
        if n == 0 {
            h.push(s);
            continue;
        }
        let (root, x) = (v(h[0]), v(s));
        let better = if top { root < x } else { root > x };
        if h.len() < k || better || root.is_nan() {
            if h.len() == k {
                if k == 1 {
                    h[0] = s;
                    continue;
                }
                // heap.Pop: the root to the end, sift down, drop it.
                let last = h.len() - 1;
                h.swap(0, last);
                down(&mut h, 0, last);
                h.pop();
            }
            h.push(s);
            let last = h.len() - 1;
            up(&mut h, last);
        }
    }
    h
}
