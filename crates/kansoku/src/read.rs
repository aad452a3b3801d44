//! `kansoku series` and `kansoku query`: read a data directory (read-only,
//! safe beside a running writer) or ask a running server over HTTP.

use std::collections::HashMap;
use std::io::{BufWriter, Write};

use anyhow::{Context, bail};
use model::{Selector, SeriesKey, Timestamp};
use store::Store;
use store::query::{Frame, FrameSeries, range};

use crate::ReadFrom;

#[derive(clap::Args, Debug)]
pub struct SeriesArgs {
    /// Selector, e.g. 'node_cpu_seconds_total{mode="user"}' (default: all).
    matcher: Option<String>,
    #[command(flatten)]
    source: ReadFrom,
}

#[derive(clap::Args, Debug)]
pub struct QueryArgs {
    /// Selector, e.g. 'node_cpu_seconds_total{cpu="0",mode=~"user|system"}'.
    selector: String,
    /// Range ending now, e.g. 30s, 5m, 1h (default 5m).
    #[arg(long, conflicts_with = "from")]
    since: Option<String>,
    /// Start: RFC 3339, Unix seconds, or -DURATION.
    #[arg(long, allow_hyphen_values = true)]
    from: Option<String>,
    /// End (default now).
    #[arg(long, allow_hyphen_values = true)]
    to: Option<String>,
    /// Downsample into buckets of this width (e.g. 1s).
    #[arg(long)]
    step: Option<String>,
    /// Downsample into about this many buckets over the range.
    #[arg(long, conflicts_with = "step")]
    points: Option<usize>,
    /// Per-second rate of counters instead of raw values.
    #[arg(long)]
    rate: bool,
    /// Aggregations per bucket, comma separated: min,max,avg,last,count (default avg).
    #[arg(long)]
    agg: Option<String>,
    /// Combine series per bucket into one per value of these labels (comma
    /// separated), e.g. --by host: `sum by (host)`. Needs --step or --points.
    #[arg(long)]
    by: Option<String>,
    /// How --by combines: sum (default), avg, min, max, count.
    #[arg(long)]
    group: Option<String>,
    #[arg(long, value_enum, default_value = "csv")]
    format: Format,
    #[command(flatten)]
    source: ReadFrom,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Csv,
    Json,
}

fn parse_selector(text: &str) -> anyhow::Result<Selector> {
    Selector::parse(text)
        .map_err(|e| anyhow::anyhow!("{e}; selectors look like name{{label=\"value\",other=~\"re.*\"}}"))
}

fn open(source: &ReadFrom) -> anyhow::Result<Store> {
    Store::open_read_only(&source.data).with_context(|| format!("read {}", source.data.display()))
}

fn key_from_json(s: &serde_json::Value) -> anyhow::Result<SeriesKey> {
    let name = s.get("name").and_then(|n| n.as_str()).context("series without name")?;
    let labels = s.get("labels").and_then(|l| l.as_object()).context("series without labels")?;
    Ok(SeriesKey::new(name, labels.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))))
}

pub fn series(args: SeriesArgs) -> anyhow::Result<()> {
    let text = args.matcher.as_deref().unwrap_or("");
    let sel = parse_selector(text)?;
    let keys: Vec<SeriesKey> = match &args.source.server {
        Some(url) => {
            let body = client::get_json(url, "/api/v1/series", &[("match", text)])?;
            let list = body.get("series").and_then(|s| s.as_array()).context("response without series")?;
            list.iter().map(key_from_json).collect::<anyhow::Result<_>>()?
        }
        None => open(&args.source)?.series(&sel).into_iter().map(|(_, k)| k).collect(),
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    for k in keys {
        writeln!(out, "{k}")?;
    }
    out.flush()?;
    Ok(())
}

pub fn query(args: QueryArgs) -> anyhow::Result<()> {
    parse_selector(&args.selector)?;
    let mut params: HashMap<String, String> = HashMap::new();
    params.insert("query".into(), args.selector.clone());
    for (k, v) in [
        ("since", &args.since),
        ("from", &args.from),
        ("to", &args.to),
        ("step", &args.step),
        ("agg", &args.agg),
        ("by", &args.by),
        ("group", &args.group),
    ] {
        if let Some(v) = v {
            params.insert(k.into(), v.clone());
        }
    }
    if let Some(p) = args.points {
        params.insert("points".into(), p.to_string());
    }
    if args.rate {
        params.insert("rate".into(), "true".into());
    }
    let frame = match &args.source.server {
        Some(url) => {
            params.insert("time_unit".into(), "ns".into());
            let pairs: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            frame_from_json(&client::get_json(url, "/api/v1/query", &pairs)?)?
        }
        None => {
            let q = api_query(&params)?;
            let store = open(&args.source)?;
            range(&store, &q)?
        }
    };
    if frame.series.is_empty() {
        bail!("no series matches {}; list them with `kansoku series`", args.selector);
    }
    let mut out = BufWriter::new(std::io::stdout().lock());
    match args.format {
        Format::Json => writeln!(out, "{}", api::frame_json(&frame, true))?,
        Format::Csv => write_csv(&mut out, &frame, args.agg.is_some())?,
    }
    out.flush()?;
    Ok(())
}

fn api_query(params: &HashMap<String, String>) -> anyhow::Result<store::query::RangeQuery> {
    Ok(api::parse_range_query(params, Timestamp::now())?)
}

/// `series,time_ns,value` (plus `agg` after `series` when aggregations were
/// asked for); one row per sample, gaps omitted.
fn write_csv(out: &mut impl Write, frame: &Frame, with_agg: bool) -> std::io::Result<()> {
    writeln!(out, "{}", if with_agg { "series,agg,time_ns,value" } else { "series,time_ns,value" })?;
    for s in &frame.series {
        let name = formats::csv_field(&s.key.to_string());
        let agg = s.agg.map_or("", |a| a.name());
        for (t, v) in frame.times.iter().zip(&s.values) {
            let Some(v) = v else { continue };
            if with_agg {
                writeln!(out, "{name},{agg},{t},{v}")?;
            } else {
                writeln!(out, "{name},{t},{v}")?;
            }
        }
    }
    Ok(())
}

fn frame_from_json(body: &serde_json::Value) -> anyhow::Result<Frame> {
    let times = body
        .get("times")
        .and_then(|t| t.as_array())
        .context("response without times")?
        .iter()
        .map(|t| t.as_i64().context("time is not an integer"))
        .collect::<anyhow::Result<Vec<i64>>>()?;
    let mut series = Vec::new();
    for s in body.get("series").and_then(|s| s.as_array()).context("response without series")? {
        let agg = s.get("agg").and_then(|a| a.as_str()).map(str::parse).transpose()?;
        let values = s
            .get("values")
            .and_then(|v| v.as_array())
            .context("series without values")?
            .iter()
            .map(|v| v.as_f64())
            .collect();
        series.push(FrameSeries { key: key_from_json(s)?, agg, values });
    }
    let step_ns = body.get("step_seconds").and_then(|s| s.as_f64()).map(|s| (s * 1e9).round() as i64);
    Ok(Frame { times, series, step_ns })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::QueryArgs,
    }

    /// `--from -20m`, as the README documents it, is a time, not a flag
    /// (clap read it as an unknown argument `-2`; issue 46).
    #[test]
    fn a_relative_start_is_taken_as_a_value() {
        let cli = Cli::try_parse_from(["query", "up", "--from", "-20m", "--to", "-5m"]).unwrap();
        assert_eq!((cli.args.from.as_deref(), cli.args.to.as_deref()), (Some("-20m"), Some("-5m")));
    }
}
