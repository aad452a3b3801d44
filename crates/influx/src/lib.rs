//! The InfluxDB 1.x HTTP API subset kansoku serves (`docs/api.md`,
//! "InfluxDB compatibility"): line protocol in, a small InfluxQL subset out.
//!
//! Mapping: field `f` of measurement `m` with tags `t=v` in database `d` is
//! the series `m_f{t="v",db="d",influx_field="f"}`. Floats are stored as
//! they are, booleans as 1/0 with `kansoku_type="bool"` (answered `true` and
//! `false`); integers (`i`) as their value with
//! `kansoku_type="int"` (exact up to 2^53); unsigned integers (`u`, e.g.
//! instruction pointers) bit for bit with `kansoku_type="u64"`, so they come
//! back exactly. Strings are kept once each in a dictionary
//! ([`strings`]), their points holding the id with `kansoku_type="string"`.
//!
//! Line protocol is parsed by `parse_lines` (fuzzed; each series once per
//! body); InfluxQL by a lexer and recursive-descent parser (`ql`, fuzzed); a
//! measurement is read as rows of (tag set, time) with conditions evaluated
//! per tag set, then per row (`query`); functions with GROUP BY tags and time
//! and fill are `aggregate`'s; answers may be chunked (`chunk_lines`).
//! Checked against a real influxd.

use model::{Batch, SeriesKey, Timestamp};
use store::{Appended, Appender, Store};

pub mod aggregate;
pub mod ql;
mod query;
pub mod strings;
mod transform;

pub use ql::{Statement, parse as parse_query, parse_each as parse_statements};
pub use query::{chunk_lines, execute, exists as database_exists};

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

/// A string field's type label.
pub const STRING_TYPE: &str = "string";

impl Value {
    fn stored(self) -> (f64, Option<&'static str>) {
        match self {
            Value::Float(v) => (v, None),
            Value::Int(v) => (v as f64, Some("int")),
            Value::Uint(v) => (f64::from_bits(v), Some("u64")),
            Value::Bool(b) => (f64::from(u8::from(b)), Some("bool")),
        }
    }
}

/// Points to store: each series once, each point an index into them — a
/// body of a million lines names each of its series once, not a million
/// times (allocation was most of `/write`'s cost).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Points {
    pub keys: Vec<SeriesKey>,
    /// (index into `keys`, time ns, value); a string field's value is an
    /// index into `strings` until [`Points::set_string_ids`] makes it the
    /// dictionary's id.
    pub points: Vec<(u32, i64, f64)>,
    /// The body's string values, each once.
    pub strings: Vec<String>,
}

impl Points {
    /// From series, each with its (time, value) samples; a series without
    /// any is left out (it would be created, and counted against a
    /// writer's new-series limit, for nothing).
    pub fn from_series(series: Vec<(SeriesKey, Vec<(i64, f64)>)>) -> Points {
        let mut out = Points { keys: Vec::with_capacity(series.len()), ..Points::default() };
        for (key, samples) in series.into_iter().filter(|(_, s)| !s.is_empty()) {
            let id = out.keys.len();
            out.keys.push(key);
            out.points.extend(samples.into_iter().map(|(t, v)| (id as u32, t, v)));
        }
        out
    }

    /// Makes string values the dictionary's ids: `ids[i]` is the id of
    /// `strings[i]` ([`strings::Dict::plan`]). Returns the string values.
    pub fn set_string_ids(&mut self, ids: &[u32]) -> u64 {
        let is_string: Vec<bool> = self.keys.iter().map(|k| k.get(TYPE_LABEL) == Some(STRING_TYPE)).collect();
        let mut n = 0;
        for (key, _, v) in &mut self.points {
            if is_string[*key as usize] {
                // Every string point's value indexes `ids` (the parser made
                // it; a tag cannot make a series a string one).
                *v = f64::from(ids[*v as usize]);
                n += 1;
            }
        }
        self.strings.clear();
        n
    }
}

#[derive(Debug, Default)]
pub struct Parsed {
    pub points: Points,
    /// One message per line that did not parse, the first
    /// [`ERRORS_KEPT`] of them (a body of a million bad lines must not keep
    /// a million messages).
    pub errors: Vec<String>,
    /// Lines that did not parse, all of them.
    pub n_errors: usize,
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
/// Messages kept of one body's bad lines; the rest are counted.
pub const ERRORS_KEPT: usize = 16;

pub fn parse_lines(body: &str, precision: i64, now: i64, db: &str, rp: Option<&str>) -> Parsed {
    let mut out = Parsed::default();
    let mut cache = Cache::default();
    for line in body.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (keys, points, strings) = (out.points.keys.len(), out.points.points.len(), out.points.strings.len());
        cache.line_new.clear();
        if let Err(e) = parse_line(line, precision, now, (db, rp), &mut cache, &mut out) {
            // A line is taken whole or not at all, its new series too.
            out.points.keys.truncate(keys);
            out.points.points.truncate(points);
            for s in out.points.strings.drain(strings..) {
                cache.strings.remove(&s);
            }
            for k in cache.line_new.drain(..) {
                cache.ids.remove(&k);
            }
            out.n_errors += 1;
            if out.errors.len() < ERRORS_KEPT {
                let shown: String = line.chars().take(200).collect();
                out.errors.push(format!("unable to parse '{shown}': {e}"));
            }
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
    /// The body's string values: index into `Points::strings`.
    strings: std::collections::HashMap<String, u32>,
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
        let k = unescape(k);
        // The labels kansoku adds itself: a tag of that name would make a
        // number read as a string (or a database another's).
        if [FIELD_LABEL, TYPE_LABEL].contains(&k.as_str()) {
            return Err(format!("tag key {k:?} is reserved: kansoku stores the field's name and type in it"));
        }
        labels.push((k, unescape(v)));
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
        let (stored, ty) = match parse_value(v)? {
            Some(value) => value.stored(),
            None => {
                let s = unescape_string(&v[1..v.len() - 1]);
                if s.len() > strings::STRING_MAX {
                    return Err(format!("string field {:?} is over {} bytes", unescape(raw), strings::STRING_MAX));
                }
                let n = out.points.strings.len() as u32;
                let i = *cache.strings.entry(s).or_insert_with_key(|s| {
                    out.points.strings.push(s.clone());
                    n
                });
                (f64::from(i), Some(STRING_TYPE))
            }
        };
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
                let key = SeriesKey::new(format!("{}_{k}", h.measurement), l);
                // The sizes every ingest path holds a series to (a label
                // value of megabytes cost every query naming it).
                key.check_size()?;
                let id = out.points.keys.len() as u32;
                out.points.keys.push(key);
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

/// A string field's value between its quotes: influxd unescapes `\"` and
/// `\\` there, and keeps every other backslash.
fn unescape_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&n @ ('"' | '\\'))) => {
                out.push(n);
                chars.next();
            }
            _ => out.push(c),
        }
    }
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
/// String values must be the dictionary's ids by now ([`Points::set_string_ids`]).
pub fn write(store: &Store, points: &Points) -> Result<Vec<Appended>, store::StoreError> {
    debug_assert!(points.strings.is_empty(), "string values are made ids before they are stored");
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
        assert_eq!(p.points.strings, ["a b, \"c\""]);
        assert_eq!(
            (triples(&p)[5].0.name(), triples(&p)[5].0.get(TYPE_LABEL), triples(&p)[5].2),
            ("msg_text", Some("string"), 0.0)
        );
        assert_eq!(triples(&p)[6].0.name(), "msg_v");
    }

    /// Strings are kept once per body, as influxd unescapes them (`\"` and
    /// `\\` only); a refused line's new strings are forgotten with it; a
    /// value past 64 KiB refuses its line.
    #[test]
    fn string_values_are_kept_once_each() {
        let reserved = parse("p,kansoku_type=string v=5 1\np,influx_field=x v=5 1\n");
        assert_eq!(reserved.errors.len(), 2, "{:?}", reserved.errors);
        assert!(reserved.errors[0].contains("reserved"), "{}", reserved.errors[0]);
        let long = "x".repeat(strings::STRING_MAX + 1);
        let body = format!(
            "log msg=\"up\",path=\"C:\\\\dir\\n\" 1\nlog msg=\"up\" 2\nlog msg=\"gone\",bad=x 3\nlog msg=\"\" 4\nlog msg=\"{long}\" 5\n"
        );
        let mut p = parse(&body);
        assert_eq!(p.errors.len(), 2, "{:?}", p.errors);
        assert!(p.errors[1].contains("over 65536 bytes"), "{}", p.errors[1]);
        assert_eq!(p.points.strings, ["up", "C:\\dir\\n", ""]);
        let values: Vec<(String, i64, f64)> =
            triples(&p).into_iter().map(|(k, t, v)| (k.name().to_owned(), t, v)).collect();
        assert_eq!(
            values,
            [
                ("log_msg".into(), 1, 0.0),
                ("log_path".into(), 1, 1.0),
                ("log_msg".into(), 2, 0.0),
                ("log_msg".into(), 4, 2.0)
            ]
        );
        assert_eq!(p.points.set_string_ids(&[7, 3, 9]), 4);
        let ids: Vec<f64> = p.points.points.iter().map(|x| x.2).collect();
        assert_eq!(ids, [7.0, 3.0, 7.0, 9.0]);
        assert!(p.points.strings.is_empty());
    }

    #[test]
    fn bad_lines_are_reported_one_by_one() {
        let p = parse("cpu\ncpu f=\ncpu f=1 12x\ncpu,t f=1\ncpu f=abc\ncpu f=\"open\nok f=1\n");
        assert_eq!(p.errors.len(), 6, "{:?}", p.errors);
        assert_eq!(triples(&p).len(), 1);
        assert!(p.errors[2].contains("bad timestamp"));
    }

    /// Issue 42: a series past the size limits is refused by its line.
    #[test]
    fn a_line_past_the_label_size_limits_is_refused() {
        let big = "v".repeat(model::LABEL_VALUE_BYTES_MAX + 1);
        let p = parse(&format!("m,a={big} f=1 1\nm,a=ok f=1 1\n"));
        assert_eq!((p.n_errors, triples(&p).len()), (1, 1));
        assert!(p.errors[0].contains("at most 16384"), "{}", p.errors[0]);
    }

    /// Issue 42: 16 KB of gzip made 32 M bad lines, each kept as a message
    /// (1 GB). Only the first few are kept; all are counted.
    #[test]
    fn a_body_of_bad_lines_keeps_a_few_messages_and_counts_all() {
        let p = parse(&"x\n".repeat(100_000));
        assert_eq!(p.n_errors, 100_000);
        assert_eq!(p.errors.len(), ERRORS_KEPT);
        assert_eq!(parse("a v=1 1\nb\n").n_errors, 1);
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
}
