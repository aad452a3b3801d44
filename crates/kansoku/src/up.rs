//! `kansoku up`, `snmp`, `server` and `lab synth`: flags to the producers
//! they run (host collector, SNMP poller, per-CPU sampler, agents' ingest,
//! synthetic hosts) over one store, wired by `node::jobs`, and the HTTP API on
//! a small tokio runtime. Ctrl-C or SIGTERM stops sampling, drains the
//! queues, and flushes the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use collect::{Collector, CollectorConfig};
use store::{DiskBudget, FsyncPolicy, Options, Retention, Store};

use crate::args::{PerfArgs, Tiers, TraceArgs, hostname, parse_budget, parse_dur, parse_interval, parse_tiers};

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Value of the host label (default: this machine's hostname).
    #[arg(long)]
    host: Option<String>,
    /// Also poll the SNMP targets in this file (see `kansoku snmp --help`),
    /// at --interval.
    #[arg(long, value_name = "FILE")]
    snmp_targets: Option<PathBuf>,
    #[command(flatten)]
    perf: PerfArgs,
    #[command(flatten)]
    trace: TraceArgs,
    #[command(flatten)]
    fragmentation: FragmentationArgs,
    #[command(flatten)]
    processes: crate::args::ProcessArgs,
}

/// Where file systems put their files' blocks (seed 001's DAV).
#[derive(clap::Args, Debug)]
pub struct FragmentationArgs {
    /// Measure fragmentation under these paths (comma-separated): every
    /// regular file's extents (FIEMAP) and the file system's free space
    /// (GETFSMAP), as `kansoku_fragmentation_*` series and a map the
    /// dashboard draws (docs/fragmentation.md). Off by default.
    #[arg(long, value_delimiter = ',', value_name = "PATH")]
    fragmentation: Vec<PathBuf>,
    /// How often the paths are scanned (the first scan runs at start).
    #[arg(long, default_value = "10m", value_parser = parse_dur)]
    fragmentation_interval: Duration,
    /// Maps kept in DATA/extents, oldest removed first (144: a day at 10 min).
    #[arg(long, default_value_t = 144)]
    fragmentation_keep: usize,
}

impl FragmentationArgs {
    fn collector(&self, host: &str, data: &std::path::Path) -> anyhow::Result<Option<extents::Collector>> {
        if self.fragmentation.is_empty() {
            return Ok(None);
        }
        if self.fragmentation_interval < Duration::from_secs(1) {
            bail!(
                "--fragmentation-interval {:?}: at least 1s (a scan reads every file's map)",
                self.fragmentation_interval
            );
        }
        for p in &self.fragmentation {
            std::fs::metadata(p).with_context(|| format!("--fragmentation {}", p.display()))?;
        }
        let snapshots = extents::Snapshots::open(data.join("extents"), self.fragmentation_keep);
        Ok(Some(extents::Collector::new(
            self.fragmentation.clone(),
            self.fragmentation_interval,
            host.to_owned(),
            Some(snapshots),
        )))
    }
}

#[derive(clap::Args, Debug)]
pub struct SnmpArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Targets file: one `address[:port] [v1|v2c] [community=C] [oids=A,B] [name=N] [label=value]`
    /// per line, or TOML (`*.toml`, `[[target]]` tables). See docs/snmp.md.
    #[arg(long, value_name = "FILE")]
    targets: PathBuf,
    /// Time slice after each boundary in which answers count (default: 90 % of --interval).
    #[arg(long, value_parser = parse_dur)]
    timeout: Option<Duration>,
}

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    ingest: crate::cluster::IngestArgs,
    /// Also poll the SNMP targets in this file (see `kansoku snmp --help`),
    /// at --interval.
    #[arg(long, value_name = "FILE")]
    snmp_targets: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    synth: synth::Args,
}

#[derive(clap::Args, Debug)]
struct CommonArgs {
    /// Data directory (created if new).
    #[arg(long, default_value = "kansoku-data")]
    data: PathBuf,
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// Sampling interval, 10ms to 60s; samples are taken on its wall-clock boundaries.
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    interval: Duration,
    /// WAL fsync policy for what clients write (/write, remote write, agents):
    /// always (nothing acknowledged is lost, even on power loss), never, or
    /// a duration (power loss may lose up to that window).
    #[arg(long, default_value = "always")]
    fsync: FsyncPolicy,
    /// WAL fsync policy for this host's own samples (collector, tracer, SNMP,
    /// rules): `kill -9` loses none of them whatever the policy; a power
    /// loss, up to this window. The default saves 9 of 10 fsyncs at 100 ms
    /// (see docs/benchmarks.md); `always` fsyncs every round.
    #[arg(long, default_value = "1s")]
    local_fsync: FsyncPolicy,
    /// Head time span written out as one compressed block.
    #[arg(long, default_value = "5m", value_parser = parse_dur)]
    block_duration: Duration,
    /// Remove data older than this (e.g. 30d); default: keep until the disk
    /// budget. With --store clickhouse://…: whole days older than this are
    /// dropped from ClickHouse too (a partition a day and table).
    #[arg(long, value_parser = parse_dur)]
    retention_time: Option<Duration>,
    /// Most disk the data directory may use, oldest data removed first:
    /// bytes with an optional K/M/G/T suffix (powers of 1024), a percentage
    /// of its filesystem (default 50%), or "unlimited".
    #[arg(long, default_value = "50%", value_parser = parse_budget)]
    retention_size: DiskBudget,
    /// Downsampled tiers written with each block: 1m (default), 1s, both
    /// (1s,1m) or none. A 1 s tier makes hour-long charts ~3x faster and
    /// costs ~75 % more disk for 100 ms host metrics.
    #[arg(long, default_value = "1m", value_parser = parse_tiers)]
    tiers: Tiers,
    /// Most HTTP connections served at once; more wait in the backlog.
    #[arg(long, default_value_t = 512)]
    http_max_connections: usize,
    /// An HTTP client that does not send a request's headers within this
    /// long (idle keep-alives too) is closed.
    #[arg(long, default_value = "10s", value_parser = parse_dur)]
    http_header_timeout: Duration,
    /// An HTTP request body that sends nothing for this long is cut off and
    /// its connection closed (a trickling body held a connection slot).
    #[arg(long, default_value = "10s", value_parser = parse_dur)]
    http_body_timeout: Duration,
    /// Most series the store holds; a sample of a series past it is refused
    /// and counted (store.series_limit_dropped).
    #[arg(long, default_value_t = store::SERIES_MAX_DEFAULT)]
    max_series: usize,
    /// Prometheus rule files (recording and alerting rules) to evaluate;
    /// repeat for several. Groups without an interval use --interval. See
    /// docs/rules.md.
    #[arg(long = "rules", value_name = "FILE")]
    rules: Vec<PathBuf>,
    /// Send alerts to this Alertmanager (its base URL, e.g.
    /// http://127.0.0.1:9093), through its v2 API.
    #[arg(long, value_name = "URL")]
    alertmanager: Option<String>,
}

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let host = args.host.clone().unwrap_or_else(hostname);
    let snmp = args.snmp_targets.as_deref().map(|t| (t, None));
    let sampler = args.perf.open_sampler(&host, &args.common.data)?;
    let frag = args.fragmentation.collector(&host, &args.common.data)?;
    let procs = args.processes.start(&host);
    let tracer = args.trace.start(&host);
    serve(&args.common, Some(host), snmp, None, None, (sampler, tracer, frag, procs))
}

pub fn run_snmp(args: SnmpArgs) -> anyhow::Result<()> {
    serve(&args.common, None, Some((&args.targets, args.timeout)), None, None, (None, None, None, None))
}

/// `kansoku server`: the store, API and dashboard, and the agents' ingest.
pub fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let ingest = crate::cluster::ingest_setup(&args.ingest)?;
    let snmp = args.snmp_targets.as_deref().map(|t| (t, None));
    serve(&args.common, None, snmp, None, Some(ingest), (None, None, None, None))
}

/// `kansoku lab synth`: synthetic hosts through the same store path as `up`.
pub fn run_synth(args: SynthArgs) -> anyhow::Result<()> {
    if args.synth.hosts == 0 || args.synth.cores == 0 {
        bail!("--hosts and --cores must be at least 1");
    }
    let synth = synth::Synth::new(&args.synth, args.common.interval);
    tracing::info!(
        "synth: {} hosts x {} cores, {} series, {:.0} samples/s",
        args.synth.hosts,
        args.synth.cores,
        synth.n_series(),
        f64::from(synth.n_series()) / args.common.interval.as_secs_f64()
    );
    serve(&args.common, None, None, Some(synth), None, (None, None, None, None))
}

fn serve(
    args: &CommonArgs,
    host: Option<String>,
    snmp: Option<(&std::path::Path, Option<Duration>)>,
    synth: Option<synth::Synth>,
    ingest: Option<crate::cluster::IngestSetup>,
    (sampler, tracer, frag, procs): (
        Option<perf::sampler::Sampler>,
        Option<trace::Tracer>,
        Option<extents::Collector>,
        Option<tasks::Collector>,
    ),
) -> anyhow::Result<()> {
    let addr: SocketAddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?}: expected IP:PORT, e.g. 127.0.0.1:7070", args.listen))?;
    // Read the targets and bind before touching the data directory: a bad
    // file or a port in use changes nothing.
    let targets = match snmp {
        Some((path, _)) => Some(snmp::targets::load(path)?),
        None => None,
    };
    let rule_files =
        args.rules.iter().map(|f| rules::load(f).map(|r| (f.clone(), r))).collect::<Result<Vec<_>, _>>()?;
    if args.alertmanager.is_some() && rule_files.is_empty() {
        bail!("--alertmanager without --rules: give the rule files whose alerts it should get");
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!("listen {addr}: address in use; is another kansoku running? choose another with --listen")
        } else {
            anyhow::anyhow!("listen {addr}: {e}")
        }
    })?;
    listener.set_nonblocking(true).context("listen socket")?;
    let local = listener.local_addr().context("listen socket")?;

    let poller = match (targets, snmp) {
        (Some(targets), Some((_, timeout))) => {
            let n = targets.len();
            tracing::info!("snmp: discovering {n} targets");
            let (plan, failures) = snmp::plan(targets, Duration::from_secs(1), 2);
            for f in &failures {
                tracing::warn!(
                    "snmp: {}: discovery failed ({}); polling sysUpTime.0 and laLoad.1 until a retry (every 60 s) succeeds",
                    f.target,
                    f.reason
                );
            }
            let mut cfg = snmp::PollerConfig::new(args.interval);
            if let Some(t) = timeout {
                if t > args.interval {
                    bail!(
                        "--timeout {t:?} exceeds --interval {:?}: answers must count within their interval",
                        args.interval
                    );
                }
                cfg.timeout = t;
            }
            let poller = snmp::Poller::new(cfg, plan).context("snmp: open UDP sockets")?;
            tracing::info!("snmp: polling {n} targets ({} series) every {:?}", poller.n_series(), args.interval);
            Some(poller)
        }
        _ => None,
    };

    let opts = Options {
        fsync: args.fsync,
        block_duration: args.block_duration,
        retention: Retention { max_age: args.retention_time, budget: args.retention_size },
        tiers: args.tiers.0.clone(),
        series_max: args.max_series,
        ..Options::default()
    };
    let store = Arc::new(Store::open(&args.data, opts).with_context(|| format!("open store {}", args.data.display()))?);
    // Older blocks merge into hour-long ones in the background.
    store.spawn_compactor().context("start the store's compactor")?;
    let mut state = api::ApiState::new(Arc::clone(&store));
    state.interval = Some(args.interval);
    let mut jobs = node::jobs::Jobs::new(Arc::clone(&store), state.live.clone()).with_fsync(args.local_fsync);
    // Every panic of every thread, and the writers' batches a panic cost.
    let panicked = Arc::clone(&jobs.panicked);
    state.reports.push(api::Report(
        "threads",
        Arc::new(move || {
            let mut f = node::supervise::report();
            f.push(model::report::Figure::counter(
                "panicked_appends",
                panicked.load(std::sync::atomic::Ordering::Relaxed),
            ));
            f
        }),
    ));
    if let Some(host) = &host {
        let collector =
            Collector::new(&CollectorConfig { interval: args.interval, host: host.clone(), root: "/".into() });
        state.collector = Some(collector.stats());
        jobs.spawn_inline("collector", move |sink, stop| collector.run(sink, stop))?;
    }
    if let Some(tracer) = tracer {
        let stats = tracer.stats();
        state.reports.push(api::Report("trace", Arc::new(move || stats.report().to_vec())));
        jobs.spawn("trace", move |tx, stop| tracer.run(tx, stop))?;
    }
    if let Some(procs) = procs {
        let stats = procs.stats();
        state.reports.push(api::Report("processes", Arc::new(move || stats.report())));
        jobs.spawn("processes", move |tx, stop| procs.run(tx, stop))?;
    }
    if let Some(frag) = frag {
        state.fragmentation = frag.snapshots.clone().map(|s| (s, frag.paths.clone()));
        let stats = frag.stats();
        state.reports.push(api::Report("fragmentation", Arc::new(move || stats.report())));
        tracing::info!(
            "fragmentation: scanning {} every {:?}",
            frag.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            frag.interval
        );
        jobs.spawn("fragmentation", move |tx, stop| frag.run(tx, stop))?;
    }
    if let Some(poller) = poller {
        state.snmp = Some(poller.stats());
        state.snmp_views = Some(poller.views());
        jobs.spawn_inline("snmp-poller", move |sink, stop| poller.run(sink, stop))?;
    }

    let ingest = match ingest {
        Some(mut setup) => {
            state.tokens = setup.config.tokens.clone();
            let symbols = symstore::SymStore::open(&args.data, setup.symbols_budget)
                .with_context(|| format!("open the symbol store in {}", args.data.display()))?;
            let symbols = Arc::new(symbols);
            if let Some(ch) = &setup.config.clickhouse {
                // Symbol sources one server received name frames on all.
                symbols.set_shared(Arc::new(ingest::SharedSymbols(Arc::clone(ch))));
            }
            setup.config.symbols = Some(Arc::clone(&symbols));
            state.symbols = Some(Arc::clone(&symbols));
            let report = Arc::clone(&symbols);
            state.reports.push(api::Report("symbols", Arc::new(move || report.report())));
            let every = args.interval.max(Duration::from_secs(1));
            jobs.spawn("symbols", move |tx, stop| {
                node::jobs::report_series("kansoku_symbols", every, || symbols.report(), &tx, &stop);
            })?;
            if let Some(ch) = setup.config.clickhouse.clone() {
                // Queries read the agents' series from ClickHouse, and this
                // server's own (its ingest, the agents' clocks) from here;
                // profiles count the agents' events in ClickHouse.
                let reader = Arc::new(ch.reader());
                state.reader = Arc::new(chstore::Both(Arc::clone(&store), Arc::clone(&reader)));
                state.events = Arc::new(chstore::Both(Arc::clone(&store), Arc::clone(&reader)));
                state.live_delay = Some(setup.live_delay);
                let report = Arc::clone(&ch);
                state.reports.push(api::Report(
                    "clickhouse",
                    Arc::new(move || report.report().into_iter().chain(reader.report()).collect()),
                ));
                // --retention-time: whole days older than it are dropped
                // from ClickHouse (checked every 10 minutes, by every server:
                // a drop is idempotent).
                if let Some(keep) = args.retention_time {
                    let ch = Arc::clone(&ch);
                    jobs.spawn("clickhouse-retention", move |_, stop| {
                        let missed = std::sync::atomic::AtomicU64::new(0);
                        clock::schedule::every(600_000_000_000, &stop, &missed, |t| {
                            let cutoff = (t as u64).saturating_sub(keep.as_nanos() as u64);
                            if let Err(e) = ch.drop_before(cutoff, Duration::from_secs(60)) {
                                tracing::warn!("clickhouse retention: {e}");
                            }
                            true
                        });
                    })?;
                }
                jobs.spawn("clickhouse", move |tx, stop| {
                    node::jobs::report_series("kansoku_clickhouse", every, || ch.report(), &tx, &stop);
                })?;
            }
            let ingest = Arc::new(ingest::Ingest::new(Arc::clone(&store), state.live.clone(), setup.config));
            state.cluster = Some(api::ClusterView {
                hosts: Arc::clone(&ingest.hosts),
                ingest: Arc::clone(&ingest.stats),
                jobs: Arc::clone(&ingest.jobs),
            });
            Some((ingest, setup.listener))
        }
        None => None,
    };

    if !rule_files.is_empty() {
        let stats = Arc::new(rules::RuleStats::default());
        let am = args.alertmanager.as_deref().map(|u| rules::Alertmanager::new(u, &format!("http://{local}/")));
        let board = Arc::new(model::alert::AlertBoard::default());
        state.alerts = Some(Arc::clone(&board));
        for (path, file) in &rule_files {
            for spec in &file.groups {
                let group = rules::Group::new(
                    spec,
                    args.interval.max(Duration::from_millis(100)),
                    // What queries read: on a server in front of ClickHouse
                    // the agents' series too (the rules once saw only the
                    // server's own).
                    Arc::clone(&state.reader),
                    am.clone(),
                    Arc::clone(&stats),
                )?
                .with_board(Arc::clone(&board), &path.display().to_string());
                tracing::info!(
                    "rules: group {:?} of {} ({} rules) every {:?}{}",
                    spec.name,
                    path.display(),
                    spec.rules.len(),
                    group.interval(),
                    am.as_ref().map(|a| format!(", alerts to {}", a.url())).unwrap_or_default()
                );
                jobs.spawn("rules", move |tx, stop| group.run(tx, stop))?;
            }
        }
        let report = Arc::clone(&stats);
        state.reports.push(api::Report("rules", Arc::new(move || report.report().to_vec())));
    }

    if let (Some(sampler), Some(host)) = (sampler, &host) {
        let (hz, event) = (sampler.hz(), sampler.event());
        jobs.spawn_sampler(sampler)?;
        tracing::info!(
            "perf: sampling every CPU {hz} times a second ({}) into {}{{host={host:?}}}",
            event.name(),
            event.stream()
        );
    }
    let synthetic = synth.is_some();
    if let Some(synth) = synth {
        jobs.spawn("synth", move |tx, stop| synth.run(tx, stop))?;
    }

    let what = match (&host, state.snmp.is_some()) {
        _ if synthetic => "synthetic hosts".to_owned(),
        _ if ingest.is_some() => format!(
            "agents on {}{}",
            ingest.as_ref().map(|i| i.1.local_addr().map(|a| a.to_string()).unwrap_or_default()).unwrap_or_default(),
            if state.snmp.is_some() { " and SNMP targets" } else { "" }
        ),
        (Some(h), true) => format!("host {h:?} and SNMP targets"),
        (Some(h), false) => format!("host {h:?}"),
        (None, _) => "SNMP targets".to_owned(),
    };
    tracing::info!(
        "kansoku {}: listening on http://{local}, {what}, interval {:?}, data in {}",
        if synthetic {
            "lab synth"
        } else if ingest.is_some() {
            "server"
        } else if host.is_some() {
            "up"
        } else {
            "snmp"
        },
        args.interval,
        args.data.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let (ingest_stop, ingest_stopped) = tokio::sync::watch::channel(false);
    let http_limits = api::serve::ServeLimits {
        max_connections: args.http_max_connections.max(1),
        header_read_timeout: args.http_header_timeout,
        body_idle_timeout: args.http_body_timeout,
        ..api::serve::ServeLimits::default()
    };
    let served = rt.block_on(async move {
        if let Some((ingest, listener)) = ingest {
            let listener = tokio::net::TcpListener::from_std(listener)?;
            tokio::spawn(ingest.serve(listener, ingest_stopped));
        }
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let closing = state.clone();
        let stop = async move {
            node::signal::shutdown_signal().await;
            closing.close_streams();
        };
        let stats = Arc::clone(&state.http);
        api::serve::serve(listener, api::router(state), http_limits, stats, stop).await;
        Ok::<(), std::io::Error>(())
    });
    // Agents' connections end before the store closes: what they had not
    // been acknowledged they send again to the next server.
    ingest_stop.send_replace(true);
    rt.shutdown_timeout(Duration::from_secs(5));
    tracing::info!("stopping: draining the queues and flushing the store");
    jobs.stop_and_join()?;
    store.close().context("flush store")?;
    served.context("HTTP server")?;
    Ok(())
}
