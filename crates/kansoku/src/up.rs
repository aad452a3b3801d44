//! `kansoku up`, `snmp`, `server` and `lab synth`: one store, the
//! producers the flags ask for (`sample`: the same list an agent runs) in
//! `node::pipelines`, the agents' ingest on a server, and the HTTP API on a
//! small tokio runtime. Ctrl-C or SIGTERM stops sampling, drains the
//! queues, and flushes the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use model::producer::Producer;
use store::{DiskBudget, FsyncPolicy, Options, Retention, Store};

use crate::args::hostname;
use crate::sample::{SampleArgs, Sampling};

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Value of the host label (default: this machine's hostname).
    #[arg(long)]
    host: Option<String>,
    #[command(flatten)]
    sample: SampleArgs,
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
    #[arg(long, value_parser = model::parse_duration)]
    timeout: Option<Duration>,
}

#[derive(clap::Args, Debug)]
pub struct ServerArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    ingest: ingest::Args,
    /// Also sample this machine, as this host: the collector, the kernel
    /// tracer and whatever else the flags below ask for, as `kansoku up`
    /// does. Off by default: a server stores its agents.
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    #[command(flatten)]
    sample: SampleArgs,
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
    #[arg(long, default_value = "100ms", value_parser = collect::parse_interval)]
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
    #[arg(long, default_value = "5m", value_parser = model::parse_duration)]
    block_duration: Duration,
    /// Remove data older than this (e.g. 30d); default: keep until the disk
    /// budget. With --store clickhouse://…: whole days older than this are
    /// dropped from ClickHouse too (a partition a day and table).
    #[arg(long, value_parser = model::parse_duration)]
    retention_time: Option<Duration>,
    /// Most disk the data directory may use, oldest data removed first:
    /// bytes with an optional K/M/G/T suffix (powers of 1024), a percentage
    /// of its filesystem (default 50%), or "unlimited".
    #[arg(long, default_value = "50%")]
    retention_size: DiskBudget,
    /// Downsampled tiers written with each block: 1m (default), 1s, both
    /// (1s,1m) or none. A 1 s tier makes hour-long charts ~3x faster and
    /// costs ~75 % more disk for 100 ms host metrics.
    #[arg(long, default_value = "1m")]
    tiers: store::tier::Resolutions,
    /// Most HTTP connections served at once; more wait in the backlog.
    #[arg(long, default_value_t = 512)]
    http_max_connections: usize,
    /// An HTTP client that does not send a request's headers within this
    /// long (idle keep-alives too) is closed.
    #[arg(long, default_value = "10s", value_parser = model::parse_duration)]
    http_header_timeout: Duration,
    /// An HTTP request body that sends nothing for this long is cut off and
    /// its connection closed (a trickling body held a connection slot).
    #[arg(long, default_value = "10s", value_parser = model::parse_duration)]
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

/// What one command runs over its store.
struct Node {
    /// `up`, `snmp`, `server` or `lab synth`, and what it samples, in words.
    command: &'static str,
    what: String,
    sampling: Sampling,
    ingest: Option<ingest::Setup>,
}

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let host = args.host.clone().unwrap_or_else(hostname);
    let sampling = args.sample.start(Some(&host), args.common.interval, &args.common.data)?;
    let what = format!("host {host:?}{}", if sampling.snmp_targets.is_some() { " and SNMP targets" } else { "" });
    serve(&args.common, Node { command: "up", what, sampling, ingest: None })
}

pub fn run_snmp(args: SnmpArgs) -> anyhow::Result<()> {
    let mut producers = Vec::new();
    let targets = crate::sample::push_poller(&mut producers, &args.targets, args.common.interval, args.timeout)?;
    let sampling = Sampling { snmp_targets: Some(targets), ..Sampling::of(producers) };
    serve(&args.common, Node { command: "snmp", what: "SNMP targets".into(), sampling, ingest: None })
}

/// `kansoku server`: the store, API and dashboard, and the agents' ingest.
pub fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let ingest = ingest::setup(&args.ingest)?;
    let sampling = args.sample.start(args.host.as_deref(), args.common.interval, &args.common.data)?;
    let what = format!(
        "agents on {}{}{}",
        ingest.listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        args.host.as_ref().map(|h| format!(", host {h:?}")).unwrap_or_default(),
        if sampling.snmp_targets.is_some() { " and SNMP targets" } else { "" }
    );
    serve(&args.common, Node { command: "server", what, sampling, ingest: Some(ingest) })
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
    let sampling = Sampling::of(vec![Box::new(synth)]);
    serve(&args.common, Node { command: "lab synth", what: "synthetic hosts".into(), sampling, ingest: None })
}

fn serve(args: &CommonArgs, node: Node) -> anyhow::Result<()> {
    let addr: SocketAddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?}: expected IP:PORT, e.g. 127.0.0.1:7070", args.listen))?;
    // Read the rules and bind before touching the data directory: a bad
    // file or a port in use changes nothing.
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
    state.snmp_targets = node.sampling.snmp_targets;
    state.fragmentation = node.sampling.fragmentation;
    let mut pipes =
        node::pipelines::Pipelines::new(Arc::clone(&store), state.live.clone()).with_fsync(args.local_fsync);
    // Every panic of every thread, and the writers' batches a panic cost.
    let panicked = Arc::clone(&pipes.panicked);
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
    let mut producers = node.sampling.producers;
    let ingest = match node.ingest {
        Some(setup) => {
            let at = (args.data.as_path(), args.interval, args.retention_time);
            Some(crate::cluster::wire_ingest(setup, at, &store, &mut state, &mut producers)?)
        }
        None => None,
    };
    if !rule_files.is_empty() {
        producers.extend(rule_groups(args, &rule_files, &mut state, local)?);
    }
    for p in producers {
        if let Some(report) = p.report() {
            state.reports.push(api::Report(p.name(), report));
        }
        pipes.add(p)?;
    }
    if let Some(sampler) = node.sampling.sampler {
        let (hz, event) = (sampler.hz(), sampler.event());
        tracing::info!("perf: sampling every CPU {hz} times a second ({}) into {}", event.name(), event.stream());
        pipes.spawn_sampler(sampler)?;
    }
    tracing::info!(
        "kansoku {}: listening on http://{local}, {}, interval {:?}, data in {}",
        node.command,
        node.what,
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
        node::signal::ready();
        tokio::spawn(node::signal::on_hangup(state.tokens.clone()));
        api::serve::serve(listener, api::router(state), http_limits, stats, stop).await;
        Ok::<(), std::io::Error>(())
    });
    // Agents' connections end before the store closes: what they had not
    // been acknowledged they send again to the next server.
    ingest_stop.send_replace(true);
    rt.shutdown_timeout(Duration::from_secs(5));
    tracing::info!("stopping: draining the queues and flushing the store");
    pipes.stop_and_join()?;
    store.close().context("flush store")?;
    served.context("HTTP server")?;
    Ok(())
}

/// `--rules`: a producer per group, reading what queries read (on a server
/// in front of ClickHouse the agents' series too), their alerts on the API's
/// board and, with `--alertmanager`, sent there; one report for all.
fn rule_groups(
    args: &CommonArgs,
    files: &[(PathBuf, rules::RuleFile)],
    state: &mut api::ApiState,
    local: SocketAddr,
) -> anyhow::Result<Vec<Box<dyn Producer>>> {
    let stats = Arc::new(rules::RuleStats::default());
    let am = args.alertmanager.as_deref().map(|u| rules::Alertmanager::new(u, &format!("http://{local}/")));
    let board = Arc::new(model::alert::AlertBoard::default());
    state.alerts = Some(Arc::clone(&board));
    let mut groups: Vec<Box<dyn Producer>> = Vec::new();
    for (path, file) in files {
        for spec in &file.groups {
            let every = args.interval.max(Duration::from_millis(100));
            let group = rules::Group::new(spec, every, Arc::clone(&state.reader), am.clone(), Arc::clone(&stats))?
                .with_board(Arc::clone(&board), &path.display().to_string());
            tracing::info!(
                "rules: group {:?} of {} ({} rules) every {:?}{}",
                spec.name,
                path.display(),
                spec.rules.len(),
                group.interval(),
                am.as_ref().map(|a| format!(", alerts to {}", a.url())).unwrap_or_default()
            );
            groups.push(Box::new(group));
        }
    }
    state.reports.push(api::Report("rules", Arc::new(move || stats.report().to_vec())));
    Ok(groups)
}
