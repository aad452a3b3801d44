//! `kansoku export`: every raw sample (or event) a selector matches over a
//! range, for pandas / polars / DuckDB, InfluxDB, or Prometheus backfill, in
//! the formats `formats` writes. Reads the data directory read-only, so it
//! works beside a running writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use model::{Selector, Timestamp, parse_time};
use store::Store;

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

impl ExportFormat {
    fn text(self) -> Option<formats::Format> {
        match self {
            ExportFormat::Csv => Some(formats::Format::Csv),
            ExportFormat::InfluxLp => Some(formats::Format::InfluxLp),
            ExportFormat::Openmetrics => Some(formats::Format::Openmetrics),
            ExportFormat::Parquet => None,
        }
    }
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
    let Some(format) = args.format.text() else {
        let path = args.out.as_deref().context("parquet needs --out FILE")?;
        return parquet(&store, &sel, from, to, args.events, path);
    };
    let sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(File::create(p).with_context(|| format!("create {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let req = formats::Request { store: &store, sel: &sel, from, to, format };
    let n = formats::write(&req, args.events, &mut out)?;
    out.flush()?;
    if n == 0 {
        bail!("nothing matches {} in that range; list series with `kansoku series`", args.selector);
    }
    tracing::info!("exported {n} {}", if args.events { "events" } else { "samples" });
    Ok(())
}

#[cfg(feature = "parquet")]
fn parquet(
    store: &Store,
    sel: &Selector,
    from: Timestamp,
    to: Timestamp,
    events: bool,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    formats::parquet::write(store, sel, from, to, events, path)
}

#[cfg(not(feature = "parquet"))]
fn parquet(_: &Store, _: &Selector, _: Timestamp, _: Timestamp, _: bool, _: &std::path::Path) -> anyhow::Result<()> {
    bail!("this kansoku was built without Parquet; build it with `make build` (or `cargo build --features parquet`)")
}
