//! InfluxQL aggregates as InfluxDB 1.x computes them: `count sum mean
//! median min max first last spread stddev` over a field, grouped by tags
//! (`GROUP BY host`, `GROUP BY *`) and by time buckets aligned to the epoch
//! (`GROUP BY time(10s)`) with `fill(null | none | 0 | previous)`; one
//! series per tag group, named and typed as InfluxDB answers.

use std::collections::BTreeMap;

use model::Timestamp;
use serde_json::{Value, json};
use store::Store;

use crate::{TYPE_LABEL, go_float, hidden_label, measurement_series};

const FUNCS: [&str; 10] = ["count", "sum", "mean", "median", "min", "max", "first", "last", "spread", "stddev"];

/// One `f(field) [AS name]` of the select list.
#[derive(Debug, Clone, PartialEq)]
pub struct Agg {
    pub func: String,
    pub field: String,
    pub name: String,
}

impl Agg {
    pub fn parse(item: &str, alias: Option<String>) -> Result<Agg, String> {
        let (func, rest) = item.split_once('(').ok_or_else(|| format!("{item:?}: mix of fields and aggregates"))?;
        let func = func.to_ascii_lowercase();
        if !FUNCS.contains(&func.as_str()) {
            return Err(format!(
                "the function {func}() is not supported yet: kansoku's InfluxQL has {}",
                FUNCS.map(|f| format!("{f}()")).join(", ")
            ));
        }
        let field = rest.strip_suffix(')').ok_or_else(|| format!("{item:?}: one field, then )"))?.trim();
        if field.is_empty() || field == "*" || field.contains(['(', ',']) {
            return Err(format!("{item}: give one field ({func}(field))"));
        }
        let field = crate::unquote(field);
        Ok(Agg { name: alias.unwrap_or_else(|| func.clone()), func, field })
    }

    /// A selector returns one of the points (and, alone, its time).
    fn is_selector(&self) -> bool {
        matches!(self.func.as_str(), "min" | "max" | "first" | "last")
    }
}

/// `fill(...)`: what an empty time bucket shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fill {
    #[default]
    Null,
    None,
    Value(f64),
    Previous,
}

/// `GROUP BY` items.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Grouping {
    pub time: Option<i64>,
    pub tags: Vec<String>,
    pub all_tags: bool,
    pub fill: Fill,
}

impl Grouping {
    pub fn add(&mut self, item: &str) -> Result<(), String> {
        let lower = item.to_ascii_lowercase();
        if let Some(arg) = lower.strip_prefix("time(").and_then(|r| r.strip_suffix(')')) {
            let d = crate::duration_ns(arg.trim())
                .filter(|&d| d > 0)
                .ok_or_else(|| format!("GROUP BY {item}: a duration like 10s"))?;
            self.time = Some(d);
        } else if let Some(arg) = lower.strip_prefix("fill(").and_then(|r| r.strip_suffix(')')) {
            self.fill = match arg.trim() {
                "null" => Fill::Null,
                "none" => Fill::None,
                "previous" => Fill::Previous,
                n => Fill::Value(n.parse().map_err(|_| format!("fill({n}): null, none, previous or a number"))?),
            };
        } else if item == "*" {
            self.all_tags = true;
        } else {
            self.tags.push(crate::unquote(item));
        }
        Ok(())
    }
}

/// The aggregate of one field's values (time-ordered) in one bucket:
/// (value, time of the selected point for selectors).
fn apply(func: &str, pts: &[(i64, f64)], int: bool) -> (Value, Option<i64>) {
    let num = |v: f64| if int { json!(v as i64) } else { go_float(v) };
    let vals = || pts.iter().map(|p| p.1);
    match func {
        "count" => (json!(pts.len()), None),
        "sum" => (num(vals().sum()), None),
        "mean" => (go_float(vals().sum::<f64>() / pts.len() as f64), None),
        "median" => {
            let mut v: Vec<f64> = vals().collect();
            v.sort_by(f64::total_cmp);
            let m = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
            (go_float(m), None)
        }
        "spread" => {
            let (lo, hi) = vals().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
            (num(hi - lo), None)
        }
        "stddev" => {
            if pts.len() < 2 {
                return (Value::Null, None);
            }
            let n = pts.len() as f64;
            let mean = vals().sum::<f64>() / n;
            let var = vals().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
            (go_float(var.sqrt()), None)
        }
        // Selectors: the first of equal values wins, as in InfluxDB.
        "min" | "max" | "first" | "last" => {
            let mut best = pts[0];
            for &p in &pts[1..] {
                let better = match func {
                    "min" => p.1 < best.1,
                    "max" => p.1 > best.1,
                    "last" => true,
                    _ => false,
                };
                if better {
                    best = p;
                }
            }
            (num(best.1), Some(best.0))
        }
        _ => (Value::Null, None),
    }
}

/// A group's points by field: (time, value), time-ordered once gathered.
type FieldPoints = BTreeMap<String, Vec<(i64, f64)>>;

#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    store: &Store,
    db: &str,
    measurement: &str,
    aggs: &[Agg],
    (from, to): (i64, i64),
    tags: &[crate::TagCond],
    group: &Grouping,
    limit: Option<usize>,
    epoch: Option<i64>,
) -> Result<Value, String> {
    let fields: Vec<String> = aggs.iter().map(|a| a.field.clone()).collect();
    let series = measurement_series(store, db, measurement, tags, Some(&fields))?;
    if series.is_empty() {
        return Ok(json!({}));
    }
    let group_keys: Vec<String> = if group.all_tags {
        let mut keys: Vec<String> = series
            .iter()
            .flat_map(|(_, k, _)| k.labels().iter().map(|l| l.0.clone()))
            .filter(|k| !hidden_label(k))
            .collect();
        keys.sort();
        keys.dedup();
        keys
    } else {
        group.tags.clone()
    };
    // group (tag values) -> field -> time-ordered points; and the field's type.
    let mut groups: BTreeMap<Vec<String>, FieldPoints> = BTreeMap::new();
    let mut int_field: BTreeMap<String, bool> = BTreeMap::new();
    for (id, key, field) in &series {
        let gk: Vec<String> = group_keys.iter().map(|t| key.get(t).unwrap_or("").to_owned()).collect();
        int_field.insert(field.clone(), key.get(TYPE_LABEL) == Some("int"));
        let (ts, vs) = store.read(*id, Timestamp(from), Timestamp(to));
        groups.entry(gk).or_default().entry(field.clone()).or_default().extend(ts.into_iter().zip(vs));
    }
    let mut out = Vec::new();
    for (gk, mut by_field) in groups {
        for pts in by_field.values_mut() {
            pts.sort_by_key(|p| p.0);
        }
        // The buckets: aligned to the epoch, from the range's start to its end.
        let buckets: Vec<(i64, i64)> = match group.time {
            Some(d) => {
                let first = from.max(0).div_euclid(d) * d;
                let last = to.div_euclid(d) * d;
                if (last - first) / d > 100_000 {
                    return Err("GROUP BY time(...) would make more than 100,000 buckets: narrow the time range".into());
                }
                (0..=(last - first) / d).map(|k| (first + k * d, first + (k + 1) * d)).collect()
            }
            None => vec![(if from == i64::MIN { 0 } else { from }, i64::MAX)],
        };
        let alone_selector = aggs.len() == 1 && aggs[0].is_selector() && group.time.is_none();
        let mut values = Vec::new();
        let mut previous: Vec<Value> = vec![Value::Null; aggs.len()];
        for (start, end) in buckets {
            let mut row = vec![Value::Null; 1 + aggs.len()];
            let mut time = start;
            let mut any = false;
            for (c, a) in aggs.iter().enumerate() {
                let pts = by_field.get(&a.field).map(Vec::as_slice).unwrap_or_default();
                let lo = pts.partition_point(|p| p.0 < start);
                let hi = pts.partition_point(|p| p.0 < end);
                if lo < hi {
                    any = true;
                    let (v, at) = apply(&a.func, &pts[lo..hi], int_field.get(&a.field).copied().unwrap_or(false));
                    if alone_selector && let Some(at) = at {
                        time = at;
                    }
                    row[1 + c] = v;
                } else {
                    row[1 + c] = match (&group.fill, a.func.as_str()) {
                        (Fill::Value(v), _) => go_float(*v),
                        (Fill::Previous, _) => previous[c].clone(),
                        // An empty bucket counts 0, as in InfluxDB.
                        (Fill::Null, "count") => json!(0),
                        _ => Value::Null,
                    };
                }
                previous[c] = row[1 + c].clone();
            }
            if !any && (group.fill == Fill::None || group.time.is_none()) {
                continue;
            }
            row[0] = match epoch {
                Some(unit) => json!(time / unit),
                None => json!(Timestamp(time).to_string()),
            };
            values.push(row);
            if limit.is_some_and(|l| values.len() >= l) {
                break;
            }
        }
        if values.is_empty() {
            continue;
        }
        let mut columns = vec!["time".to_owned()];
        columns.extend(aggs.iter().map(|a| a.name.clone()));
        let mut s = json!({ "name": measurement, "columns": columns, "values": values });
        if !group_keys.is_empty() {
            let t: serde_json::Map<String, Value> =
                group_keys.iter().cloned().zip(gk.into_iter().map(Value::String)).collect();
            s["tags"] = Value::Object(t);
        }
        out.push(s);
    }
    Ok(if out.is_empty() { json!({}) } else { json!({ "series": out }) })
}
