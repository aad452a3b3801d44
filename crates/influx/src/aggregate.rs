//! InfluxQL functions as InfluxDB 1.x computes them: `count sum mean
//! median min max first last spread stddev percentile distinct` and
//! `count(distinct(f))` over a field, grouped by tags (`GROUP BY host`,
//! `GROUP BY *`) and by time buckets aligned to the epoch plus an offset
//! (`GROUP BY time(10s[, 2s])`) with `fill(null | none | previous | linear
//! | number)`; one series per tag group, named and typed as InfluxDB
//! answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::ql::{Func, Item, Select};
use crate::query::{FieldType, Table, go_float, groups, series_json, time_json};

/// `fill(...)`: what an empty time bucket shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fill {
    #[default]
    Null,
    None,
    Value(f64),
    Previous,
    Linear,
}

/// `GROUP BY` items.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Grouping {
    /// `time(d)`: the bucket width (ns).
    pub time: Option<i64>,
    /// `time(d, offset)`: buckets start at `offset` past multiples of `d`.
    pub offset: i64,
    pub tags: Vec<String>,
    pub all_tags: bool,
    pub fill: Fill,
}

/// Most buckets one statement may make.
pub const BUCKETS_MAX: i64 = 100_000;
/// Cells (rows × columns) one SELECT's answer may hold, over all its series.
pub const CELLS_MAX: usize = 2_000_000;

/// One function call of the select list, resolved against the table.
struct Call {
    func: Func,
    /// The field's column in the table (None: the measurement lacks it).
    col: Option<usize>,
    ty: FieldType,
    arg: f64,
}

/// A function's result on one bucket's points (time-ordered, raw stored
/// values): its values (several for `distinct`), and for selectors the
/// time of the point chosen.
fn apply(c: &Call, pts: &[(i64, f64)], strings: &[Arc<str>]) -> (Vec<Value>, Option<i64>) {
    let ty = c.ty;
    let num = |v: f64| match ty {
        FieldType::Float => go_float(v),
        FieldType::Bool | FieldType::Str => ty.json(v, strings),
        FieldType::Int | FieldType::Unsigned => json!(v as i64),
    };
    let vals = || pts.iter().map(|p| ty.number(p.1));
    let one = |v: Value| (vec![v], None);
    match c.func {
        Func::Count => one(json!(pts.len())),
        Func::CountDistinct => {
            let mut v: Vec<f64> = vals().collect();
            v.sort_by(f64::total_cmp);
            v.dedup();
            one(json!(v.len()))
        }
        // Served by `top_bottom` (rows at their own times); not per bucket here.
        Func::Top | Func::Bottom => one(Value::Null),
        Func::Distinct => {
            let mut v: Vec<f64> = vals().collect();
            if matches!(ty, FieldType::Bool | FieldType::Str) {
                // influxd lists booleans and strings as they first come, in
                // time order.
                let mut first_seen: Vec<f64> = Vec::with_capacity(2);
                for x in v {
                    if !first_seen.contains(&x) {
                        first_seen.push(x);
                    }
                }
                v = first_seen;
            } else {
                v.sort_by(f64::total_cmp);
                v.dedup();
            }
            (v.into_iter().map(num).collect(), None)
        }
        Func::Sum => one(num(vals().sum())),
        Func::Mode => {
            // influxd's ModeReduceSlice: by value (then time), the longest
            // run; of equal runs the one that started earlier, a lone value
            // counting only when it sorts first.
            if pts.len() == 1 {
                return one(ty.json(pts[0].1, strings));
            }
            let mut sorted = pts.to_vec();
            sorted.sort_by(|a, b| ty.number(a.1).total_cmp(&ty.number(b.1)).then(a.0.cmp(&b.0)));
            let (mut most_freq, mut curr_freq) = (0, 0);
            let (mut curr, mut most) = (sorted[0].1, sorted[0].1);
            let (mut most_time, mut curr_time) = (sorted[0].0, sorted[0].0);
            for &(t, v) in &sorted {
                if ty.number(v) != ty.number(curr) {
                    (curr_freq, curr, curr_time) = (1, v, t);
                    continue;
                }
                curr_freq += 1;
                if most_freq > curr_freq || (most_freq == curr_freq && curr_time > most_time) {
                    continue;
                }
                (most_freq, most, most_time) = (curr_freq, v, t);
            }
            one(ty.json(most, strings))
        }
        // With GROUP BY time the buckets' areas are computed over the whole
        // series first (`integrals`); alone, the area of the points.
        Func::Integral => {
            let unit = if c.arg > 0.0 { c.arg } else { 1e9 };
            let (mut sum, mut prev) = (0.0, pts[0]);
            for &p in &pts[1..] {
                if p.0 == prev.0 {
                    prev = p;
                    continue;
                }
                sum += 0.5 * (ty.number(p.1) + ty.number(prev.1)) * ((p.0 - prev.0) as f64 / unit);
                prev = p;
            }
            one(go_float(sum))
        }
        Func::Mean => one(go_float(vals().sum::<f64>() / pts.len() as f64)),
        Func::Median => {
            let mut v: Vec<f64> = vals().collect();
            v.sort_by(f64::total_cmp);
            let m = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
            one(go_float(m))
        }
        Func::Spread => {
            let (lo, hi) = vals().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
            one(num(hi - lo))
        }
        Func::Stddev => {
            if pts.len() < 2 {
                return one(Value::Null);
            }
            let n = pts.len() as f64;
            let mean = vals().sum::<f64>() / n;
            let var = vals().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1.0);
            one(go_float(var.sqrt()))
        }
        Func::Percentile => {
            // InfluxDB's rank: floor(n × p / 100 + 0.5) − 1, none outside.
            let i = (pts.len() as f64 * c.arg / 100.0 + 0.5).floor() as i64 - 1;
            if i < 0 || i >= pts.len() as i64 {
                return one(Value::Null);
            }
            let mut sorted = pts.to_vec();
            sorted.sort_by(|a, b| ty.number(a.1).total_cmp(&ty.number(b.1)));
            let p = sorted[i as usize];
            (vec![ty.json(p.1, strings)], Some(p.0))
        }
        // Selectors: the first of equal values wins, as in InfluxDB; of
        // points at one time (several series), first and last take the
        // larger value, as influxd's reducers do.
        Func::Min | Func::Max | Func::First | Func::Last => {
            let mut best = pts[0];
            for &p in &pts[1..] {
                let (v, b) = (ty.number(p.1), ty.number(best.1));
                let better = match c.func {
                    Func::Min => v < b,
                    Func::Max => v > b,
                    Func::Last => p.0 > best.0 || v > b,
                    _ => p.0 == best.0 && v > b,
                };
                if better {
                    best = p;
                }
            }
            (vec![ty.json(best.1, strings)], Some(best.0))
        }
    }
}

/// Whether influxd computes `func` of a field of type `ty`: a boolean has
/// no mean, sum, …; a string only its count, distinct values, first, last
/// and mode.
fn supports(func: Func, ty: FieldType) -> bool {
    let numeric = matches!(
        func,
        Func::Mean | Func::Sum | Func::Median | Func::Spread | Func::Stddev | Func::Percentile | Func::Integral
    );
    match ty {
        FieldType::Bool => !numeric,
        FieldType::Str => !numeric && !matches!(func, Func::Min | Func::Max | Func::Top | Func::Bottom),
        _ => true,
    }
}

/// influxd's error for a function of a type it does not compute, word for word.
fn unsupported(func: Func, ty: FieldType) -> String {
    format!("unsupported {} iterator type: *query.{}InterruptIterator", func.name(), ty.name())
}

/// Column names: the alias, else the function's name, a repeat numbered
/// `_1`, `_2` as InfluxDB does.
fn column_names(items: &[Item]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let Item::Call { func, alias, .. } = item else { continue };
        let base = alias.clone().unwrap_or_else(|| func.name().to_owned());
        out.push(crate::query::unique_name(&base, &out));
    }
    out
}

/// The answer's series for a statement of function calls.
pub(crate) fn run(table: &Table, s: &Select, epoch: Option<i64>) -> Result<Vec<Value>, String> {
    run_with(table, s, &s.items, s.from, epoch, true)
}

/// [`run`] of `items` from `from` (a transformation reads buckets before
/// the statement's range), paged (`ORDER BY`, `LIMIT`, `OFFSET`) or not.
pub(crate) fn run_with(
    table: &Table,
    s: &Select,
    items: &[Item],
    from: i64,
    epoch: Option<i64>,
    page: bool,
) -> Result<Vec<Value>, String> {
    let calls: Vec<Call> = items
        .iter()
        .filter_map(|i| match i {
            Item::Call { func, field, arg, .. } => {
                let col = table.field(field);
                Some(Call {
                    func: *func,
                    col,
                    ty: col.map_or(FieldType::Float, |c| table.fields[c].1),
                    arg: arg.unwrap_or(0.0),
                })
            }
            _ => None,
        })
        .collect();
    if let Some(c) = calls.iter().find(|c| !supports(c.func, c.ty)) {
        return Err(unsupported(c.func, c.ty));
    }
    let mut columns = vec!["time".to_owned()];
    columns.extend(column_names(items));
    // The buckets: aligned to the epoch (plus the offset), over the range;
    // with no lower bound, from the first point.
    let buckets: Vec<(i64, i64)> = match s.group.time {
        Some(d) => {
            let earliest = table.sets.values().filter_map(|r| r.keys().next()).min().copied();
            let from = if from == i64::MIN { earliest.unwrap_or(0) } else { from.max(0) };
            let align = |t: i64| (t - s.group.offset).div_euclid(d) * d + s.group.offset;
            let (first, last) = (align(from), align(s.to));
            if last < first {
                return Ok(Vec::new());
            }
            if (last - first) / d >= BUCKETS_MAX {
                return Err(format!(
                    "GROUP BY time(...) would make more than {BUCKETS_MAX} buckets: narrow the time range or widen the interval"
                ));
            }
            (0..=(last - first) / d).map(|k| (first + k * d, first + (k + 1) * d)).collect()
        }
        None => vec![(if from == i64::MIN { 0 } else { from }, i64::MAX)],
    };
    // What the answer may hold is known before it is made: 600 functions
    // over 100,000 buckets of one stored point asked for 60 M cells.
    let per_group = buckets.len().saturating_mul(calls.len() + 1);
    if per_group > CELLS_MAX {
        return Err(format!(
            "the query would make {} buckets × {} columns = {per_group} cells per series; at most {CELLS_MAX}: narrow the time range, widen the interval or ask for fewer functions",
            buckets.len(),
            calls.len() + 1
        ));
    }
    let mut cells_made = 0usize;
    let alone_selector = calls.len() == 1 && calls[0].func.is_selector() && s.group.time.is_none();
    let (group_keys, groups) = groups(table, s);
    let mut out = Vec::new();
    for (gk, sets) in groups {
        // Each call's points in this group, time-ordered.
        let points: Vec<Vec<(i64, f64)>> = calls
            .iter()
            .map(|c| {
                let Some(col) = c.col else { return Vec::new() };
                let mut pts: Vec<(i64, f64)> = sets
                    .iter()
                    .flat_map(|(_, rows)| rows.iter().filter_map(move |(t, row)| Some((*t, row[col]?))))
                    .collect();
                pts.sort_by_key(|p| p.0);
                pts
            })
            .collect();
        // integral() under GROUP BY time: each bucket's area as influxd's
        // reducer makes it over the whole series (ends interpolated).
        let areas: Vec<Option<BTreeMap<i64, f64>>> = calls
            .iter()
            .zip(&points)
            .map(|(c, pts)| {
                let d = s.group.time?;
                (c.func == Func::Integral).then(|| integrals(pts, d, s.group.offset, c))
            })
            .collect();
        // Rows: one per bucket (several for distinct); `empty[c]` marks a
        // cell of an empty bucket, for fill(linear).
        let mut rows: Vec<(Vec<Value>, Vec<bool>)> = Vec::new();
        let mut previous: Vec<Value> = vec![Value::Null; calls.len()];
        for &(start, end) in &buckets {
            let mut time = start;
            let mut cells: Vec<Vec<Value>> = Vec::with_capacity(calls.len());
            let mut empty = vec![false; calls.len()];
            for (c, call) in calls.iter().enumerate() {
                let pts = &points[c];
                let lo = pts.partition_point(|p| p.0 < start);
                let hi = pts.partition_point(|p| p.0 < end);
                if let Some(areas) = &areas[c] {
                    match areas.get(&start) {
                        Some(a) => cells.push(vec![go_float(*a)]),
                        // A bucket the reducer gave no area is no row, as
                        // in influxd (whose fill does not reach integral()).
                        None => {
                            empty[c] = true;
                            cells.push(Vec::new());
                        }
                    }
                } else if lo < hi {
                    let (v, at) = apply(call, &pts[lo..hi], &table.strings);
                    if alone_selector && let Some(at) = at {
                        time = at;
                    }
                    cells.push(v);
                } else if call.func == Func::Distinct {
                    // distinct() lists what a bucket holds: an empty one is
                    // no row at all, whatever the fill, as in InfluxDB.
                    empty[c] = true;
                    cells.push(Vec::new());
                } else {
                    empty[c] = true;
                    cells.push(vec![match (&s.group.fill, call.func) {
                        // A number fills a string function's bucket as
                        // influxd's does: with the empty string.
                        (Fill::Value(_), _) if call.ty == FieldType::Str && call.func.is_selector_of_values() => {
                            json!("")
                        }
                        (Fill::Value(v), _) => go_float(*v),
                        (Fill::Previous, _) => previous[c].clone(),
                        // An empty bucket counts 0, as in InfluxDB.
                        (Fill::Null, Func::Count | Func::CountDistinct) => json!(0),
                        _ => Value::Null,
                    }]);
                }
                previous[c] = cells[c].last().cloned().unwrap_or(Value::Null);
            }
            if empty.iter().all(|e| *e) && (s.group.fill == Fill::None || s.group.time.is_none()) {
                continue;
            }
            let height = cells.iter().map(Vec::len).max().unwrap_or(1);
            for r in 0..height {
                let mut row = vec![time_json(time, epoch)];
                row.extend(cells.iter().map(|c| c.get(r).cloned().unwrap_or(Value::Null)));
                rows.push((row, empty.clone()));
            }
        }
        cells_made = cells_made.saturating_add(rows.len().saturating_mul(calls.len() + 1));
        if cells_made > CELLS_MAX {
            return Err(format!(
                "the answer would hold more than {CELLS_MAX} cells (rows × columns over every series); narrow the time range or the tags grouped by, or widen the interval"
            ));
        }
        if s.group.fill == Fill::Linear {
            fill_linear(&mut rows, &buckets, &calls);
        }
        let mut values: Vec<Value> = rows.into_iter().map(|(r, _)| Value::Array(r)).collect();
        if page {
            values = crate::query::paged(values, s).collect();
        }
        if values.is_empty() {
            continue;
        }
        out.push(series_json(&table.measurement, &group_keys, gk, columns.clone(), values));
    }
    Ok(out)
}

/// `top(f, N)` / `bottom(f, N)` alone: per series and bucket, the N
/// largest / smallest points (of equal values the earlier), each a row at
/// its own time, in time order.
pub(crate) fn top_bottom(table: &Table, s: &Select, epoch: Option<i64>) -> Result<Vec<Value>, String> {
    let Some(Item::Call { func, field, arg, alias }) = s.items.first() else { return Ok(Vec::new()) };
    let top = *func == Func::Top;
    let n = arg.unwrap_or(1.0).max(1.0) as usize;
    let Some(col) = table.field(field) else { return Ok(Vec::new()) };
    let ty = table.fields[col].1;
    if !supports(*func, ty) {
        return Err(unsupported(*func, ty));
    }
    let name = alias.clone().unwrap_or_else(|| func.name().to_owned());
    let bucket = |t: i64| match s.group.time {
        Some(d) => (t - s.group.offset).div_euclid(d),
        None => 0,
    };
    let (group_keys, groups) = groups(table, s);
    let mut out = Vec::new();
    let mut cells = 0usize;
    for (gk, sets) in groups {
        let mut pts: Vec<(i64, f64)> =
            sets.iter().flat_map(|(_, rows)| rows.iter().filter_map(move |(t, row)| Some((*t, row[col]?)))).collect();
        pts.sort_by_key(|p| p.0);
        let mut rows: Vec<(i64, f64)> = Vec::new();
        for chunk in pts.chunk_by(|a, b| bucket(a.0) == bucket(b.0)) {
            let mut best = chunk.to_vec();
            best.sort_by(|a, b| {
                let (x, y) = (ty.number(a.1), ty.number(b.1));
                (if top { y.total_cmp(&x) } else { x.total_cmp(&y) }).then(a.0.cmp(&b.0))
            });
            best.truncate(n);
            best.sort_by_key(|p| p.0);
            rows.extend(best);
        }
        cells = cells.saturating_add(rows.len() * 2);
        if cells > CELLS_MAX {
            return Err(format!("the answer would hold more than {CELLS_MAX} cells; narrow the time range"));
        }
        let values: Vec<Value> = crate::query::paged(rows, s)
            .map(|(t, v)| json!([time_json(t, epoch), ty.json(v, &table.strings)]))
            .collect();
        if !values.is_empty() {
            out.push(series_json(&table.measurement, &group_keys, gk, vec!["time".into(), name.clone()], values));
        }
    }
    Ok(out)
}

/// influxd's integral reducer under `GROUP BY time(d)`: trapezoids between
/// points; at a bucket's end the value there (on the line to the next
/// point) closes the bucket and opens the next; each bucket's area keyed
/// by its start.
fn integrals(pts: &[(i64, f64)], d: i64, offset: i64, c: &Call) -> BTreeMap<i64, f64> {
    let unit = if c.arg > 0.0 { c.arg } else { 1e9 };
    let window = |t: i64| {
        let s = (t - offset).div_euclid(d) * d + offset;
        (s, s + d)
    };
    let mut out = BTreeMap::new();
    let Some(&(t0, v0)) = pts.first() else { return out };
    let mut prev = (t0, c.ty.number(v0));
    let (mut ws, mut we) = window(t0);
    let mut sum = 0.0;
    for &(t, v) in &pts[1..] {
        let v = c.ty.number(v);
        if prev.0 == t {
            prev = (t, v);
            continue;
        }
        if t >= we {
            if prev.0 != we {
                let value = (v - prev.1) / (t - prev.0) as f64 * (we - prev.0) as f64 + prev.1;
                sum += 0.5 * (value + prev.1) * ((we - prev.0) as f64 / unit);
                prev = (we, value);
            }
            out.insert(ws, sum);
            (ws, we) = window(t);
            sum = 0.0;
        }
        sum += 0.5 * (v + prev.1) * ((t - prev.0) as f64 / unit);
        prev = (t, v);
    }
    if prev.0 != ws {
        out.insert(ws, sum);
    }
    out
}

/// `fill(linear)`: an empty bucket between two full ones gets the value on
/// the line between them (integers in integer arithmetic, as InfluxDB).
fn fill_linear(rows: &mut [(Vec<Value>, Vec<bool>)], buckets: &[(i64, i64)], calls: &[Call]) {
    // One row per bucket here (distinct is never filled linearly).
    if rows.len() != buckets.len() {
        return;
    }
    for (c, call) in calls.iter().enumerate() {
        let full: Vec<usize> = (0..rows.len()).filter(|&i| !rows[i].1[c] && !rows[i].0[1 + c].is_null()).collect();
        for w in full.windows(2) {
            let (a, b) = (w[0], w[1]);
            let (ta, tb) = (buckets[a].0, buckets[b].0);
            let (Some(va), Some(vb)) = (rows[a].0[1 + c].as_f64(), rows[b].0[1 + c].as_f64()) else { continue };
            let int = match call.func {
                Func::Count | Func::CountDistinct => true,
                Func::Mean | Func::Median | Func::Stddev => false,
                _ => call.ty != FieldType::Float,
            };
            for (i, row) in rows.iter_mut().enumerate().take(b).skip(a + 1) {
                let t = buckets[i].0;
                row.0[1 + c] = if int {
                    let (ia, ib) = (va as i64, vb as i64);
                    json!(ia + (ib - ia) * (t - ta) / (tb - ta))
                } else {
                    go_float(va + (vb - va) * (t - ta) as f64 / (tb - ta) as f64)
                };
            }
        }
    }
}
