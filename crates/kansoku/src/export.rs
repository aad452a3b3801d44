//! `kansoku export`: every raw sample (or event) a selector matches over a
//! range, for pandas / polars / DuckDB, InfluxDB, or Prometheus backfill.
//! Reads the data directory read-only, so it works beside a running writer.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use codec::events::Want;
use model::{Selector, SeriesKey, Timestamp, parse_time};
use source::EventQuery;
use store::Store;

use crate::read::csv_field;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Selector, e.g. 'node_cpu_seconds_total{cpu="0"}'; '{}' for everything.
    selector: String,
    #[arg(long, value_enum, default_value = "csv")]
    format: ExportFormat,
    /// Start: RFC 3339, Unix seconds, or -DURATION (default: the beginning).
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// End (default: now).
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Export event streams (per-CPU samples) instead of series.
    #[arg(long)]
    events: bool,
    /// Write here instead of standard output (required for parquet).
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Data directory to read.
    #[arg(long, default_value = "kansoku-data")]
    data: PathBuf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// One row per sample: time_ns, name, one column per label, value.
    Csv,
    /// InfluxDB line protocol: name,labels value=V time_ns.
    InfluxLp,
    /// OpenMetrics text, for `promtool tsdb create-blocks-from openmetrics`.
    Openmetrics,
    /// Apache Parquet (needs the `parquet` feature, on in `make build`).
    Parquet,
}

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let sel = Selector::parse(&args.selector)
        .map_err(|e| anyhow::anyhow!("{e}; selectors look like name{{label=\"value\"}}, '{{}}' for all"))?;
    let now = Timestamp::now();
    let from = args.from.as_deref().map(|s| parse_time(s, now)).transpose()?.unwrap_or(Timestamp::MIN);
    let to = args.to.as_deref().map(|s| parse_time(s, now)).transpose()?.unwrap_or(now);
    if from > to {
        bail!("--from {from} is after --to {to}");
    }
    let store = Store::open_read_only(&args.data).with_context(|| format!("read {}", args.data.display()))?;
    if args.format == ExportFormat::Parquet {
        let path = args.out.as_deref().context("parquet needs --out FILE")?;
        return parquet_out::write(&store, &sel, from, to, args.events, path);
    }
    let sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(File::create(p).with_context(|| format!("create {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let req = Request { store: &store, sel: &sel, from, to, format: args.format };
    let n = if args.events { events(&req, &mut out)? } else { series(&req, &mut out)? };
    out.flush()?;
    if n == 0 {
        bail!("nothing matches {} in that range; list series with `kansoku series`", args.selector);
    }
    tracing::info!("exported {n} {}", if args.events { "events" } else { "samples" });
    Ok(())
}

struct Request<'a> {
    store: &'a Store,
    sel: &'a Selector,
    from: Timestamp,
    to: Timestamp,
    format: ExportFormat,
}

/// Label names over all keys, sorted: the label columns of CSV and Parquet.
pub(crate) fn label_columns<'a>(keys: impl Iterator<Item = &'a SeriesKey>) -> Vec<String> {
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
fn row_prefix(prefix: &mut String, key: &SeriesKey, cols: &[String], format: ExportFormat) {
    prefix.clear();
    if format == ExportFormat::Csv {
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
    if format == ExportFormat::Csv {
        csv_header(out, &cols, "value")?;
    }
    let mut n = 0u64;
    let mut prefix = String::new();
    for (id, key) in &matched {
        let (ts, vals) = store.read(*id, req.from, req.to);
        if ts.is_empty() {
            continue;
        }
        if format == ExportFormat::Openmetrics {
            writeln!(out, "# TYPE {} unknown", key.name())?;
            prefix.clear();
            prefix.push_str(&key.to_string());
        } else {
            row_prefix(&mut prefix, key, &cols, format);
        }
        for (t, v) in ts.iter().zip(&vals) {
            match format {
                ExportFormat::Csv => writeln!(out, "{t},{prefix},{v}")?,
                ExportFormat::InfluxLp => writeln!(out, "{prefix} value={v:?} {t}")?,
                _ => writeln!(
                    out,
                    "{prefix} {} {}.{:09}",
                    om_value(*v),
                    t.div_euclid(1_000_000_000),
                    t.rem_euclid(1_000_000_000)
                )?,
            }
        }
        n += ts.len() as u64;
    }
    if format == ExportFormat::Openmetrics {
        writeln!(out, "# EOF")?;
    }
    Ok(n)
}

fn om_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v:?}")
    }
}

fn events(req: &Request<'_>, out: &mut impl Write) -> anyhow::Result<u64> {
    let format = req.format;
    let streams = req.store.events().streams(req.sel);
    let cols = label_columns(streams.iter());
    if format == ExportFormat::Openmetrics {
        bail!("events have no OpenMetrics form; use csv, influx-lp or parquet");
    }
    if format == ExportFormat::Csv {
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
            if format == ExportFormat::Csv {
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

#[cfg(not(feature = "parquet"))]
mod parquet_out {
    use std::path::Path;

    use model::{Selector, Timestamp};
    use store::Store;

    pub fn write(_: &Store, _: &Selector, _: Timestamp, _: Timestamp, _: bool, _: &Path) -> anyhow::Result<()> {
        anyhow::bail!(
            "this kansoku was built without Parquet; build it with `make build` (or `cargo build --features parquet`)"
        )
    }
}

#[cfg(feature = "parquet")]
mod parquet_out;
