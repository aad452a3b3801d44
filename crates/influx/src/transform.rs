//! InfluxQL's transformations as InfluxDB 1.6 computes them (its stream
//! reducers in `query/functions.go`): `derivative`, `non_negative_derivative`,
//! `difference`, `non_negative_difference`, `cumulative_sum`,
//! `moving_average` and `elapsed`, and the math functions (`abs`, `round`,
//! `sqrt`, `ln`, …, each value alone), over a field's points per series, or over
//! a function's buckets under `GROUP BY time(…)` — those read from one
//! interval before the range (as many as the window needs for
//! `moving_average`), so the first bucket has the one before it, and answer
//! from the range's first bucket on.

use serde_json::{Value, json};

use crate::ql::{Item, Select, Transform};
use crate::query::{FieldType, Table, go_float, groups, series_json, time_json};

/// Where a statement's table is read from: before its range when a
/// transformation of buckets needs earlier ones.
pub(crate) fn reads_from(s: &Select) -> i64 {
    let (Some((t, Item::Call { .. }, arg, _)), Some(d)) = (s.transform(), s.group.time) else { return s.from };
    let extra = match t {
        Transform::CumulativeSum | Transform::Math(_) => 0,
        Transform::MovingAverage => arg.unwrap_or(1).saturating_sub(1).saturating_mul(d),
        _ => d,
    };
    if s.from == i64::MIN { s.from } else { s.from.saturating_sub(extra) }
}

/// A point's value: a number, and whether it is an integer (integers stay
/// integers through `difference` and `cumulative_sum`, as in InfluxDB).
#[derive(Clone, Copy)]
struct Num {
    v: f64,
    int: bool,
}

impl Num {
    fn of(v: &Value) -> Option<Num> {
        Some(Num { v: v.as_f64()?, int: v.is_i64() || v.is_u64() })
    }

    fn json(self) -> Value {
        if self.int { json!(self.v as i64) } else { go_float(self.v) }
    }
}

/// `t` over one series' points (time-ordered): its output points.
fn apply(t: Transform, arg: Option<i64>, unit: i64, pts: &[(i64, Num)]) -> Vec<(i64, Value)> {
    let mut out = Vec::new();
    match t {
        Transform::Math(m) => {
            for &(time, p) in pts {
                let v = if p.int && m.keeps_integers() { p } else { Num { v: m.apply(p.v), int: false } };
                // JSON has no NaN or infinity: influxd leaves such a point out.
                if v.v.is_finite() {
                    out.push((time, v.json()));
                }
            }
        }
        Transform::CumulativeSum => {
            let mut sum: Option<Num> = None;
            for &(time, n) in pts {
                let s = match sum {
                    Some(s) if s.int && n.int => Num { v: ((s.v as i64).wrapping_add(n.v as i64)) as f64, int: true },
                    Some(s) => Num { v: s.v + n.v, int: false },
                    None => n,
                };
                sum = Some(s);
                out.push((time, s.json()));
            }
        }
        Transform::MovingAverage => {
            let n = arg.unwrap_or(1).max(1) as usize;
            // The window's room as the points fill it: N comes from the
            // query (moving_average(x, 9223372036854775807) asked for 64 EiB).
            let (mut buf, mut pos, mut sum): (Vec<f64>, usize, f64) = (Vec::with_capacity(n.min(pts.len())), 0, 0.0);
            for &(time, p) in pts {
                if buf.len() < n {
                    buf.push(p.v);
                } else {
                    sum -= buf[pos];
                    buf[pos] = p.v;
                }
                sum += p.v;
                pos = (pos + 1) % n;
                if buf.len() == n {
                    out.push((time, go_float(sum / n as f64)));
                }
            }
        }
        _ => {
            // A point at the time of the one before is skipped (InfluxDB
            // keeps the first of a joined series' equal times).
            let mut prev: Option<(i64, Num)> = None;
            for &(time, cur) in pts {
                if let Some((pt, p)) = prev {
                    if pt == time {
                        continue;
                    }
                    let diff = cur.v - p.v;
                    match t {
                        Transform::Derivative | Transform::NonNegativeDerivative => {
                            if !(t == Transform::NonNegativeDerivative && diff < 0.0) {
                                out.push((time, go_float(diff / ((time - pt) as f64 / unit as f64))));
                            }
                        }
                        Transform::Difference | Transform::NonNegativeDifference => {
                            let d = if cur.int && p.int {
                                Num { v: (cur.v as i64).wrapping_sub(p.v as i64) as f64, int: true }
                            } else {
                                Num { v: diff, int: false }
                            };
                            if !(t == Transform::NonNegativeDifference && d.v < 0.0) {
                                out.push((time, d.json()));
                            }
                        }
                        _ => out.push((time, json!((time - pt) / unit))),
                    }
                }
                prev = Some((time, cur));
            }
        }
    }
    out
}

/// One item's series: (its group's tags, its output points in time order).
type ItemSeries = Vec<(Value, Vec<(i64, Value)>)>;

/// The transformation `item` (an `Item::Transform`) of every series.
fn item_series(table: &Table, s: &Select, item: &Item) -> Result<ItemSeries, String> {
    let Item::Transform { t, inner, arg, .. } = item else {
        return Err("a transformation beside fields or functions is not supported yet".into());
    };
    let (t, arg) = (*t, *arg);
    let unit = match t {
        Transform::Elapsed => arg.unwrap_or(1),
        Transform::Derivative | Transform::NonNegativeDerivative => arg.or(s.group.time).unwrap_or(1_000_000_000),
        _ => 1,
    };
    // Each series: (its group's tags, its points in time order).
    let mut series: Vec<(Value, Vec<(i64, Num)>)> = Vec::new();
    match &**inner {
        Item::Call { .. } => {
            // The function's buckets from before the range, times in ns, unpaged.
            let buckets =
                crate::aggregate::run_with(table, s, std::slice::from_ref(&**inner), reads_from(s), Some(1), false)?;
            for b in buckets {
                let pts = b["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|row| Some((row[0].as_i64()?, Num::of(&row[1])?)))
                    .collect();
                series.push((b.get("tags").cloned().unwrap_or(Value::Null), pts));
            }
        }
        Item::Var { name: field, .. } => {
            let (group_keys, groups) = groups(table, s);
            let Some(col) = table.field(field) else { return Ok(Vec::new()) };
            let ty = table.fields[col].1;
            // Of a string or boolean field influxd computes no
            // transformation but `elapsed`: its error, word for word.
            if matches!(ty, FieldType::Str | FieldType::Bool) && t != Transform::Elapsed {
                return Err(format!("unsupported {} iterator type: *query.{}InterruptIterator", t.name(), ty.name()));
            }
            for (gk, sets) in groups {
                let mut pts: Vec<(i64, Num)> = sets
                    .iter()
                    .flat_map(|(_, rows)| rows.iter().filter_map(move |(t, row)| Some((*t, row[col]?))))
                    .filter_map(|(t, v)| Some((t, Num::of(&ty.json(v, &table.strings))?)))
                    .collect();
                pts.sort_by_key(|p| p.0);
                let tags = series_json("", &group_keys, gk, Vec::new(), Vec::new());
                series.push((tags.get("tags").cloned().unwrap_or(Value::Null), pts));
            }
        }
        _ => return Err(format!("{}() of this is not supported yet", t.name())),
    }
    Ok(series.into_iter().map(|(tags, pts)| (tags, apply(t, arg, unit, &pts))).collect())
}

/// The answer's series for a statement selecting transformations (one, or
/// several math functions): each item's points, side by side by time.
pub(crate) fn run(table: &Table, s: &Select, epoch: Option<i64>) -> Result<Vec<Value>, String> {
    // Column names: alias or function name, repeats numbered as influxd does.
    let mut columns = vec!["time".to_owned()];
    for item in &s.items {
        let base = match item {
            Item::Transform { t, alias, .. } => alias.clone().unwrap_or_else(|| t.name().to_owned()),
            _ => return Err("a transformation beside fields or functions is not supported yet".into()),
        };
        columns.push(crate::query::unique_name(&base, &columns));
    }
    // Per series (keyed by its tags, in first-seen order): time → a cell per item.
    let width = s.items.len();
    let mut order: Vec<Value> = Vec::new();
    let mut rows: std::collections::HashMap<String, std::collections::BTreeMap<i64, Vec<Value>>> =
        std::collections::HashMap::new();
    for (i, item) in s.items.iter().enumerate() {
        for (tags, pts) in item_series(table, s, item)? {
            let key = tags.to_string();
            if !rows.contains_key(&key) {
                order.push(tags);
            }
            let series = rows.entry(key).or_default();
            for (time, v) in pts {
                series.entry(time).or_insert_with(|| vec![Value::Null; width])[i] = v;
            }
        }
    }
    let first_bucket = match s.group.time {
        Some(d) if s.from != i64::MIN => (s.from.max(0) - s.group.offset).div_euclid(d) * d + s.group.offset,
        _ => i64::MIN,
    };
    let mut out = Vec::new();
    for tags in order {
        let Some(series) = rows.remove(&tags.to_string()) else { continue };
        let values: Vec<Value> = series
            .into_iter()
            .filter(|(time, _)| *time >= first_bucket)
            .skip(s.offset)
            .take(s.limit.unwrap_or(usize::MAX))
            .map(|(time, cells)| {
                let mut row = vec![time_json(time, epoch)];
                row.extend(cells);
                Value::Array(row)
            })
            .collect();
        if values.is_empty() {
            continue;
        }
        let mut one = json!({ "name": table.measurement, "columns": columns, "values": values });
        if !tags.is_null() {
            one["tags"] = tags;
        }
        out.push(one);
    }
    Ok(out)
}
