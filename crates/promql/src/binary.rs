//! Binary operators: arithmetic, comparison (filtering or `bool`) and set
//! operators, between scalars and vectors, with Prometheus's vector
//! matching (`on`, `ignoring`, `group_left`, `group_right`) step by step.

use std::collections::HashMap;

use promql_parser::parser::{BinModifier, BinaryExpr, LabelModifier, VectorMatchCardinality};

use crate::engine::{Error, Ev, merge};
use crate::value::{self, Labels, Series, Value};

type Result<T> = std::result::Result<T, Error>;

fn is_comparison(op: &str) -> bool {
    matches!(op, "==" | "!=" | ">" | "<" | ">=" | "<=")
}

/// Arithmetic drops the metric name (`atan2` keeps it, as in Prometheus
/// 2.42); so does a comparison with `bool`.
fn drops_name(op: &str, bool_: bool) -> bool {
    bool_ || matches!(op, "+" | "-" | "*" | "/" | "%" | "^")
}

/// `lhs op rhs`: the value, and whether a comparison keeps it.
fn apply(op: &str, l: f64, r: f64) -> Result<(f64, bool)> {
    Ok(match op {
        "+" => (l + r, true),
        "-" => (l - r, true),
        "*" => (l * r, true),
        "/" => (l / r, true),
        "%" => (l % r, true),
        "^" => (l.powf(r), true),
        "atan2" => (l.atan2(r), true),
        "==" => (l, l == r),
        "!=" => (l, l != r),
        ">" => (l, l > r),
        "<" => (l, l < r),
        ">=" => (l, l >= r),
        "<=" => (l, l <= r),
        other => return Err(Error::BadData(format!("operator {other} between these operands is not supported"))),
    })
}

/// What a comparison with `bool` returns.
fn as_bool(keep: bool) -> f64 {
    if keep { 1.0 } else { 0.0 }
}

pub(crate) fn binary(ev: &Ev<'_, '_>, b: &BinaryExpr, times: &[i64]) -> Result<Value> {
    let op = b.op.to_string();
    let bool_ = b.modifier.as_ref().is_some_and(|m| m.return_bool);
    let lhs = ev.eval(&b.lhs, times)?;
    let rhs = ev.eval(&b.rhs, times)?;
    match (lhs, rhs) {
        (Value::Scalar(l), Value::Scalar(r)) => {
            let mut out = Vec::with_capacity(l.len());
            for (a, b) in l.into_iter().zip(r) {
                let (v, keep) = apply(&op, a, b)?;
                out.push(if is_comparison(&op) { as_bool(keep) } else { v });
            }
            Ok(Value::Scalar(out))
        }
        (Value::Vector(v), Value::Scalar(s)) => vector_scalar(&op, bool_, v, &s, false),
        (Value::Scalar(s), Value::Vector(v)) => vector_scalar(&op, bool_, v, &s, true),
        (Value::Vector(l), Value::Vector(r)) => vector_vector(ev, &op, b.modifier.as_ref(), l, r, times.len()),
        _ => Err(Error::BadData(format!("operator {op} is not defined for strings"))),
    }
}

fn vector_scalar(op: &str, bool_: bool, mut v: Vec<Series>, s: &[f64], scalar_left: bool) -> Result<Value> {
    if matches!(op, "and" | "or" | "unless") {
        return Err(Error::BadData(format!("set operator {op} not allowed between a vector and a scalar")));
    }
    let comparison = is_comparison(op);
    for series in &mut v {
        if drops_name(op, bool_) {
            value::drop_name(&mut series.labels);
        }
        for (i, p) in series.points.iter_mut().enumerate() {
            let Some(x) = *p else { continue };
            let (l, r) = if scalar_left { (s[i], x) } else { (x, s[i]) };
            let (val, keep) = apply(op, l, r)?;
            *p = match (comparison, bool_) {
                (true, true) => Some(as_bool(keep)),
                // A filter keeps the vector's own value, whichever side it is on.
                (true, false) => keep.then_some(x),
                _ => Some(val),
            };
        }
    }
    merge(v)
}

/// The labels two series are matched on.
fn signature(labels: &Labels, matching: Option<&LabelModifier>) -> Labels {
    match matching {
        Some(LabelModifier::Include(on)) => {
            labels.iter().filter(|(k, _)| on.labels.iter().any(|o| o == k)).cloned().collect()
        }
        Some(LabelModifier::Exclude(ign)) => {
            labels.iter().filter(|(k, _)| k != value::NAME && !ign.labels.iter().any(|o| o == k)).cloned().collect()
        }
        None => labels.iter().filter(|(k, _)| k != value::NAME).cloned().collect(),
    }
}

fn vector_vector(
    ev: &Ev<'_, '_>,
    op: &str,
    modifier: Option<&BinModifier>,
    l: Vec<Series>,
    r: Vec<Series>,
    steps: usize,
) -> Result<Value> {
    let matching = modifier.and_then(|m| m.matching.as_ref());
    let card = modifier.map_or(&VectorMatchCardinality::OneToOne, |m| &m.card);
    let bool_ = modifier.is_some_and(|m| m.return_bool);
    let lsig: Vec<Labels> = l.iter().map(|s| signature(&s.labels, matching)).collect();
    let rsig: Vec<Labels> = r.iter().map(|s| signature(&s.labels, matching)).collect();
    match op {
        "and" | "unless" => {
            let want = op == "and";
            let mut out = l;
            for i in 0..steps {
                let present: std::collections::HashSet<&Labels> =
                    rsig.iter().zip(&r).filter(|(_, s)| s.points[i].is_some()).map(|(k, _)| k).collect();
                for (s, series) in out.iter_mut().enumerate() {
                    if series.points[i].is_some() && present.contains(&lsig[s]) != want {
                        series.points[i] = None;
                    }
                }
            }
            return Ok(Value::Vector(out.into_iter().filter(|s| s.points.iter().any(Option::is_some)).collect()));
        }
        "or" => {
            let mut rr = r;
            for i in 0..steps {
                let present: std::collections::HashSet<&Labels> =
                    lsig.iter().zip(&l).filter(|(_, s)| s.points[i].is_some()).map(|(k, _)| k).collect();
                for (s, series) in rr.iter_mut().enumerate() {
                    if present.contains(&rsig[s]) {
                        series.points[i] = None;
                    }
                }
            }
            let mut out = l;
            out.extend(rr);
            return merge(out);
        }
        _ => {}
    }
    // group_right swaps the sides: the "many" side is always `many`.
    let (many, one, msig, osig, swapped) = match card {
        VectorMatchCardinality::OneToMany(_) => (&r, &l, &rsig, &lsig, true),
        _ => (&l, &r, &lsig, &rsig, false),
    };
    let include: &[String] = match card {
        VectorMatchCardinality::ManyToOne(ls) | VectorMatchCardinality::OneToMany(ls) => &ls.labels,
        _ => &[],
    };
    let one_to_one = matches!(card, VectorMatchCardinality::OneToOne);
    let comparison = is_comparison(op);
    let mut out: HashMap<Labels, Vec<Option<f64>>> = HashMap::new();
    let mut order: Vec<Labels> = Vec::new();
    for i in 0..steps {
        let mut by_sig: HashMap<&Labels, usize> = HashMap::new();
        for (s, series) in one.iter().enumerate() {
            if series.points[i].is_some() && by_sig.insert(&osig[s], s).is_some() {
                return Err(Error::Execution(format!(
                    "found duplicate series for the match group {} on the {} hand-side of the operation: many-to-many matching not allowed: matching labels must be unique on one side",
                    fmt_labels(&osig[s]),
                    if swapped { "left" } else { "right" }
                )));
            }
        }
        let mut matched: HashMap<&Labels, usize> = HashMap::new();
        for (s, series) in many.iter().enumerate() {
            let Some(mv) = series.points[i] else { continue };
            let Some(&o) = by_sig.get(&msig[s]) else { continue };
            if one_to_one && matched.insert(&msig[s], s).is_some() {
                return Err(Error::Execution(format!(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right); found for {}",
                    fmt_labels(&msig[s])
                )));
            }
            let ov = one[o].points[i].expect("present");
            let (lv, rv) = if swapped { (ov, mv) } else { (mv, ov) };
            let (val, keep) = apply(op, lv, rv)?;
            let v = match (comparison, bool_) {
                (true, true) => as_bool(keep),
                (true, false) if !keep => continue,
                (true, false) => lv,
                _ => val,
            };
            // The result's labels: the "many" side's, less the name where the
            // operator drops it; one-to-one keeps only the matched labels.
            let mut labels = series.labels.clone();
            if drops_name(op, bool_) {
                value::drop_name(&mut labels);
            }
            if one_to_one {
                labels = match matching {
                    Some(LabelModifier::Include(on)) => {
                        labels.into_iter().filter(|(k, _)| on.labels.iter().any(|o| o == k)).collect()
                    }
                    Some(LabelModifier::Exclude(ign)) => {
                        labels.into_iter().filter(|(k, _)| !ign.labels.iter().any(|o| o == k)).collect()
                    }
                    None => labels,
                };
            }
            for name in include {
                value::set(&mut labels, name, value::get(&one[o].labels, name));
            }
            let pts = match out.entry(labels) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    // Many-to-many matches can make more series than either
                    // side: each counted before it is allocated.
                    ev.charge_series(steps)?;
                    order.push(v.key().clone());
                    v.insert(vec![None; steps])
                }
            };
            if pts[i].is_some() {
                return Err(Error::Execution(
                    "multiple matches for labels: grouping labels must ensure unique matches".into(),
                ));
            }
            pts[i] = Some(v);
        }
    }
    Ok(Value::Vector(
        order
            .into_iter()
            .map(|labels| {
                let points = out.remove(&labels).expect("every ordered key was inserted");
                Series { labels, points }
            })
            .collect(),
    ))
}

fn fmt_labels(l: &Labels) -> String {
    let inner: Vec<String> = l.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{{{}}}", inner.join(", "))
}
