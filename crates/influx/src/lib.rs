//! The InfluxDB 1.x HTTP API subset kansoku serves (`docs/api.md`,
//! "InfluxDB compatibility"): line protocol in, a small InfluxQL subset out.
//!
//! Mapping: field `f` of measurement `m` with tags `t=v` in database `d` is
//! the series `m_f{t="v",db="d",influx_field="f"}`. Floats and booleans
//! (1/0) are stored as they are; integers (`i`) as their value with
//! `kansoku_type="int"` (exact up to 2^53); unsigned integers (`u`, e.g.
//! instruction pointers) bit for bit with `kansoku_type="u64"`, so they come
//! back exactly. String fields are not stored: counted and reported.

use std::collections::{BTreeMap, BTreeSet};

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::{Appended, Appender, Store};

pub mod aggregate;

pub const FIELD_LABEL: &str = "influx_field";
pub const TYPE_LABEL: &str = "kansoku_type";

/// One parsed field value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Float(f64),
    Int(i64),
    Uint(u64),
    Bool(bool),
}

impl Value {
    fn stored(self) -> (f64, Option<&'static str>) {
        match self {
            Value::Float(v) => (v, None),
            Value::Int(v) => (v as f64, Some("int")),
            Value::Uint(v) => (f64::from_bits(v), Some("u64")),
            Value::Bool(b) => (f64::from(u8::from(b)), None),
        }
    }
}

/// Points to store: each series once, each point an index into them — a
/// body of a million lines names each of its series once, not a million
/// times (allocation was most of `/write`'s cost).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Points {
    pub keys: Vec<SeriesKey>,
    /// (index into `keys`, time ns, value)
    pub points: Vec<(u32, i64, f64)>,
}

impl Points {
    /// From series, each with its (time, value) samples.
    pub fn from_series(series: Vec<(SeriesKey, Vec<(i64, f64)>)>) -> Points {
        let mut out = Points { keys: Vec::with_capacity(series.len()), points: Vec::new() };
        for (id, (key, samples)) in series.into_iter().enumerate() {
            out.keys.push(key);
            out.points.extend(samples.into_iter().map(|(t, v)| (id as u32, t, v)));
        }
        out
    }
}

#[derive(Debug, Default)]
pub struct Parsed {
    pub points: Points,
    /// One message per line that did not parse.
    pub errors: Vec<String>,
    pub string_fields: u64,
}

/// Nanoseconds per unit of the `precision` parameter.
pub fn precision_ns(p: Option<&str>) -> Result<i64, String> {
    Ok(match p.unwrap_or("n") {
        "n" | "ns" => 1,
        "u" | "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        other => return Err(format!("invalid precision {other:?}: use n, u, ms, s, m or h")),
    })
}

/// Parses a line-protocol body. Lines without a timestamp get `now`.
pub fn parse_lines(body: &str, precision: i64, now: i64, db: &str, rp: Option<&str>) -> Parsed {
    let mut out = Parsed::default();
    let mut cache = Cache::default();
    for line in body.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (keys, points) = (out.points.keys.len(), out.points.points.len());
        cache.line_new.clear();
        if let Err(e) = parse_line(line, precision, now, (db, rp), &mut cache, &mut out) {
            // A line is taken whole or not at all, its new series too.
            out.points.keys.truncate(keys);
            out.points.points.truncate(points);
            for k in cache.line_new.drain(..) {
                cache.ids.remove(&k);
            }
            let shown: String = line.chars().take(200).collect();
            out.errors.push(format!("unable to parse '{shown}': {e}"));
        }
    }
    out
}

/// A measurement and its tags, parsed once per distinct `m,tag=v…` prefix.
#[derive(Debug)]
struct Head {
    measurement: String,
    labels: Vec<(String, String)>,
}

/// What one body has seen: its heads, and its series by (head, raw field
/// name, type).
#[derive(Debug, Default)]
struct Cache<'a> {
    heads: std::collections::HashMap<&'a str, Result<Head, String>>,
    ids: std::collections::HashMap<(&'a str, &'a str, Option<&'static str>), u32>,
    /// The series the current line added: forgotten again if it is refused.
    line_new: Vec<(&'a str, &'a str, Option<&'static str>)>,
}

fn parse_head(head: &str, (db, rp): (&str, Option<&str>)) -> Result<Head, String> {
    let mut head_parts = split_unescaped(head, b',').into_iter();
    let measurement = unescape(head_parts.next().unwrap_or_default());
    if measurement.is_empty() {
        return Err("missing measurement".into());
    }
    let mut labels: Vec<(String, String)> = Vec::new();
    for tag in head_parts {
        let kv = split_unescaped(tag, b'=');
        let [k, v] = kv.as_slice() else { return Err(format!("bad tag {tag:?}")) };
        if k.is_empty() || v.is_empty() {
            return Err(format!("bad tag {tag:?}"));
        }
        labels.push((unescape(k), unescape(v)));
    }
    labels.push(("db".into(), db.to_owned()));
    if let Some(rp) = rp {
        labels.push(("rp".into(), rp.to_owned()));
    }
    if let Some(dup) = labels.iter().enumerate().find(|(i, (k, _))| labels[..*i].iter().any(|(k2, _)| k2 == k)) {
        return Err(format!("duplicate tag {:?}", dup.1.0));
    }
    Ok(Head { measurement, labels })
}

fn parse_line<'a>(
    line: &'a str,
    precision: i64,
    now: i64,
    db_rp: (&str, Option<&str>),
    cache: &mut Cache<'a>,
    out: &mut Parsed,
) -> Result<(), String> {
    let b = line.as_bytes();
    // Split into measurement+tags, fields, timestamp at unescaped, unquoted spaces.
    let mut parts: [&'a str; 3] = [""; 3];
    let mut n_parts = 0;
    let (mut start, mut i, mut quoted) = (0, 0, false);
    let too_many = || "expected: measurement[,tag=value...] field=value[,...] [timestamp]".to_owned();
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'"' if n_parts > 0 => quoted = !quoted,
            b' ' if !quoted => {
                *parts.get_mut(n_parts).ok_or_else(too_many)? = &line[start..i];
                n_parts += 1;
                while i + 1 < b.len() && b[i + 1] == b' ' {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if quoted {
        return Err("unterminated string".into());
    }
    if start < b.len() {
        *parts.get_mut(n_parts).ok_or_else(too_many)? = &line[start..];
        n_parts += 1;
    }
    let (head, fields, time) = match n_parts {
        2 => (parts[0], parts[1], None),
        3 => (parts[0], parts[1], Some(parts[2])),
        _ => return Err(too_many()),
    };
    let t = match time {
        None => now,
        Some(t) => t
            .parse::<i64>()
            .ok()
            .and_then(|t| t.checked_mul(precision))
            .ok_or_else(|| format!("bad timestamp {t:?}"))?,
    };
    if !Timestamp(t).is_storable() {
        return Err(format!(
            "timestamp {t} ns is outside the range kansoku stores ({} to {}, exclusive)",
            Timestamp::STORABLE_MIN,
            Timestamp::STORABLE_END
        ));
    }
    if let Err(e) = cache.heads.entry(head).or_insert_with(|| parse_head(head, db_rp)) {
        return Err(e.clone());
    }
    let mut seen: Vec<&str> = Vec::new();
    for field in split_fields(fields) {
        let Some(eq) = find_unescaped(field, b'=') else { return Err(format!("bad field {field:?}")) };
        let (raw, v) = (&field[..eq], &field[eq + 1..]);
        if raw.is_empty() {
            return Err(format!("bad field {field:?}"));
        }
        // Two values of one field at one time: which is meant is unknowable,
        // so the line is refused whole rather than one kept silently.
        if seen.contains(&raw) {
            return Err(format!("duplicate field {:?}", unescape(raw)));
        }
        seen.push(raw);
        let Some(value) = parse_value(v)? else {
            out.string_fields += 1;
            continue;
        };
        let (stored, ty) = value.stored();
        let id = match cache.ids.get(&(head, raw, ty)) {
            Some(&id) => id,
            None => {
                let Some(Ok(h)) = cache.heads.get(head) else { unreachable!("the head was parsed above") };
                let k = unescape(raw);
                let mut l = h.labels.clone();
                l.push((FIELD_LABEL.into(), k.clone()));
                if let Some(ty) = ty {
                    l.push((TYPE_LABEL.into(), ty.into()));
                }
                let id = out.points.keys.len() as u32;
                out.points.keys.push(SeriesKey::new(format!("{}_{k}", h.measurement), l));
                cache.ids.insert((head, raw, ty), id);
                cache.line_new.push((head, raw, ty));
                id
            }
        };
        out.points.points.push((id, t, stored));
    }
    if seen.is_empty() {
        return Err("no fields".into());
    }
    Ok(())
}

fn parse_value(v: &str) -> Result<Option<Value>, String> {
    let bad = || format!("bad field value {v:?}");
    if v.starts_with('"') {
        return if v.len() >= 2 && v.ends_with('"') { Ok(None) } else { Err(bad()) };
    }
    Ok(Some(match v {
        "t" | "T" | "true" | "True" | "TRUE" => Value::Bool(true),
        "f" | "F" | "false" | "False" | "FALSE" => Value::Bool(false),
        // An `i` integer above i64 that fits u64 (numpy's uint64 columns,
        // as the Python client writes them) is kept as the unsigned it is;
        // InfluxDB refuses it.
        _ if v.ends_with('i') => {
            let digits = &v[..v.len() - 1];
            match digits.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::Uint(digits.parse().map_err(|_| bad())?),
            }
        }
        _ if v.ends_with('u') => Value::Uint(v[..v.len() - 1].parse().map_err(|_| bad())?),
        _ => {
            let f: f64 = v.parse().map_err(|_| bad())?;
            if !f.is_finite() || v.chars().any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') {
                return Err(bad());
            }
            Value::Float(f)
        }
    }))
}

fn split_fields(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let (mut out, mut start, mut i, mut quoted) = (Vec::new(), 0, 0, false);
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&s[start..]);
    out
}

fn find_unescaped(s: &str, c: u8) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == c {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn split_unescaped(s: &str, c: u8) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = find_unescaped(rest, c) {
        out.push(&rest[..i]);
        rest = &rest[i + 1..];
    }
    out.push(rest);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ (',' | '=' | ' ' | '"' | '\\')) => out.push(n),
                Some(n) => {
                    out.push('\\');
                    out.push(n);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Stores parsed points: grouped by time, oldest first, one WAL write.
pub fn write(store: &Store, points: &Points) -> Result<Vec<Appended>, store::StoreError> {
    // One batch per distinct time, in time order (points of one time keep
    // their order).
    let mut order: Vec<u32> = (0..points.points.len() as u32).collect();
    order.sort_by_key(|&i| points.points[i as usize].1);
    let mut batches: Vec<Batch> = Vec::new();
    for i in order {
        let (id, t, v) = points.points[i as usize];
        match batches.last_mut() {
            Some(b) if b.time.as_nanos() == t => b.points.push((id, v)),
            _ => batches.push(Batch { time: Timestamp(t), defs: Vec::new(), points: vec![(id, v)] }),
        }
    }
    let Some(first) = batches.first_mut() else { return Ok(Vec::new()) };
    first.defs = points.keys.iter().cloned().enumerate().map(|(i, k)| (i as u32, k)).collect();
    store.append_many(&mut Appender::default(), &batches)
}

/// A tag condition of a `WHERE`: `tag = 'v'`, `!=`, `=~ /re/`, `!~ /re/`
/// (regexes match anywhere in the value, as in InfluxDB).
pub type TagCond = (String, model::MatchOp, String);

/// An InfluxQL statement of the subset.
#[derive(Debug, PartialEq)]
pub enum Statement {
    ShowDatabases,
    ShowMeasurements,
    /// `SHOW TAG KEYS [FROM m]`
    ShowTagKeys(Option<String>),
    /// `SHOW FIELD KEYS [FROM m]`
    ShowFieldKeys(Option<String>),
    /// `SHOW TAG VALUES [FROM m] WITH KEY = k`
    ShowTagValues(Option<String>, String),
    CreateDatabase(String),
    /// `SELECT f(x) [AS a], … FROM m [WHERE …] [GROUP BY time(d), tags | *] [fill(…)] [LIMIT n]`
    Aggregate {
        aggs: Vec<aggregate::Agg>,
        measurement: String,
        from: i64,
        to: i64,
        tags: Vec<TagCond>,
        group: aggregate::Grouping,
        limit: Option<usize>,
    },
    Select {
        fields: Option<Vec<String>>,
        measurement: String,
        from: i64,
        to: i64,
        tags: Vec<TagCond>,
        limit: Option<usize>,
        /// `ORDER BY time DESC`
        desc: bool,
        /// `OFFSET n`: rows skipped first.
        offset: usize,
    },
    /// `SHOW SERIES [FROM m]`
    ShowSeries(Option<String>),
}

/// Parses `;`-separated statements.
pub fn parse_query(q: &str, now: i64) -> Result<Vec<Statement>, String> {
    q.split(';').map(str::trim).filter(|s| !s.is_empty()).map(|s| parse_statement(s, now)).collect()
}

fn parse_statement(s: &str, now: i64) -> Result<Statement, String> {
    let toks = tokens(s)?;
    let up: Vec<String> = toks.iter().map(|t| t.to_ascii_uppercase()).collect();
    let w = |i: usize| up.get(i).map(String::as_str);
    match (w(0), w(1)) {
        (Some("SHOW"), Some("DATABASES")) if toks.len() == 2 => return Ok(Statement::ShowDatabases),
        (Some("SHOW"), Some("MEASUREMENTS")) if toks.len() == 2 => return Ok(Statement::ShowMeasurements),
        (Some("CREATE"), Some("DATABASE")) if toks.len() == 3 => {
            return Ok(Statement::CreateDatabase(unquote(&toks[2])));
        }
        (Some("SHOW"), Some("SERIES")) => {
            return match (w(2), toks.get(3)) {
                (None, _) => Ok(Statement::ShowSeries(None)),
                (Some("FROM"), Some(m)) if toks.len() == 4 => {
                    Ok(Statement::ShowSeries(m.split('.').rfind(|p| !p.is_empty()).map(unquote)))
                }
                _ => Err(format!("unsupported {s:?}: kansoku serves SHOW SERIES [FROM m]")),
            };
        }
        (Some("SHOW"), Some("TAG" | "FIELD")) if w(2) == Some("KEYS") || w(2) == Some("VALUES") => {
            // [FROM m] [WITH KEY = k]
            let mut measurement = None;
            let mut key = None;
            let mut i = 3;
            while i < toks.len() {
                match up[i].as_str() {
                    "FROM" => {
                        let m = toks.get(i + 1).ok_or("FROM without a measurement")?;
                        measurement = m.split('.').rfind(|p| !p.is_empty()).map(unquote);
                        i += 2;
                    }
                    "WITH" if w(i + 1) == Some("KEY") && toks.get(i + 2).is_some_and(|t| t == "=") => {
                        key = Some(unquote(toks.get(i + 3).ok_or("WITH KEY = needs a tag key")?));
                        i += 4;
                    }
                    other => {
                        return Err(format!(
                            "unsupported {other:?} in {s:?}: kansoku serves [FROM m] and WITH KEY = k"
                        ));
                    }
                }
            }
            return match (w(1), w(2), key) {
                (Some("TAG"), Some("KEYS"), None) => Ok(Statement::ShowTagKeys(measurement)),
                (Some("FIELD"), Some("KEYS"), None) => Ok(Statement::ShowFieldKeys(measurement)),
                (Some("TAG"), Some("VALUES"), Some(k)) => Ok(Statement::ShowTagValues(measurement, k)),
                (Some("TAG"), Some("VALUES"), None) => Err("SHOW TAG VALUES needs WITH KEY = k".into()),
                _ => Err(format!("unsupported statement {s:?}")),
            };
        }
        (Some("SELECT"), _) => {}
        _ => {
            return Err(format!(
                "unsupported statement {s:?}: kansoku serves SHOW DATABASES, SHOW MEASUREMENTS, SHOW TAG KEYS, SHOW FIELD KEYS, SHOW TAG VALUES WITH KEY = k, CREATE DATABASE and SELECT ... FROM m [WHERE time/tag conditions] [ORDER BY time [DESC]] [LIMIT n]"
            ));
        }
    }
    let from_at = up.iter().position(|t| t == "FROM").ok_or("SELECT without FROM")?;
    let field_toks: Vec<&String> = toks[1..from_at].iter().filter(|t| *t != ",").collect();
    // Aggregates: `f(x)` items, each with an optional `AS name`.
    let mut aggs = Vec::new();
    if field_toks.iter().any(|t| t.contains('(')) {
        let mut k = 0;
        while k < field_toks.len() {
            let item = field_toks[k].as_str();
            let alias = (field_toks.get(k + 1).is_some_and(|t| t.eq_ignore_ascii_case("AS")))
                .then(|| field_toks.get(k + 2).map(|a| unquote(a)))
                .flatten();
            k += if alias.is_some() { 3 } else { 1 };
            aggs.push(aggregate::Agg::parse(item, alias)?);
        }
    }
    let fields = if !aggs.is_empty() || field_toks.len() == 1 && field_toks[0] == "*" {
        None
    } else if field_toks.is_empty() {
        return Err("SELECT without fields".into());
    } else {
        Some(field_toks.iter().map(|t| unquote(t)).collect())
    };
    // FROM m, "m", db.rp.m, "db"."rp"."m": the last name counts.
    let mut i = from_at + 1;
    let mut measurement = None;
    let clause =
        |t: &str| matches!(t, "WHERE" | "LIMIT" | "ORDER" | "GROUP" | "OFFSET" | "SLIMIT" | "SOFFSET" | "FILL");
    while i < toks.len() && !clause(&up[i]) {
        for part in toks[i].split('.').filter(|p| !p.is_empty()) {
            measurement = Some(unquote(part));
        }
        i += 1;
    }
    let measurement = measurement.ok_or("FROM without a measurement")?;
    let (mut from, mut to) = (i64::MIN, i64::MAX);
    let mut tags = Vec::new();
    let mut limit = None;
    let mut offset = 0;
    let mut desc = false;
    let mut group = aggregate::Grouping::default();
    while i < toks.len() {
        match up[i].as_str() {
            "WHERE" | "AND" => {
                let (lhs, op) =
                    (toks.get(i + 1).ok_or("condition expected")?, toks.get(i + 2).ok_or("operator expected")?);
                // The right side runs to the next AND / LIMIT / end.
                let mut j = i + 3;
                while j < toks.len() && up[j] != "AND" && !clause(&up[j]) {
                    j += 1;
                }
                let rhs = &toks[i + 3..j];
                if lhs.eq_ignore_ascii_case("time") {
                    let t = time_expr(rhs, now)?;
                    match op.as_str() {
                        ">" => from = from.max(t.saturating_add(1)),
                        ">=" => from = from.max(t),
                        "<" => to = to.min(t.saturating_sub(1)),
                        "<=" => to = to.min(t),
                        "=" => {
                            from = from.max(t);
                            to = to.min(t);
                        }
                        _ => return Err(format!("time {op} is not supported")),
                    }
                } else if let Some(cond) = tag_condition(lhs, op, rhs)? {
                    tags.push(cond);
                } else {
                    return Err(format!(
                        "condition {lhs} {op} ... is not supported (time comparisons, and tag = 'v', != 'v', =~ /re/, !~ /re/)"
                    ));
                }
                i = j;
            }
            "LIMIT" => {
                limit = Some(toks.get(i + 1).and_then(|n| n.parse().ok()).ok_or("LIMIT needs a number")?);
                i += 2;
            }
            "OFFSET" => {
                offset = toks.get(i + 1).and_then(|n| n.parse().ok()).ok_or("OFFSET needs a number")?;
                i += 2;
            }
            "ORDER" if up.get(i + 1).is_some_and(|t| t == "BY") && up.get(i + 2).is_some_and(|t| t == "TIME") => {
                i += 3;
                match up.get(i).map(String::as_str) {
                    Some("DESC") => (desc, i) = (true, i + 1),
                    Some("ASC") => i += 1,
                    _ => {}
                }
            }
            "ORDER" => return Err("only ORDER BY time [ASC|DESC] is supported".into()),
            "GROUP" if up.get(i + 1).is_some_and(|t| t == "BY") => {
                i += 2;
                while i < toks.len() && !clause(&up[i]) {
                    let t = &toks[i];
                    if t != "," {
                        group.add(t)?;
                    }
                    i += 1;
                }
            }
            "FILL" => {
                // `fill(...)` right after GROUP BY ends up here only when
                // split from its argument; it is a group item otherwise.
                return Err("fill(...) belongs after GROUP BY".into());
            }
            "OR" => return Err("OR is not supported".into()),
            other => return Err(format!("unexpected {other:?}")),
        }
    }
    if !aggs.is_empty() {
        if desc || offset > 0 {
            return Err("ORDER BY time DESC and OFFSET with aggregates are not supported yet".into());
        }
        // InfluxDB's buckets run to now() when the query names no end.
        let to = if to == i64::MAX && group.time.is_some() { now } else { to };
        return Ok(Statement::Aggregate { aggs, measurement, from, to, tags, group, limit });
    }
    if group.time.is_some() || group.all_tags || !group.tags.is_empty() {
        return Err("GROUP BY needs an aggregate (count(), mean(), …) in the SELECT".into());
    }
    Ok(Statement::Select { fields, measurement, from, to, tags, limit, desc, offset })
}

/// `tag = 'v'`, `tag != 'v'`, `tag =~ /re/`, `tag !~ /re/` (the tokenizer
/// leaves `~` at the front of the regex); None for anything else.
fn tag_condition(lhs: &str, op: &str, rhs: &[String]) -> Result<Option<TagCond>, String> {
    use model::MatchOp;
    let rhs_text = rhs.join(" ");
    let (op, value) = match (op, rhs_text.strip_prefix('~')) {
        ("=", Some(re)) | ("!", Some(re)) => {
            let re = re.trim();
            let body = re
                .strip_prefix('/')
                .and_then(|r| r.strip_suffix('/'))
                .ok_or_else(|| format!("regex {re:?}: write it between slashes, /like this/"))?;
            // InfluxQL regexes match anywhere in the value.
            let anywhere = format!(".*(?:{body}).*");
            (if op == "=" { MatchOp::Regex } else { MatchOp::NotRegex }, anywhere)
        }
        ("=", None) if rhs.len() == 1 => (MatchOp::Equal, unquote(&rhs[0])),
        ("!=" | "<>", None) if rhs.len() == 1 => (MatchOp::NotEqual, unquote(&rhs[0])),
        _ => return Ok(None),
    };
    Ok(Some((unquote(lhs), op, value)))
}

/// `now()`, `now() - 1h`, `'RFC3339'`, `123` (ns), `123s`/`ms`/`u`...
fn time_expr(toks: &[String], now: i64) -> Result<i64, String> {
    let bad = || format!("unsupported time expression {:?}", toks.join(" "));
    let single = |t: &str| -> Result<i64, String> {
        if t.eq_ignore_ascii_case("now()") {
            return Ok(now);
        }
        if t.starts_with('\'') {
            return model::parse_time(&unquote(t), Timestamp(now)).map(|t| t.as_nanos()).map_err(|e| e.to_string());
        }
        duration_ns(t).ok_or_else(bad)
    };
    match toks {
        [a] => single(a),
        [a, op, b] if op == "-" || op == "+" => {
            let (a, b) = (single(a)?, duration_ns(b).ok_or_else(bad)?);
            Ok(if op == "-" { a.saturating_sub(b) } else { a.saturating_add(b) })
        }
        _ => Err(bad()),
    }
}

pub(crate) fn duration_ns(t: &str) -> Option<i64> {
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: i64 = t[..split].parse().ok()?;
    let unit = match &t[split..] {
        "" | "ns" => 1,
        "u" | "µ" | "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        "w" => 604_800_000_000_000,
        _ => return None,
    };
    n.checked_mul(unit)
}

fn tokens(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let c: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '\'' || ch == '"' {
            let start = i;
            i += 1;
            while i < c.len() && c[i] != ch {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            if i >= c.len() {
                return Err("unterminated quote".into());
            }
            i += 1;
            out.push(c[start..i].iter().collect());
        } else if ch == ',' || ch == '+' || (ch == '-' && c.get(i + 1).is_some_and(|n| n.is_whitespace())) {
            out.push(ch.to_string());
            i += 1;
        } else if "<>=!".contains(ch) {
            let start = i;
            while i < c.len() && "<>=!".contains(c[i]) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else {
            let start = i;
            while i < c.len() && !c[i].is_whitespace() && !",<>=!'\"".contains(c[i]) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        }
    }
    Ok(out)
}

pub(crate) fn unquote(t: &str) -> String {
    let t = t.trim();
    if t.len() >= 2 && (t.starts_with('"') && t.ends_with('"') || t.starts_with('\'') && t.ends_with('\'')) {
        t[1..t.len() - 1].replace("\\'", "'").replace("\\\"", "\"")
    } else {
        t.to_owned()
    }
}

/// Runs one statement; `databases` holds those created here. `epoch`:
/// numeric times in that unit (ns per unit), else RFC 3339 strings.
pub fn execute(
    store: &Store,
    st: &Statement,
    db: Option<&str>,
    epoch: Option<i64>,
    databases: &mut BTreeSet<String>,
) -> Result<serde_json::Value, String> {
    use serde_json::json;
    match st {
        Statement::CreateDatabase(name) => {
            databases.insert(name.clone());
            Ok(json!({}))
        }
        Statement::ShowDatabases => {
            let sel = Selector::parse(&format!("{{{FIELD_LABEL}!=\"\"}}")).expect("valid selector");
            let mut names = databases.clone();
            names.extend(store.series(&sel).into_iter().filter_map(|(_, k)| k.get("db").map(str::to_owned)));
            let values: Vec<_> = names.into_iter().map(|n| json!([n])).collect();
            Ok(json!({"series": [{"name": "databases", "columns": ["name"], "values": values}]}))
        }
        Statement::ShowMeasurements => {
            let db = db.ok_or("database name required (db=...)")?;
            let sel = Selector::parse(&format!("{{{FIELD_LABEL}!=\"\",db=\"{}\"}}", db.replace('"', "\\\"")))
                .map_err(|e| e.to_string())?;
            let names: BTreeSet<String> = store
                .series(&sel)
                .into_iter()
                .filter_map(|(_, k)| {
                    let f = k.get(FIELD_LABEL)?;
                    Some(k.name().strip_suffix(f)?.strip_suffix('_')?.to_owned())
                })
                .collect();
            if names.is_empty() {
                return Ok(json!({}));
            }
            let values: Vec<_> = names.into_iter().map(|n| json!([n])).collect();
            Ok(json!({"series": [{"name": "measurements", "columns": ["name"], "values": values}]}))
        }
        Statement::Select { fields, measurement, from, to, tags, limit, desc, offset } => {
            let db = db.ok_or("database name required (db=...)")?;
            select(store, db, fields.as_deref(), measurement, (*from, *to), tags, (*limit, *desc, *offset), epoch)
        }
        Statement::ShowSeries(m) => {
            let db = db.ok_or("database name required (db=...)")?;
            show_series(store, db, m.as_deref())
        }
        Statement::Aggregate { aggs, measurement, from, to, tags, group, limit } => {
            let db = db.ok_or("database name required (db=...)")?;
            aggregate::run(store, db, measurement, aggs, (*from, *to), tags, group, *limit, epoch)
        }
        Statement::ShowTagKeys(m) | Statement::ShowFieldKeys(m) | Statement::ShowTagValues(m, _) => {
            let db = db.ok_or("database name required (db=...)")?;
            show_keys(store, db, m.as_deref(), st)
        }
    }
}

/// The series of `measurement`'s fields (all, or those in `fields`) in
/// `db` whose tags match `tags`: (id, key, field).
pub(crate) fn measurement_series(
    store: &Store,
    db: &str,
    measurement: &str,
    tags: &[TagCond],
    fields: Option<&[String]>,
) -> Result<Vec<(u32, SeriesKey, String)>, String> {
    use model::{MatchOp, Matcher};
    let m = |k: &str, op, v: &str| Matcher::new(k, op, v).map_err(|e| format!("regex for {k}: {e}"));
    let mut matchers = vec![m(FIELD_LABEL, MatchOp::NotEqual, "")?, m("db", MatchOp::Equal, db)?];
    for (k, op, v) in tags {
        matchers.push(m(k, *op, v)?);
    }
    let sel = Selector { matchers };
    // Series of this measurement: name = measurement_field.
    Ok(store
        .series(&sel)
        .into_iter()
        .filter_map(|(id, k)| {
            let f = k.get(FIELD_LABEL)?.to_owned();
            (k.name().len() == measurement.len() + 1 + f.len()
                && k.name().starts_with(measurement)
                && k.name().ends_with(&f)
                && fields.is_none_or(|fs| fs.contains(&f)))
            .then_some((id, k, f))
        })
        .collect())
}

/// Labels that are kansoku's, not the writer's tags.
pub(crate) fn hidden_label(k: &str) -> bool {
    k == FIELD_LABEL || k == TYPE_LABEL || k == "db" || k == "rp"
}

#[allow(clippy::too_many_arguments)]
fn select(
    store: &Store,
    db: &str,
    fields: Option<&[String]>,
    measurement: &str,
    (from, to): (i64, i64),
    tags: &[TagCond],
    (limit, desc, offset): (Option<usize>, bool, usize),
    epoch: Option<i64>,
) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let series = measurement_series(store, db, measurement, tags, fields)?;
    if series.is_empty() {
        return Ok(json!({}));
    }
    let tag_keys: BTreeSet<String> = series
        .iter()
        .flat_map(|(_, k, _)| k.labels().iter().map(|l| l.0.clone()))
        .filter(|k| !hidden_label(k))
        .collect();
    let field_names: BTreeSet<String> = series.iter().map(|(_, _, f)| f.clone()).collect();
    // As InfluxDB does: `SELECT *` gives time, then tags and fields together
    // in name order; a list gives time and what it names, in its order.
    let names: Vec<&String> = match fields {
        None => tag_keys.iter().chain(&field_names).collect::<BTreeSet<_>>().into_iter().collect(),
        Some(list) => {
            let mut seen = BTreeSet::new();
            list.iter().filter(|n| seen.insert(*n)).collect()
        }
    };
    let col: BTreeMap<&String, usize> = names.iter().enumerate().map(|(i, n)| (*n, 1 + i)).collect();
    // Rows keyed by (time, tag values); the tags shown are those named.
    let tag_cols: Vec<Option<usize>> = tag_keys.iter().map(|t| col.get(t).copied()).collect();
    let mut rows: BTreeMap<(i64, Vec<Option<String>>), Vec<serde_json::Value>> = BTreeMap::new();
    let width = 1 + names.len();
    for (id, key, field) in &series {
        let Some(&c) = col.get(field) else { continue };
        let tagvals: Vec<Option<String>> = tag_keys.iter().map(|t| key.get(t).map(str::to_owned)).collect();
        let ty = key.get(TYPE_LABEL);
        let (ts, vs) = store.read(*id, Timestamp(from), Timestamp(to));
        for (t, v) in ts.into_iter().zip(vs) {
            let row = rows.entry((t, tagvals.clone())).or_insert_with(|| vec![serde_json::Value::Null; width]);
            row[c] = match ty {
                Some("u64") => json!(v.to_bits()),
                Some("int") => json!(v as i64),
                _ => go_float(v),
            };
        }
    }
    let mut values = Vec::with_capacity(rows.len());
    let rows: Box<dyn Iterator<Item = _>> =
        if desc { Box::new(rows.into_iter().rev().skip(offset)) } else { Box::new(rows.into_iter().skip(offset)) };
    for ((t, tagvals), mut row) in rows {
        row[0] = match epoch {
            Some(unit) => json!(t / unit),
            None => json!(Timestamp(t).to_string()),
        };
        for (c, tv) in tag_cols.iter().zip(tagvals) {
            if let Some(c) = c {
                row[*c] = tv.map_or(serde_json::Value::Null, serde_json::Value::String);
            }
        }
        values.push(row);
        if limit.is_some_and(|l| values.len() >= l) {
            break;
        }
    }
    let mut columns = vec!["time".to_owned()];
    columns.extend(names.into_iter().cloned());
    Ok(json!({"series": [{"name": measurement, "columns": columns, "values": values}]}))
}

/// `SHOW SERIES [FROM m]`: each series key (`m,tag=v,…`, tags in name
/// order) once, whatever its fields.
fn show_series(store: &Store, db: &str, measurement: Option<&str>) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let esc = |s: &str| s.replace(',', "\\,").replace(' ', "\\ ").replace('=', "\\=");
    let mut keys = BTreeSet::new();
    for (_, k) in store.series(&Selector {
        matchers: vec![
            model::Matcher::new(FIELD_LABEL, model::MatchOp::NotEqual, "").map_err(|e| e.to_string())?,
            model::Matcher::new("db", model::MatchOp::Equal, db).map_err(|e| e.to_string())?,
        ],
    }) {
        let Some(f) = k.get(FIELD_LABEL) else { continue };
        let Some(m) = k.name().strip_suffix(f).and_then(|n| n.strip_suffix('_')) else { continue };
        if measurement.is_some_and(|want| want != m) {
            continue;
        }
        let mut key = esc(m);
        for (t, v) in k.labels().iter().filter(|(t, _)| !hidden_label(t)) {
            key.push_str(&format!(",{}={}", esc(t), esc(v)));
        }
        keys.insert(key);
    }
    if keys.is_empty() {
        return Ok(json!({}));
    }
    let values: Vec<_> = keys.into_iter().map(|k| json!([k])).collect();
    Ok(json!({"series": [{"columns": ["key"], "values": values}]}))
}

/// A float as InfluxDB's JSON writes it (Go's encoder): whole numbers
/// without a fraction (`2`, not `2.0`).
pub(crate) fn go_float(v: f64) -> serde_json::Value {
    if v.fract() == 0.0 && v.abs() < 1e15 && !(v == 0.0 && v.is_sign_negative()) {
        serde_json::json!(v as i64)
    } else {
        serde_json::json!(v)
    }
}

/// `SHOW TAG KEYS`, `SHOW FIELD KEYS`, `SHOW TAG VALUES WITH KEY = k`: one
/// series per measurement, names in order, as InfluxDB answers them.
fn show_keys(store: &Store, db: &str, measurement: Option<&str>, st: &Statement) -> Result<serde_json::Value, String> {
    use serde_json::json;
    let sel =
        Selector::parse(&format!("{{{FIELD_LABEL}!=\"\",db=\"{}\"}}", db.replace('\\', "\\\\").replace('"', "\\\"")))
            .map_err(|e| e.to_string())?;
    let hidden = hidden_label;
    // measurement -> rows
    let mut out: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (_, k) in store.series(&sel) {
        let Some(f) = k.get(FIELD_LABEL) else { continue };
        let Some(m) = k.name().strip_suffix(f).and_then(|n| n.strip_suffix('_')) else { continue };
        if measurement.is_some_and(|want| want != m) {
            continue;
        }
        let rows = out.entry(m.to_owned()).or_default();
        match st {
            Statement::ShowTagKeys(_) => {
                rows.extend(k.labels().iter().filter(|(n, _)| !hidden(n)).map(|(n, _)| vec![n.clone()]));
            }
            Statement::ShowFieldKeys(_) => {
                let ty = match k.get(TYPE_LABEL) {
                    Some("int") => "integer",
                    Some("u64") => "unsigned",
                    _ => "float",
                };
                rows.insert(vec![f.to_owned(), ty.to_owned()]);
            }
            Statement::ShowTagValues(_, key) => {
                if let Some(v) = k.get(key).filter(|_| !hidden(key)) {
                    rows.insert(vec![key.clone(), v.to_owned()]);
                }
            }
            _ => {}
        }
    }
    let columns: &[&str] = match st {
        Statement::ShowTagKeys(_) => &["tagKey"],
        Statement::ShowFieldKeys(_) => &["fieldKey", "fieldType"],
        _ => &["key", "value"],
    };
    let series: Vec<serde_json::Value> = out
        .into_iter()
        .filter(|(_, rows)| !rows.is_empty())
        .map(|(name, rows)| json!({"name": name, "columns": columns, "values": rows}))
        .collect();
    Ok(if series.is_empty() { json!({}) } else { json!({ "series": series }) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parsed points as (series, time, value).
    fn triples(p: &Parsed) -> Vec<(SeriesKey, i64, f64)> {
        p.points.points.iter().map(|&(id, t, v)| (p.points.keys[id as usize].clone(), t, v)).collect()
    }

    fn parse(body: &str) -> Parsed {
        parse_lines(body, 1, 42, "telegraf", None)
    }

    #[test]
    fn line_protocol_values_tags_and_escapes() {
        let p = parse(
            "cpu,host=a,cpu=cpu0 usage_idle=99.5,ip=18446744073709551615u,n=-3i,up=t 1700000000000000000\n\
             weird\\ m\\,x,tag\\ k=v\\=1 f=1e3\n\
             # comment\n\
             msg,host=a text=\"a b, \\\"c\\\"\",v=1\n",
        );
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.string_fields, 1);
        let shown: Vec<String> = triples(&p).iter().map(|(k, t, v)| format!("{k} {t} {v}")).collect();
        assert_eq!(
            shown[0],
            r#"cpu_usage_idle{cpu="cpu0",db="telegraf",host="a",influx_field="usage_idle"} 1700000000000000000 99.5"#
        );
        assert_eq!(triples(&p)[1].0.get(TYPE_LABEL), Some("u64"));
        assert_eq!(triples(&p)[1].2.to_bits(), u64::MAX);
        assert_eq!((triples(&p)[2].0.get(TYPE_LABEL), triples(&p)[2].2), (Some("int"), -3.0));
        assert_eq!(triples(&p)[3].2, 1.0);
        // numpy's uint64 written as `i`: above i64, kept as unsigned.
        let big = parse("perf ip=18446744071578845184i 1");
        assert!(big.errors.is_empty(), "{:?}", big.errors);
        assert_eq!(
            (triples(&big)[0].0.get(TYPE_LABEL), triples(&big)[0].2.to_bits()),
            (Some("u64"), 18446744071578845184)
        );
        assert!(!parse("perf ip=18446744073709551616i 1").errors.is_empty(), "past u64 is still refused");
        assert_eq!(shown[4], r#"weird m,x_f{db="telegraf",influx_field="f",tag k="v=1"} 42 1000"#);
        assert_eq!(triples(&p)[5].0.name(), "msg_v");
    }

    #[test]
    fn bad_lines_are_reported_one_by_one() {
        let p = parse("cpu\ncpu f=\ncpu f=1 12x\ncpu,t f=1\ncpu f=abc\ncpu f=\"open\nok f=1\n");
        assert_eq!(p.errors.len(), 6, "{:?}", p.errors);
        assert_eq!(triples(&p).len(), 1);
        assert!(p.errors[2].contains("bad timestamp"));
    }

    #[test]
    fn times_outside_the_storable_range_and_duplicates_are_refused_by_line() {
        let p = parse(
            "n v=1 9223372036854775807\nn v=1 -1\nn v=1 7258118400000000000\nn v=1,v=2 5\nn,a=1,a=2 v=1 5\nok v=1 7258118399999999999\n",
        );
        assert_eq!(p.errors.len(), 5, "{:?}", p.errors);
        for e in &p.errors[..3] {
            assert!(e.contains("outside the range kansoku stores"), "{e}");
        }
        assert!(p.errors[3].contains("duplicate field \"v\""), "{}", p.errors[3]);
        assert!(p.errors[4].contains("duplicate tag \"a\""), "{}", p.errors[4]);
        assert_eq!(triples(&p).len(), 1, "only the good line, and nothing of a refused one");
    }

    #[test]
    fn influxql_subset() {
        let now = 10_000_000_000_000;
        assert_eq!(parse_query("SHOW DATABASES", now).unwrap(), vec![Statement::ShowDatabases]);
        assert_eq!(
            parse_query("create database \"mydb\"; show measurements", now).unwrap(),
            vec![Statement::CreateDatabase("mydb".into()), Statement::ShowMeasurements]
        );
        let q = parse_query(
            "SELECT usage_idle, \"ip\" FROM \"autogen\".\"cpu\" WHERE time > now() - 1h AND host = 'a' AND time <= '1970-01-01T02:46:40Z' LIMIT 5",
            now,
        )
        .unwrap();
        assert_eq!(
            q,
            vec![Statement::Select {
                fields: Some(vec!["usage_idle".into(), "ip".into()]),
                measurement: "cpu".into(),
                from: now - 3_600_000_000_000 + 1,
                to: 10_000_000_000_000,
                tags: vec![("host".into(), model::MatchOp::Equal, "a".into())],
                limit: Some(5),
                desc: false,
                offset: 0,
            }]
        );
        assert!(
            matches!(&parse_query("select mean(x) from m", now).unwrap()[0], Statement::Aggregate { aggs, .. } if aggs[0].func == "mean")
        );
        assert!(
            parse_query("select percentile(x, 95) from m", now).unwrap_err().contains("percentile() is not supported")
        );
        let q = parse_query("SELECT count(ip) AS n FROM perf WHERE run='x' GROUP BY time(10s), cpu fill(none)", now)
            .unwrap();
        match &q[0] {
            Statement::Aggregate { aggs, group, to, .. } => {
                assert_eq!(
                    (aggs[0].name.as_str(), group.time, group.tags.as_slice()),
                    ("n", Some(10_000_000_000), &["cpu".to_owned()][..])
                );
                assert_eq!((group.fill.clone(), *to), (aggregate::Fill::None, now), "buckets end at now()");
            }
            other => panic!("{other:?}"),
        }
        // The seed-000 client's query: the condition is fine, ORDER BY is understood.
        let q = parse_query("SELECT ip, pid, tid FROM perf WHERE run='x' AND cpu='3' ORDER BY time DESC LIMIT 3", now)
            .unwrap();
        assert!(
            matches!(&q[0], Statement::Select { tags, limit: Some(3), desc: true, .. } if tags.len() == 2),
            "{q:?}"
        );
        assert!(parse_query("select * from m group by host", now).unwrap_err().contains("GROUP BY needs an aggregate"));
        assert_eq!(
            parse_query("SHOW TAG KEYS; show field keys from \"m\"; SHOW TAG VALUES FROM m WITH KEY = cpu", now)
                .unwrap(),
            vec![
                Statement::ShowTagKeys(None),
                Statement::ShowFieldKeys(Some("m".into())),
                Statement::ShowTagValues(Some("m".into()), "cpu".into())
            ]
        );
        assert!(parse_query("SHOW TAG VALUES", now).unwrap_err().contains("WITH KEY"));
        let q =
            parse_query("SELECT * FROM m WHERE a != 'x' AND b =~ /^c|d/ AND e !~ /f/ LIMIT 2 OFFSET 3", now).unwrap();
        match &q[0] {
            Statement::Select { tags, offset, .. } => {
                use model::MatchOp::*;
                let ops: Vec<_> = tags.iter().map(|t| (t.0.as_str(), t.1, t.2.as_str())).collect();
                assert_eq!(ops, [("a", NotEqual, "x"), ("b", Regex, ".*(?:^c|d).*"), ("e", NotRegex, ".*(?:f).*")]);
                assert_eq!(*offset, 3);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_query("SELECT * FROM m WHERE a =~ 'x'", now).unwrap_err().contains("between slashes"));
        assert_eq!(parse_query("SHOW SERIES FROM \"m\"", now).unwrap(), vec![Statement::ShowSeries(Some("m".into()))]);
        assert!(parse_query("drop database x", now).unwrap_err().contains("unsupported"));
        assert!(parse_query("select * from m where a = 1 or b = 2", now).is_err());
    }
}
