//! `kansoku lab clickhouse`: the store at scale against the embedded store,
//! on the same data in the same run.
//!
//! The data is `kansoku lab synth`'s hosts at 100 ms (node_exporter's
//! metric set under realistic workloads), built into rounds first. Then:
//!
//! 1. **Embedded**: every round appended to a fresh `Store` (WAL, head,
//!    blocks and their 1 s and 1 min tiers); CPU of the appending thread per
//!    sample, bytes on disk per sample.
//! 2. **ClickHouse**: the same rounds written as a server writes them — one
//!    INSERT per second of rounds per host, rows in RowBinary — to a
//!    ClickHouse started for the run (`chstore::local`, one server, or
//!    `--clickhouse URL`); CPU of the writing thread per sample, of the
//!    ClickHouse server process from the first insert until every part is
//!    merged (inserts, views and merges: the cost to bring the data to
//!    rest), wall-clock throughput, and bytes on ClickHouse's disk per sample
//!    (the samples table, then the two tier tables) once merged.
//! 3. The range query of `lab store` (256 series of the span, 2,000 buckets
//!    of min/max/avg) from either store.
//!    And a PromQL range query over the same series (`sum by (host)
//!    (rate(…[1m]))` at 10 s steps).
//! 4. Per-CPU samples: synthetic 10 kHz streams, a batch per CPU per second,
//!    into the embedded event log and into ClickHouse (one INSERT per
//!    second of every CPU's batches); CPU and bytes an event.
//! 5. A profile of every event (the top table's and the flame graph's
//!    counts) from either store: the embedded store scans its batches,
//!    ClickHouse answers one GROUP BY.

use std::time::{Duration, Instant};

use anyhow::Context;
use clock::thread_cpu_ns;
use model::{Selector, SeriesKey, Timestamp};
use source::{EventSource, Shape};
use store::query::range;
use store::{Appender, Store};

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Synthetic hosts (16 cores each).
    #[arg(long, default_value_t = 2)]
    hosts: usize,
    /// Length of the data at 100 ms.
    #[arg(long, default_value = "10m", value_parser = model::parse_duration)]
    span: Duration,
    /// An existing ClickHouse (`clickhouse://HOST:PORT/DB`, one server; the
    /// database is dropped first); default: one started for the run.
    #[arg(long)]
    clickhouse: Option<String>,
    /// Per-CPU samples for the events part: CPUs at 10 kHz for this many
    /// seconds (0: none).
    #[arg(long, default_value_t = 10)]
    event_seconds: u32,
    /// CPUs of the events part.
    #[arg(long, default_value_t = 16)]
    event_cpus: u32,
    /// Rounds per INSERT (per host): 10 is a 1 s agent batch at 100 ms
    /// (`kansoku agent --batch`).
    #[arg(long, default_value_t = 10)]
    insert_rounds: usize,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, serde::Serialize)]
struct Report {
    machine: String,
    series: usize,
    samples: u64,
    embedded_ns_per_sample: f64,
    embedded_bytes_per_sample: f64,
    embedded_tier_bytes_per_sample: f64,
    clickhouse_version: String,
    writer_ns_per_sample: f64,
    clickhouse_server_ns_per_sample: f64,
    clickhouse_samples_per_second_wall: f64,
    clickhouse_bytes_per_sample: f64,
    clickhouse_tier_bytes_per_sample: f64,
    embedded_query_ms: f64,
    clickhouse_query_ms: f64,
    /// `sum by (host) (rate(node_cpu_seconds_total[1m]))` over the span at
    /// 10 s steps: ms, and ClickHouse's queries for it.
    embedded_promql_ms: f64,
    clickhouse_promql_ms: f64,
    clickhouse_promql_queries: u64,
    /// The same through a reader that asks for each series alone (how it
    /// read before `Source::read_many`).
    clickhouse_promql_per_series_ms: f64,
    events: u64,
    embedded_ns_per_event: f64,
    embedded_bytes_per_event: f64,
    writer_ns_per_event: f64,
    clickhouse_server_ns_per_event: f64,
    clickhouse_bytes_per_event: f64,
    /// A profile over every event (the top table's counts, the flame
    /// graph's), as the API computes them: ms.
    embedded_top_ms: f64,
    clickhouse_top_ms: f64,
    embedded_flame_ms: f64,
    clickhouse_flame_ms: f64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let span = args.span;
    let tmp = tempfile::tempdir()?;
    let mut r = Report { machine: crate::machine_line(), ..Report::default() };

    let interval = Duration::from_millis(100);
    let rounds = (span.as_nanos() / interval.as_nanos()) as usize;
    if rounds == 0 {
        anyhow::bail!("--span {span:?}: shorter than one 100 ms round, nothing to measure");
    }
    eprintln!("building {rounds} rounds of synthetic hosts ({span:?} at 100 ms) ...");
    let (keys, start, batches) = synth::rounds(args.hosts, rounds, interval);
    r.series = keys.len();
    r.samples = batches.iter().map(|b| b.points.len() as u64).sum();

    // 1. Embedded.
    let opts = crate::store_bench::bench_store_options();
    let embedded = Store::open(&tmp.path().join("embedded"), opts)?;
    let mut app = Appender::default();
    eprintln!("embedded: appending ...");
    let cpu0 = thread_cpu_ns();
    for b in &batches {
        embedded.append(&mut app, b)?;
    }
    embedded.flush()?;
    r.embedded_ns_per_sample = (thread_cpu_ns() - cpu0) as f64 / r.samples as f64;
    let du = embedded.disk_usage();
    r.embedded_bytes_per_sample = (du.block_bytes - du.tier_bytes) as f64 / du.block_samples.max(1) as f64;
    r.embedded_tier_bytes_per_sample = du.tier_bytes as f64 / du.block_samples.max(1) as f64;

    // 2. ClickHouse.
    let (_cluster, url) = match &args.clickhouse {
        Some(url) => (None, url.clone()),
        None => {
            eprintln!("clickhouse: starting one server ...");
            let c = chstore::local::LocalCluster::start(&tmp.path().join("clickhouse"), 1, 1)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let url = c.url("bench");
            (Some(c), url)
        }
    };
    let target = chstore::Target::parse(&url).map_err(|e| anyhow::anyhow!("--clickhouse: {e}"))?;
    let admin = chstore::Client::new(target.clone(), Duration::from_secs(600));
    admin.query(&format!("DROP DATABASE IF EXISTS {}", target.db))?;
    let writer = chstore::Writer::open(&url, None, Duration::from_secs(600))?;
    r.clickhouse_version = admin.query("SELECT version()")?.trim().to_owned();
    let server_pid = clickhouse_pid(&admin)?;
    let ids: Vec<u64> = keys.iter().map(chstore::series_id).collect();
    let ids = &ids;
    writer.write_series(&keys)?;
    // As a server writes: one INSERT per host per second of rounds.
    let per_host = keys.len() / args.hosts.max(1);
    eprintln!("clickhouse: inserting ...");
    let (cpu0, server0, t0) = (thread_cpu_ns(), crate::procs::process_cpu_seconds(server_pid), Instant::now());
    for chunk in batches.chunks(args.insert_rounds.max(1)) {
        for h in 0..args.hosts {
            let lo = (h * per_host) as u32;
            let hi = if h + 1 == args.hosts { u32::MAX } else { ((h + 1) * per_host) as u32 };
            let rows: Vec<(u64, u64, f64)> = chunk
                .iter()
                .flat_map(|b| {
                    b.points
                        .iter()
                        .filter(move |p| p.0 >= lo && p.0 < hi)
                        .map(move |p| (ids[p.0 as usize], b.time.as_nanos() as u64, p.1))
                })
                .collect();
            writer.write_samples(&rows)?;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    r.writer_ns_per_sample = (thread_cpu_ns() - cpu0) as f64 / r.samples as f64;
    r.clickhouse_samples_per_second_wall = r.samples as f64 / wall;
    for table in ["samples", "samples_1s", "samples_1m"] {
        merge(&admin, &target.db, table)?;
    }
    // The server's cost to bring the data to rest: inserts, views, and
    // every merge (those during the inserts and the final ones).
    let server = crate::procs::process_cpu_seconds(server_pid).zip(server0).map_or(f64::NAN, |(a, b)| a - b);
    r.clickhouse_server_ns_per_sample = server * 1e9 / r.samples as f64;
    let bytes = |table: &str| -> anyhow::Result<f64> {
        let sql = format!(
            "SELECT sum(bytes_on_disk) FROM system.parts WHERE active AND database = '{}' AND table = '{table}'",
            target.db
        );
        Ok(admin.query(&sql)?.trim().parse()?)
    };
    r.clickhouse_bytes_per_sample = bytes("samples")? / r.samples as f64;
    r.clickhouse_tier_bytes_per_sample = (bytes("samples_1s")? + bytes("samples_1m")?) / r.samples as f64;

    // 3. The range query from either store.
    let q = crate::store_bench::budget_query(start, span);
    let t = Instant::now();
    let a = range(&embedded, &q)?;
    r.embedded_query_ms = t.elapsed().as_secs_f64() * 1e3;
    let reader = writer.reader();
    let t = Instant::now();
    let b = range(&reader, &q)?;
    r.clickhouse_query_ms = t.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(a.series.len() == b.series.len(), "the stores answered with different series");
    let promql = r#"sum by (host) (rate(node_cpu_seconds_total{host=~"synth-00[01]"}[1m]))"#;
    // From a minute in (a rate's first window full), or halfway in a shorter span.
    let span_ns = span.as_nanos() as i64;
    let (from, to) = (start + (span_ns / 2).min(60_000_000_000), start + span_ns - 1);
    let t = Instant::now();
    let a = promql::Engine::new(&embedded).range(promql, from, to, 10_000_000_000)?;
    r.embedded_promql_ms = t.elapsed().as_secs_f64() * 1e3;
    let q0 = reader.queries.load(std::sync::atomic::Ordering::Relaxed);
    let t = Instant::now();
    let b = promql::Engine::new(&reader).range(promql, from, to, 10_000_000_000)?;
    r.clickhouse_promql_ms = t.elapsed().as_secs_f64() * 1e3;
    r.clickhouse_promql_queries = reader.queries.load(std::sync::atomic::Ordering::Relaxed) - q0;
    anyhow::ensure!(a.times == b.times, "the stores answered PromQL at different times");
    let t = Instant::now();
    promql::Engine::new(&PerSeries(&reader)).range(promql, from, to, 10_000_000_000)?;
    r.clickhouse_promql_per_series_ms = t.elapsed().as_secs_f64() * 1e3;

    // 4. Per-CPU samples: synthetic 10 kHz streams, one INSERT per second
    // of every CPU's batches (an agent's event batch).
    if args.event_seconds > 0 {
        let stream = SeriesKey::new("perf_cpu_clock", [("host", "synth-000"), ("boot", "b")]);
        let seconds = events(args.event_cpus, args.event_seconds, start);
        r.events = seconds.iter().flatten().map(|b| b.time.len() as u64).sum();
        let cpu0 = thread_cpu_ns();
        for second in &seconds {
            for b in second {
                embedded.events().append(&stream, &mut b.clone(), codec::events::Encoding::Fast)?;
            }
        }
        embedded.flush()?;
        r.embedded_ns_per_event = (thread_cpu_ns() - cpu0) as f64 / r.events as f64;
        r.embedded_bytes_per_event = embedded.events().usage().1 as f64 / r.events as f64;
        let (cpu0, server0) = (thread_cpu_ns(), crate::procs::process_cpu_seconds(server_pid));
        for second in &seconds {
            writer.write_events(&stream, second)?;
        }
        r.writer_ns_per_event = (thread_cpu_ns() - cpu0) as f64 / r.events as f64;
        let mut total = 0.0;
        for table in ["events", "stacks", "procs"] {
            merge(&admin, &target.db, table)?;
            total += bytes(table)?;
        }
        let server = crate::procs::process_cpu_seconds(server_pid).zip(server0).map_or(f64::NAN, |(a, b)| a - b);
        r.clickhouse_server_ns_per_event = server * 1e9 / r.events as f64;
        r.clickhouse_bytes_per_event = total / r.events as f64;
        // 5. Profiles over every event: counted by the embedded store's scan,
        // and by ClickHouse's GROUP BY.
        let q = source::EventQuery {
            streams: Selector::parse(r#"{__name__="perf_cpu_clock",host="synth-000"}"#)?,
            cpus: Vec::new(),
            from: start,
            to: i64::MAX,
        };
        let reader = writer.reader();
        for (shape, embedded_ms, clickhouse_ms) in [
            (Shape::Ips, &mut r.embedded_top_ms, &mut r.clickhouse_top_ms),
            (Shape::Stacks, &mut r.embedded_flame_ms, &mut r.clickhouse_flame_ms),
        ] {
            let t = Instant::now();
            let a = embedded.count(&q, None, shape, u64::MAX)?;
            *embedded_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let b = reader.count(&q, None, shape, u64::MAX)?;
            *clickhouse_ms = t.elapsed().as_secs_f64() * 1e3;
            anyhow::ensure!((&a.ips, &a.stacks) == (&b.ips, &b.stacks), "the stores counted {shape:?} differently");
        }
        result!(
            "{} per-CPU samples ({} CPUs at 10 kHz, {} s): embedded {:.0} ns, {:.2} B an event; \
             ClickHouse {:.0} ns in the writer + {:.0} ns in clickhouse-server, {:.2} B an event\n\
             profile of every event: top embedded {:.0} ms, ClickHouse {:.0} ms; flame embedded {:.0} ms, ClickHouse {:.0} ms",
            r.events,
            args.event_cpus,
            args.event_seconds,
            r.embedded_ns_per_event,
            r.embedded_bytes_per_event,
            r.writer_ns_per_event,
            r.clickhouse_server_ns_per_event,
            r.clickhouse_bytes_per_event,
            r.embedded_top_ms,
            r.clickhouse_top_ms,
            r.embedded_flame_ms,
            r.clickhouse_flame_ms,
        );
    }

    result!(
        "{} series, {} samples ({:?} at 100 ms); ClickHouse {}\n\
         embedded store: {:.0} ns CPU a sample; {:.3} B a sample on disk + {:.3} B tiers\n\
         ClickHouse: {:.0} ns CPU a sample in kansoku's writer + {:.0} ns in clickhouse-server ({:.1} M samples a second wall); \
         {:.3} B a sample on disk + {:.3} B tiers\n\
         range query, 256 series, 2,000 buckets: embedded {:.1} ms, ClickHouse {:.1} ms\n\
         PromQL sum by (host) (rate(…[1m])) over 256 series: embedded {:.1} ms, ClickHouse {:.1} ms ({} queries; \
         {:.1} ms a query per series)",
        r.series,
        r.samples,
        span,
        r.clickhouse_version,
        r.embedded_ns_per_sample,
        r.embedded_bytes_per_sample,
        r.embedded_tier_bytes_per_sample,
        r.writer_ns_per_sample,
        r.clickhouse_server_ns_per_sample,
        r.clickhouse_samples_per_second_wall / 1e6,
        r.clickhouse_bytes_per_sample,
        r.clickhouse_tier_bytes_per_sample,
        r.embedded_query_ms,
        r.clickhouse_query_ms,
        r.embedded_promql_ms,
        r.clickhouse_promql_ms,
        r.clickhouse_promql_queries,
        r.clickhouse_promql_per_series_ms,
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&r)?)?;
    }
    Ok(())
}

/// A source that reads each series alone (the trait's default
/// `read_many`): the baseline of one query for all.
#[derive(Debug)]
struct PerSeries<'a>(&'a chstore::Reader);

impl source::Source for PerSeries<'_> {
    fn series_limited(&self, sel: &Selector, limit: usize) -> (Vec<(u32, SeriesKey)>, usize) {
        self.0.series_limited(sel, limit)
    }

    fn read(&self, id: u32, from: Timestamp, to: Timestamp) -> (Vec<i64>, Vec<f64>) {
        self.0.read(id, from, to)
    }

    fn tiers(&self) -> Vec<i64> {
        self.0.tiers()
    }

    fn read_tier(&self, id: u32, res: i64, from: Timestamp, to: Timestamp) -> source::tier::Tier {
        self.0.read_tier(id, res, from, to)
    }
}

/// Merges `table` into one part per partition, as it will be at rest
/// (`OPTIMIZE … FINAL` does nothing while another merge of the partition
/// runs: it is repeated until the parts are merged).
fn merge(admin: &chstore::Client, db: &str, table: &str) -> anyhow::Result<()> {
    let sql = format!(
        "SELECT count() - uniqExact(partition) FROM system.parts WHERE active AND database = '{db}' AND table = '{table}'"
    );
    for _ in 0..50 {
        admin.query(&format!("OPTIMIZE TABLE {db}.{table} FINAL")).context("merging the parts")?;
        if admin.query(&sql)?.trim() == "0" {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    anyhow::bail!("{db}.{table}: parts still unmerged after 50 OPTIMIZE FINAL")
}

/// `seconds` seconds of `cpus` CPUs sampled at 10 kHz, one batch per CPU
/// per second: a few busy threads, instruction pointers drawn unevenly from
/// a few thousand, call chains from a few hundred.
fn events(cpus: u32, seconds: u32, start: i64) -> Vec<Vec<codec::events::EventBatch>> {
    let mut rng = fastrand::Rng::with_seed(7);
    let chains: Vec<Vec<u64>> =
        (0..300).map(|_| (0..rng.usize(4..16)).map(|_| 0x40_0000 + rng.u64(0..0x10_0000) * 16).collect()).collect();
    let procs = [(100u32, "postgres"), (200, "nginx"), (300, "kansoku"), (400, "java")];
    (0..seconds)
        .map(|s| {
            (0..cpus)
                .map(|cpu| {
                    let mut b = codec::events::EventBatch { cpu, ..Default::default() };
                    let t0 = start + s as i64 * 1_000_000_000;
                    for i in 0..10_000i64 {
                        let (pid, _) = procs[(rng.f64().powi(2) * procs.len() as f64) as usize];
                        let c = (rng.f64().powi(3) * chains.len() as f64) as usize;
                        b.time.push(t0 + i * 100_000 + rng.i64(0..2_000));
                        b.pid.push(pid);
                        b.tid.push(pid + rng.u32(0..4));
                        b.ip.push(chains[c][0]);
                        b.chain.push(b.stacks.len() as u32);
                        b.stacks.push(chains[c].clone());
                    }
                    dedup_stacks(&mut b);
                    b
                })
                .collect()
        })
        .collect()
}

/// One entry per distinct chain, as the sampler makes batches.
fn dedup_stacks(b: &mut codec::events::EventBatch) {
    let mut seen: std::collections::HashMap<Vec<u64>, u32> = std::collections::HashMap::new();
    let mut stacks = Vec::new();
    for c in &mut b.chain {
        let s = std::mem::take(&mut b.stacks[*c as usize]);
        let n = stacks.len() as u32;
        *c = *seen.entry(s.clone()).or_insert_with(|| {
            stacks.push(s);
            n
        });
    }
    b.stacks = stacks;
}

/// The process listening on the port of `admin`'s first address (it must
/// run on this machine): the listening socket's inode, then the process
/// holding it.
fn clickhouse_pid(admin: &chstore::Client) -> anyhow::Result<u32> {
    let port = admin.target().hosts[0].rsplit_once(':').and_then(|p| p.1.parse::<u16>().ok()).unwrap_or(0);
    let hex = format!(":{port:04X}");
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1].ends_with(&hex) && f[3] == "0A").then(|| f[9].to_owned())
        })
        .with_context(|| {
            format!("nothing on this machine listens on port {port}: ClickHouse's CPU cannot be measured")
        })?;
    let want = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        if fds.filter_map(Result::ok).any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == want))
        {
            return Ok(pid);
        }
    }
    anyhow::bail!("no process holds the socket listening on port {port}")
}
