//! `kansoku lab store`: the store's budgets, measured.
//!
//! 1. Series ingest: an hour of synthetic hosts at 100 ms (node_exporter's
//!    metric set, realistic workloads, `kansoku lab synth`'s generator),
//!    built into batches first, then appended; CPU time of the appending
//!    thread (WAL, head, block flushes) per sample.
//! 2. Range query: 256 series of that hour (9.2 M points) downsampled to
//!    2,000 buckets of min/max/avg; and the same over a fresh open (cold
//!    in-memory state, warm page cache).
//!    Then the same hour written late, in shuffled quarters (the third
//!    quarter first, then the second, the first, the last: three quarters
//!    of the samples older than their series' newest): CPU per sample, bytes
//!    per sample once compacted, and the range query, beside in order.
//! 3. Event ingest and size: a real `perf record -e cpu-clock -F 10000 -a`
//!    capture under a mixed stress-ng workload (or `--perf-script FILE`), in
//!    per-CPU batches of 100 ms, both encodings; bytes per event on disk beside
//!    perf.data's own size.
//! 4. Event queries: the capture replicated (shifted in time) to
//!    `--events` events, then top-N by ip and by pid over all and half of it.
//!
//! 5. Wide ingest: `--wide-series` series (default 110,000: what the SNMP
//!    poller stores at 10,000 targets) each taking a sample every 100 ms
//!    round for `--wide-rounds`, with the local fsync policy (1 s): CPU per
//!    sample with the block flushes such a head forces (every ~4 s), and
//!    the heap the store holds per series once each has 33 samples.
//!
//! Peers (Prometheus, VictoriaMetrics, InfluxDB) are measured on the same
//! data by `scripts/bench-store-peers.sh`, which exports it with `kansoku export`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clock::thread_cpu_ns;
use codec::events::{Column, Encoding, EventBatch};
use model::{Selector, SeriesKey};
use source::EventQuery;
use store::query::{RangeQuery, range};
use store::{Appender, Store};

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Synthetic hosts for the series part (16 cores each: 2 hosts have the
    /// 256 `node_cpu_seconds_total` series the query budget names).
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Length of the synthetic series data at 100 ms.
    #[arg(long, default_value = "1h", value_parser = model::parse_duration)]
    span: Duration,
    /// Events for the event-query part (the capture replicated).
    #[arg(long, default_value_t = 10_000_000)]
    events: usize,
    /// Use this `perf script -F cpu,pid,tid,time,ip --ns` output instead of recording.
    #[arg(long)]
    perf_script: Option<PathBuf>,
    /// Seconds of `perf record` when recording.
    #[arg(long, default_value_t = 10)]
    record_seconds: u32,
    /// Keep the data directory here (for `scripts/bench-store-peers.sh`);
    /// default: a temporary directory, removed at the end.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Series of the wide-ingest part (0: skip it).
    #[arg(long, default_value_t = 110_000)]
    wide_series: u32,
    /// 100 ms rounds of the wide-ingest part.
    #[arg(long, default_value_t = 190)]
    wide_rounds: u32,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Measure nothing: report where the bytes of this existing data
    /// directory go (by kind of series, by part of the directory, the
    /// costliest names), from its block indexes. Works while a server
    /// writes it.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// With --report: how many of the costliest series names to list.
    #[arg(long, default_value_t = 15)]
    top: usize,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub machine: String,
    pub series: usize,
    pub samples: u64,
    pub ingest_samples_per_cpu_second: f64,
    pub ingest_ns_per_sample: f64,
    pub block_bytes_per_sample: f64,
    pub query_points: u64,
    pub query_buckets: usize,
    pub query_ms: Vec<f64>,
    pub query_cold_ms: f64,
    /// The same query with 1.8 s buckets, which no tier tiles: raw samples.
    pub query_raw_ms: Vec<f64>,
    pub tier_bytes_per_sample: f64,
    /// The same samples in shuffled quarters (issue 49).
    pub late_ns_per_sample: f64,
    pub late_samples: u64,
    pub late_block_bytes_per_sample: f64,
    pub late_tier_bytes_per_sample: f64,
    pub late_query_ms: Vec<f64>,
    pub perf_events: u64,
    pub perf_data_bytes_per_event: f64,
    pub event_bytes_per_event_fast: f64,
    pub event_bytes_per_event_compact: f64,
    pub event_encode_per_cpu_second_fast: f64,
    pub event_encode_per_cpu_second_compact: f64,
    pub event_append_encoded_per_cpu_second: f64,
    pub query_events: u64,
    pub top_ip_ms: Vec<f64>,
    pub top_pid_ms: Vec<f64>,
    pub top_ip_half_ms: Vec<f64>,
    pub wide_series: u32,
    pub wide_ns_per_sample: f64,
    /// Heap held per series with 33 samples each (one chunk sealed).
    pub wide_heap_bytes_per_series: f64,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Part 2b: `batches` appended in shuffled quarters (3, 2, 1, 4) to a
/// fresh store under `dir`, flushed and compacted; the range query `q`
/// answered as `want` (what the in-order store answered).
fn late_ingest(
    r: &mut Report,
    batches: &[model::Batch],
    dir: &std::path::Path,
    q: &RangeQuery,
    want: &store::query::Frame,
) -> anyhow::Result<()> {
    let store = Store::open(&dir.join("late"), crate::store_bench::bench_store_options())?;
    let mut app = Appender::default();
    let quarter = batches.len().div_ceil(4);
    // Every series declared first: the quarter holding the definitions
    // comes third.
    let mut defs = model::Batch::new(batches[0].time);
    defs.defs.clone_from(&batches[0].defs);
    store.append(&mut app, &defs)?;
    eprintln!("appending the same rounds in shuffled quarters ...");
    let cpu0 = thread_cpu_ns();
    for part in [2, 1, 0, 3] {
        for b in batches.iter().skip(part * quarter).take(quarter) {
            store.append(&mut app, b)?;
        }
    }
    store.flush()?;
    while store.compact()? > 0 {}
    let cpu = (thread_cpu_ns() - cpu0) as f64 / 1e9;
    let samples = store.stats().samples_appended.load(std::sync::atomic::Ordering::Relaxed);
    r.late_samples = store.stats().late_samples.load(std::sync::atomic::Ordering::Relaxed);
    r.late_ns_per_sample = cpu * 1e9 / samples as f64;
    let du = store.disk_usage();
    r.late_block_bytes_per_sample = (du.block_bytes - du.tier_bytes) as f64 / du.block_samples.max(1) as f64;
    r.late_tier_bytes_per_sample = du.tier_bytes as f64 / du.block_samples.max(1) as f64;
    for _ in 0..21 {
        let t = Instant::now();
        let f = range(&store, q)?;
        r.late_query_ms.push(ms(t.elapsed()));
        let close = |a: &Option<f64>, b: &Option<f64>| match (a, b) {
            (Some(a), Some(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
            (a, b) => a.is_none() && b.is_none(),
        };
        let same = f.times == want.times
            && f.series.len() == want.series.len()
            && f.series.iter().zip(&want.series).all(|(a, b)| {
                a.key == b.key
                    && a.values.len() == b.values.len()
                    && a.values.iter().zip(&b.values).all(|(x, y)| close(x, y))
            });
        if !same {
            bail!("BUG: the range query over the late store does not answer as over the in-order one");
        }
    }
    result!(
        "late ingest: {samples} samples, {} late, in shuffled quarters: {:.0} ns each (compaction included; in order {:.0}); \
         {:.3} B/sample raw + {:.3} tiers once compacted (in order {:.3} + {:.3}); range query median {:.1} ms (in order {:.1})",
        r.late_samples,
        r.late_ns_per_sample,
        r.ingest_ns_per_sample,
        r.late_block_bytes_per_sample,
        r.late_tier_bytes_per_sample,
        r.block_bytes_per_sample,
        r.tier_bytes_per_sample,
        median(&r.late_query_ms),
        median(&r.query_ms)
    );
    Ok(())
}

/// Part 5: `n` SNMP-like series, a sample each per 100 ms round, appended
/// as the poller's writer does: (ns per sample, flushes included; heap
/// bytes per series after [`HEAP_AT`] rounds: key, index, a sealed chunk
/// and a raw sample, before the first flush).
const HEAP_AT: u32 = 33;

fn wide_ingest(n: u32, rounds: u32) -> anyhow::Result<(f64, f64)> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), store::Options::default())?;
    let mut app = Appender::with_fsync(store::FsyncPolicy::Every(Duration::from_secs(1)));
    let t0 = model::Timestamp::now().as_nanos() / 1_000_000_000 * 1_000_000_000;
    let heap0 = store::heap::allocated_bytes();
    let (mut cpu, mut heap) = (0, f64::NAN);
    for i in 0..rounds {
        let mut b = model::Batch::new(model::Timestamp(t0 + i64::from(i) * 100_000_000));
        if i == 0 {
            b.defs = (0..n)
                .map(|k| {
                    let target = format!("127.1.{}.{}:1161", k / 11 / 250, k / 11 % 250 + 1);
                    (k, SeriesKey::new("snmp_value", [("target", target), ("oid", format!("1.3.6.1.2.1.{}", k % 11))]))
                })
                .collect();
        }
        // Octet counters climbing at their own rates, gauges wandering.
        b.points = (0..n)
            .map(|k| (k, if k % 2 == 0 { f64::from(i) * f64::from(k % 997 + 1) } else { f64::from((i + k) % 50) }))
            .collect();
        let c = thread_cpu_ns();
        store.append(&mut app, &b)?;
        cpu += thread_cpu_ns() - c;
        if i + 1 == rounds.min(HEAP_AT) {
            drop(b);
            heap = match (heap0, store::heap::allocated_bytes()) {
                (Some(a), Some(b)) => b.saturating_sub(a) as f64 / f64::from(n),
                _ => f64::NAN,
            };
        }
    }
    Ok((cpu as f64 / (f64::from(n) * f64::from(rounds)), heap))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(dir) = &args.report {
        let u = crate::storage::usage::usage(dir, args.top)?;
        crate::storage::usage::print(dir, &u);
        if let Some(path) = &args.json {
            std::fs::write(path, serde_json::to_vec_pretty(&u)?)
                .with_context(|| format!("write {}", path.display()))?;
        }
        return Ok(());
    }
    let span = args.span;
    let tmp = tempfile::tempdir()?;
    let data = args.data.clone().unwrap_or_else(|| tmp.path().join("data"));
    if data.exists() {
        bail!("{} exists; the benchmark writes a fresh data directory", data.display());
    }
    let opts = crate::store_bench::bench_store_options();
    let mut r = Report { machine: crate::machine_line(), ..Report::default() };

    // 1. Series ingest.
    let interval = Duration::from_millis(100);
    let rounds = (span.as_nanos() / interval.as_nanos()) as usize;
    if rounds == 0 {
        bail!("--span {span:?}: shorter than one 100 ms round, nothing to measure");
    }
    eprintln!("building {rounds} rounds of synthetic hosts ({span:?} at 100 ms) ...");
    let (keys, start, batches) = synth::rounds(args.hosts, rounds, interval);
    r.series = keys.len();
    let store = Store::open(&data, opts.clone())?;
    let mut app = Appender::default();
    eprintln!("appending ...");
    let cpu0 = thread_cpu_ns();
    for b in &batches {
        store.append(&mut app, b)?;
    }
    store.flush()?;
    let cpu = (thread_cpu_ns() - cpu0) as f64 / 1e9;
    r.samples = store.stats().samples_appended.load(std::sync::atomic::Ordering::Relaxed);
    r.ingest_samples_per_cpu_second = r.samples as f64 / cpu;
    r.ingest_ns_per_sample = cpu * 1e9 / r.samples as f64;
    let du = store.disk_usage();
    r.block_bytes_per_sample = (du.block_bytes - du.tier_bytes) as f64 / du.block_samples.max(1) as f64;
    r.tier_bytes_per_sample = du.tier_bytes as f64 / du.block_samples.max(1) as f64;
    result!(
        "ingest: {} samples, {:.1} M samples per CPU-second ({:.0} ns each, block and tier writing included); \
         {:.3} B/sample raw + {:.3} tiers (1 s and 1 min)",
        r.samples,
        r.ingest_samples_per_cpu_second / 1e6,
        r.ingest_ns_per_sample,
        r.block_bytes_per_sample,
        r.tier_bytes_per_sample
    );

    // 2. Range query: 256 series, 2,000 buckets, min/max/avg.
    let q = crate::store_bench::budget_query(start, span);
    let cold = Store::open_read_only(&data)?;
    let t = Instant::now();
    let frame = range(&cold, &q)?;
    r.query_cold_ms = ms(t.elapsed());
    drop(cold);
    r.query_buckets = frame.times.len();
    let n_series = frame.series.len() / 3;
    r.query_points = store.series(&q.selector).iter().map(|(id, _)| store.read(*id, q.from, q.to).0.len() as u64).sum();
    for _ in 0..21 {
        let t = Instant::now();
        let f = range(&store, &q)?;
        r.query_ms.push(ms(t.elapsed()));
        assert_eq!(f.series.len(), frame.series.len());
    }
    let raw_q = RangeQuery { points: None, step_ns: Some(1_800_000_000), ..q.clone() };
    for _ in 0..11 {
        let t = Instant::now();
        range(&store, &raw_q)?;
        r.query_raw_ms.push(ms(t.elapsed()));
    }
    result!(
        "range query: {n_series} series, {} points -> {} buckets x min/max/avg: median {:.1} ms from the 1 s tier \
         (first, fresh open: {:.1} ms); {:.1} ms from raw samples (1.8 s buckets)",
        r.query_points,
        r.query_buckets,
        median(&r.query_ms),
        r.query_cold_ms,
        median(&r.query_raw_ms)
    );

    // 2b. The same hour late, in shuffled quarters.
    late_ingest(&mut r, &batches, tmp.path(), &q, &frame)?;
    drop(batches);

    // 5. Wide ingest (before the events: it needs no capture).
    if args.wide_series > 0 {
        eprintln!("wide ingest: {} series x {} rounds at 100 ms ...", args.wide_series, args.wide_rounds);
        (r.wide_ns_per_sample, r.wide_heap_bytes_per_series) = wide_ingest(args.wide_series, args.wide_rounds.max(1))?;
        r.wide_series = args.wide_series;
        result!(
            "wide ingest: {:.0} ns a sample (block flushes included), {:.0} B of heap a series",
            r.wide_ns_per_sample,
            r.wide_heap_bytes_per_series
        );
    }

    // 3. Events: a real capture.
    let text = match &args.perf_script {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
        None => {
            let secs = args.record_seconds.to_string();
            eprintln!(
                "recording {secs} s of perf record -e cpu-clock -F 10000 -a under stress-ng (cpu, matrix, hdd) ..."
            );
            let text = perf::script::record(
                tmp.path(),
                10_000,
                &["stress-ng", "--cpu", "1", "--matrix", "1", "--hdd", "1", "--timeout", &format!("{secs}s"), "-q"],
            )?;
            r.perf_data_bytes_per_event =
                std::fs::metadata(tmp.path().join("perf.data"))?.len() as f64 / text.lines().count().max(1) as f64;
            text
        }
    };
    // perf's clock is CLOCK_MONOTONIC: move the capture to begin at `start`.
    let mut capture = perf::script::parse(&text, 0)?;
    let first = capture.iter().map(|b| b.time[0]).min().unwrap_or(0);
    for b in &mut capture {
        b.time.iter_mut().for_each(|t| *t += start - first);
    }
    r.perf_events = capture.iter().map(|b| b.len() as u64).sum();
    if r.perf_events == 0 {
        bail!("the perf capture holds no samples");
    }
    // Batches of 100 ms per CPU, as an agent sends them.
    let mut pieces: Vec<EventBatch> = Vec::new();
    for b in &capture {
        for mut piece in perf::script::pieces(b, 100_000_000, codec::events::MAX_EVENTS) {
            piece.validate()?;
            pieces.push(piece);
        }
    }
    let mut out = Vec::new();
    for (enc, size, speed) in [
        (Encoding::Fast, &mut r.event_bytes_per_event_fast, &mut r.event_encode_per_cpu_second_fast),
        (Encoding::Compact, &mut r.event_bytes_per_event_compact, &mut r.event_encode_per_cpu_second_compact),
    ] {
        let mut bytes = 0;
        let cpu0 = thread_cpu_ns();
        for p in &pieces {
            out.clear();
            p.encode(&mut out, enc);
            bytes += out.len();
        }
        *speed = r.perf_events as f64 / ((thread_cpu_ns() - cpu0) as f64 / 1e9);
        *size = bytes as f64 / r.perf_events as f64;
    }
    result!(
        "events: {} from perf, {:.2} B/event fast ({:.1} M/s encode), {:.2} compact ({:.1} M/s); perf.data {:.1} B/event",
        r.perf_events,
        r.event_bytes_per_event_fast,
        r.event_encode_per_cpu_second_fast / 1e6,
        r.event_bytes_per_event_compact,
        r.event_encode_per_cpu_second_compact / 1e6,
        r.perf_data_bytes_per_event
    );

    // 4. Replicate to --events (shifted by the capture's span) and query.
    let capture_span = capture.iter().map(|b| b.time[b.len() - 1] - b.time[0]).max().unwrap_or(0) + 1;
    let stream = SeriesKey::new("perf_cpu_clock", [("host", "bench")]);
    let copies = args.events.div_ceil(r.perf_events as usize);
    eprintln!("encoding {copies} time-shifted copies of the capture ({} events) ...", copies as u64 * r.perf_events);
    let mut shifted = Vec::with_capacity(copies * pieces.len());
    for c in 0..copies as i64 {
        for p in &pieces {
            let mut p = p.clone();
            p.time.iter_mut().for_each(|t| *t += c * capture_span);
            p.validate()?;
            let mut out = Vec::new();
            p.encode(&mut out, Encoding::Fast);
            shifted.push(out);
        }
    }
    // What a server does with an agent's batch: decode it in full to check
    // it, then write it.
    let mut appended = 0u64;
    let cpu0 = thread_cpu_ns();
    for out in &shifted {
        appended += store.events().append_encoded(&stream, out)? as u64;
    }
    r.event_append_encoded_per_cpu_second = appended as f64 / ((thread_cpu_ns() - cpu0) as f64 / 1e9);
    drop(shifted);
    r.query_events = appended;

    let whole = EventQuery { streams: Selector::all(), cpus: vec![], from: i64::MIN, to: i64::MAX };
    let lo = capture.iter().map(|b| b.time[0]).min().unwrap_or(start);
    let hi = lo + copies as i64 * capture_span;
    let half = EventQuery { from: lo + (hi - lo) / 4, to: hi - (hi - lo) / 4, ..whole.clone() };
    for _ in 0..5 {
        for (q, col, out) in [
            (&whole, Column::Ip, &mut r.top_ip_ms),
            (&whole, Column::Pid, &mut r.top_pid_ms),
            (&half, Column::Ip, &mut r.top_ip_half_ms),
        ] {
            let t = Instant::now();
            let top = store.events().top(q, col, 20);
            out.push(ms(t.elapsed()));
            if top.corrupt > 0 || (q.from == i64::MIN && top.total != appended) {
                bail!("event query counted {} of {appended} events ({} corrupt)", top.total, top.corrupt);
            }
        }
    }
    result!(
        "event queries over {appended} events: top 20 by ip {:.0} ms, by pid {:.0} ms, by ip over the middle half {:.0} ms (medians); append_encoded {:.1} M events per CPU-second",
        median(&r.top_ip_ms),
        median(&r.top_pid_ms),
        median(&r.top_ip_half_ms),
        r.event_append_encoded_per_cpu_second / 1e6
    );
    store.close()?;
    let json = serde_json::to_string_pretty(&r)?;
    if let Some(p) = &args.json {
        std::fs::write(p, &json).with_context(|| format!("write {}", p.display()))?;
    }
    result!("{json}");
    Ok(())
}

/// The store the benchmarks write the synthetic rounds into: no fsync, no
/// retention, the 1 s and 1 min tiers.
pub(crate) fn bench_store_options() -> store::Options {
    store::Options {
        fsync: store::FsyncPolicy::Never,
        retention: store::Retention { max_age: None, budget: store::DiskBudget::Unlimited },
        tiers: vec![store::tier::SECOND, store::tier::MINUTE],
        ..store::Options::default()
    }
}

/// The range query the budget names: the 256 `node_cpu_seconds_total`
/// series of two synthetic hosts over `span` from `start`, 2,000 buckets of
/// min/max/avg.
pub(crate) fn budget_query(start: i64, span: Duration) -> store::query::RangeQuery {
    use source::Agg;
    store::query::RangeQuery {
        selector: model::Selector::parse(r#"node_cpu_seconds_total{host=~"synth-00[01]"}"#).expect("a valid selector"),
        from: model::Timestamp(start),
        to: model::Timestamp(start + span.as_nanos() as i64 - 1),
        step_ns: None,
        points: Some(2000),
        rate: false,
        aggs: vec![Agg::Min, Agg::Max, Agg::Avg],
        group: None,
    }
}
