//! Every raw sample (or per-CPU event) a selector matches over a range, as
//! CSV (pandas, polars, DuckDB), InfluxDB line protocol, or OpenMetrics
//! (Prometheus backfill): what `kansoku export` writes. Reads the store's
//! data directory as it is given, so a read-only store beside a running
//! writer works.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::bail;
use codec::events::Want;
use model::{Selector, SeriesKey, Timestamp};
use source::EventQuery;
use store::Store;

/// What to export: the series (or event streams) of `sel` in `[from, to]`.
#[derive(Debug)]
pub struct Request<'a> {
    pub store: &'a Store,
    pub sel: &'a Selector,
    pub from: Timestamp,
    pub to: Timestamp,
    pub format: Format,
}

/// The formats samples leave in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One row per sample: time_ns, name, one column per label, value.
    Csv,
    /// InfluxDB line protocol: name,labels value=V time_ns.
    InfluxLp,
    /// OpenMetrics text, for `promtool tsdb create-blocks-from openmetrics`.
    Openmetrics,
}

/// Writes the request's samples (or with `events`, its per-CPU events) to
/// `out`; how many it wrote.
pub fn write(req: &Request<'_>, events: bool, out: &mut impl Write) -> anyhow::Result<u64> {
    if events { self::events(req, out) } else { series(req, out) }
}

/// Label names over all keys, sorted: the label columns of CSV and Parquet.
pub fn label_columns<'a>(keys: impl Iterator<Item = &'a SeriesKey>) -> Vec<String> {
    let set: BTreeSet<&str> = keys.flat_map(|k| k.labels().iter().map(|(n, _)| n.as_str())).collect();
    set.into_iter().map(str::to_owned).collect()
}

/// `time_ns,name,<labels>,<tail>`
fn csv_header(out: &mut impl Write, cols: &[String], tail: &str) -> std::io::Result<()> {
    write!(out, "time_ns,name")?;
    for c in cols {
        write!(out, ",{}", csv_field(c))?;
    }
    writeln!(out, ",{tail}")
}

/// The name and label fields of a CSV row, or the series part of a line.
fn row_prefix(prefix: &mut String, key: &SeriesKey, cols: &[String], format: Format) {
    prefix.clear();
    if format == Format::Csv {
        prefix.push_str(&csv_field(key.name()));
        for c in cols {
            prefix.push(',');
            prefix.push_str(&csv_field(key.get(c).unwrap_or("")));
        }
    } else {
        influx_series(prefix, key);
    }
}

fn series(req: &Request<'_>, out: &mut impl Write) -> anyhow::Result<u64> {
    let (store, format) = (req.store, req.format);
    let matched = store.series(req.sel);
    let cols = label_columns(matched.iter().map(|(_, k)| k));
    if format == Format::Csv {
        csv_header(out, &cols, "value")?;
    }
    let mut n = 0u64;
    let mut prefix = String::new();
    // One TYPE line a family: a name's series come one after another.
    let mut family: Option<String> = None;
    for (id, key) in &matched {
        let (ts, vals) = store.read(*id, req.from, req.to);
        if ts.is_empty() {
            continue;
        }
        if format == Format::Openmetrics {
            if family.as_deref() != Some(key.name()) {
                family = Some(key.name().to_owned());
                prefix.clear();
                crate::openmetrics::type_line(&mut prefix, key.name(), "unknown");
                out.write_all(prefix.as_bytes())?;
            }
            prefix.clear();
            prefix.push_str(&key.to_string());
        } else {
            row_prefix(&mut prefix, key, &cols, format);
        }
        for (t, v) in ts.iter().zip(&vals) {
            match format {
                Format::Csv => writeln!(out, "{t},{prefix},{v}")?,
                Format::InfluxLp => writeln!(out, "{prefix} value={v:?} {t}")?,
                Format::Openmetrics => {
                    let mut line = String::with_capacity(prefix.len() + 32);
                    crate::openmetrics::value_and_time(&mut line, *v, *t, crate::openmetrics::Precision::Nanos);
                    writeln!(out, "{prefix}{line}")?
                }
            }
        }
        n += ts.len() as u64;
    }
    if format == Format::Openmetrics {
        writeln!(out, "{}", crate::openmetrics::EOF)?;
    }
    Ok(n)
}

fn events(req: &Request<'_>, out: &mut impl Write) -> anyhow::Result<u64> {
    let format = req.format;
    let streams = req.store.events().streams(req.sel);
    let cols = label_columns(streams.iter());
    if format == Format::Openmetrics {
        bail!("events have no OpenMetrics form; use csv, influx-lp or parquet");
    }
    if format == Format::Csv {
        csv_header(out, &cols, "cpu,pid,tid,ip")?;
    }
    let store = req.store;
    let q = EventQuery { streams: req.sel.clone(), cpus: Vec::new(), from: req.from.as_nanos(), to: req.to.as_nanos() };
    let (batches, corrupt) = store.events().scan(&q, Want::ALL);
    if corrupt > 0 {
        tracing::warn!("{corrupt} corrupt event batches skipped (see the log above)");
    }
    let mut n = 0;
    let mut prefix = String::new();
    for (key, b) in &batches {
        row_prefix(&mut prefix, key, &cols, format);
        for i in 0..b.len() {
            let (t, pid, tid, ip) = (b.time[i], b.pid[i], b.tid[i], b.ip[i]);
            if format == Format::Csv {
                writeln!(out, "{t},{prefix},{},{pid},{tid},{ip}", b.cpu)?;
            } else {
                // `u`: unsigned 64-bit, so kernel addresses round-trip.
                writeln!(out, "{prefix},cpu={} pid={pid}i,tid={tid}i,ip={ip}u {t}", b.cpu)?;
            }
        }
        n += b.len() as u64;
    }
    Ok(n)
}

/// `measurement,tag=value,...` with line-protocol escaping.
fn influx_series(out: &mut String, key: &SeriesKey) {
    escape(out, key.name(), &[',', ' ']);
    for (k, v) in key.labels() {
        out.push(',');
        escape(out, k, &[',', '=', ' ']);
        out.push('=');
        escape(out, v, &[',', '=', ' ']);
    }
}

fn escape(out: &mut String, s: &str, special: &[char]) {
    for c in s.chars() {
        if special.contains(&c) || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A CSV field, quoted where it must be.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OpenMetrics from `kansoku export`: one TYPE line a family however
    /// many series it has (a second TYPE line for the same family is an
    /// error to an OpenMetrics parser), the lines as `/federate` writes
    /// them but with the stored nanoseconds, and `# EOF` last.
    #[test]
    fn openmetrics_types_each_family_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), store::Options::default()).unwrap();
        let mut b = model::Batch::new(Timestamp(1_700_000_000_123_456_789));
        b.defs = vec![
            (0, SeriesKey::new("up", [("job", "a")])),
            (1, SeriesKey::new("up", [("job", "b")])),
            (2, SeriesKey::new("temp", [("room", "x")])),
        ];
        b.points = vec![(0, 1.0), (1, f64::NAN), (2, -0.5)];
        store.append(&mut store::Appender::default(), &b).unwrap();
        let sel = Selector::all();
        let req =
            Request { store: &store, sel: &sel, from: Timestamp::MIN, to: Timestamp::MAX, format: Format::Openmetrics };
        let mut out = Vec::new();
        assert_eq!(write(&req, false, &mut out).unwrap(), 3);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "# TYPE temp unknown\ntemp{room=\"x\"} -0.5 1700000000.123456789\n\
             # TYPE up unknown\nup{job=\"a\"} 1 1700000000.123456789\nup{job=\"b\"} NaN 1700000000.123456789\n# EOF\n"
        );
    }
}
