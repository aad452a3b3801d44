//! `kansoku agent` (sample here what `up` samples, ship it to a server) and
//! the ingest side of `kansoku server`: flags to the `agent` and `ingest`
//! crates' configurations, and the server's symbol store and ClickHouse
//! wired beside its ingest.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agent::{Agent, AgentConfig};
use anyhow::{Context, bail};
use model::producer::Producer;
use node::rounds::{Every, ReportSeries};
use wire::rounds::Codec;

use crate::args::hostname;
use crate::sample::SampleArgs;

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// The server's ingest address: HOST:PORT, tcp://HOST:PORT or
    /// tls://HOST:PORT; several separated by commas (servers in front of
    /// one ClickHouse store): the agent moves to the next when one fails.
    #[arg(long)]
    server: String,
    /// File holding this agent's bearer token (one line).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Value of the host label (default: this machine's hostname).
    #[arg(long)]
    host: Option<String>,
    /// Directory for the agent's spool (batches not yet acknowledged).
    #[arg(long, default_value = "kansoku-agent")]
    data: PathBuf,
    /// Sampling interval, 10ms to 60s, on wall-clock boundaries.
    #[arg(long, default_value = "100ms", value_parser = collect::parse_interval)]
    interval: Duration,
    /// Rounds are shipped in batches spanning this long.
    #[arg(long, default_value = "1s", value_parser = model::parse_duration)]
    batch: Duration,
    /// Compression of batches: zstd (zstd-N for level N), lz4, or none.
    #[arg(long, default_value = "zstd")]
    codec: Codec,
    /// Spool size limit: bytes with K/M/G suffix, or auto (26 h of this
    /// host's data at the measured rate, within a quarter of the filesystem).
    #[arg(long, default_value = "auto", value_parser = parse_spool_size)]
    spool_size: SpoolSize,
    #[command(flatten)]
    sample: SampleArgs,
    /// A connection whose oldest batch waits longer than this for its
    /// acknowledgement is dropped and made anew.
    #[arg(long, default_value = "10s", value_parser = model::parse_duration)]
    ack_timeout: Duration,
    /// CA certificate (PEM) the server's certificate must chain to; turns TLS on.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// This agent's certificate (PEM), for servers that require one; with --key.
    #[arg(long, value_name = "FILE", requires = "key", requires = "ca")]
    cert: Option<PathBuf>,
    /// This agent's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Jobs this agent takes from the server: `load` runs `kansoku lab
    /// load` here when `kansoku lab load --agents` asks (several agents
    /// started at one instant). Off by default: the server cannot make an
    /// agent send traffic unless its operator allowed it.
    #[arg(long, value_delimiter = ',', value_parser = ["load"])]
    jobs: Vec<String>,
    /// The targets load jobs may aim this agent at, as IP:PORT or IP:*
    /// (comma-separated or repeated); needed by `--jobs load`. A job for
    /// any other address, or past the bounds of docs/load.md, is refused.
    #[arg(long, value_delimiter = ',', value_name = "IP:PORT", value_parser = load::JobPolicy::parse_allow)]
    load_allow: Vec<(std::net::IpAddr, Option<u16>)>,
}

#[derive(Clone, Debug)]
pub struct SpoolSize(Option<u64>);

fn parse_spool_size(s: &str) -> Result<SpoolSize, String> {
    if s == "auto" {
        return Ok(SpoolSize(None));
    }
    match s.parse::<store::DiskBudget>() {
        Ok(store::DiskBudget::Bytes(b)) => Ok(SpoolSize(Some(b))),
        _ => Err(format!("{s:?}: use auto or bytes like 512M, 4G")),
    }
}

pub fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
    let host = args.host.clone().unwrap_or_else(hostname);
    link::net::parse_server(&args.server).map_err(|e| anyhow::anyhow!("--server {e}"))?;
    if args.batch < args.interval || args.batch > Duration::from_secs(60) {
        bail!("--batch {:?}: from --interval ({:?}) to 60s", args.batch, args.interval);
    }
    let token = match &args.token_file {
        Some(f) => {
            access::check_private(f, "--token-file")?;
            let t = std::fs::read_to_string(f).with_context(|| format!("--token-file {}", f.display()))?;
            let t = t.trim().to_owned();
            if t.is_empty() {
                bail!("--token-file {}: empty", f.display());
            }
            Some(t)
        }
        None => None,
    };
    let tls = match &args.ca {
        Some(ca) => Some(link::tls::client_config(ca, args.cert.as_deref().zip(args.key.as_deref()))?),
        None => None,
    };
    let mut cfg = AgentConfig::new(args.server.clone(), host.clone(), args.interval);
    cfg.token = token;
    cfg.batch = args.batch;
    cfg.codec = args.codec;
    cfg.tls = tls;
    cfg.spool_limit = args.spool_size.0;
    cfg.ack_timeout = args.ack_timeout;
    // The sampler keeps the binaries it saw there; the server asks for them.
    cfg.symbols = Some(args.data.clone());
    if !args.jobs.is_empty() {
        if args.load_allow.is_empty() {
            bail!(
                "--jobs load needs --load-allow IP:PORT[,IP:PORT…]: the targets the server may aim this agent's load at"
            );
        }
        let policy = load::JobPolicy { allow: args.load_allow.clone() };
        cfg.jobs = Some(agent::JobRunner {
            kinds: args.jobs.clone(),
            run: Arc::new(move |_kind: &str, start_ns: i64, fields: &[String]| {
                load::job::run(&policy, start_ns, fields)
            }),
        });
    }
    let spool_dir = args.data.join("spool");
    let mut agent = Agent::new(cfg, &spool_dir).with_context(|| format!("open spool {}", spool_dir.display()))?;
    // Panics of this agent's threads travel with every batch.
    agent.add_figures(Box::new(|| {
        let died = node::supervise::threads().values().map(|r| r.died).sum::<u64>();
        vec![("kansoku_threads_panics_total", node::supervise::panics() as f64), ("kansoku_threads_died", died as f64)]
    }));
    let mut sampling = args.sample.start(Some(&host), args.interval, &args.data)?;
    if let Some(sampler) = &sampling.sampler {
        // The sampler's figures travel with every batch, beside the agent's own.
        let stats = Arc::clone(&sampler.stats);
        agent.add_figures(Box::new(move || stats.figures()));
        // This boot's kernel symbols, for the server to name kernel frames
        // with (kept: samples of this boot may reach it after a reboot).
        let boot = perf::boot_id().unwrap_or_default();
        if let Err(e) = symstore::snapshot_kallsyms(&args.data, &boot) {
            tracing::warn!(
                "perf: kernel symbols of boot {boot:?} not kept ({e}); the server will not name kernel frames"
            );
        }
    }
    for f in std::mem::take(&mut sampling.shipped) {
        agent.add_figures(f);
    }
    let agent = Arc::new(agent);
    let backlog = agent.spool().stats().backlog_batches.load(Ordering::Relaxed);
    tracing::info!(
        "kansoku agent: host {host:?}, interval {:?}, shipping to {} every {:?}; spool {} ({backlog} batches waiting)",
        args.interval,
        args.server,
        args.batch,
        spool_dir.display()
    );

    if let Some(sampler) = &sampling.sampler {
        tracing::info!(
            "perf: sampling every CPU {} times a second ({}), shipped as {}{{host={host:?}}}",
            sampler.hz(),
            sampler.event().name(),
            sampler.event().stream()
        );
    }
    node::agent::run(Arc::clone(&agent), sampling.producers, sampling.sampler, args.batch)?;
    let left = agent.spool().stats().backlog_batches.load(Ordering::Relaxed);
    if left > 0 {
        tracing::info!("{left} batches stay in the spool for the next start");
    }
    Ok(())
}

/// The agents' ingest beside `store`: the symbol store that names their
/// samples, and on a ClickHouse-backed server the readers queries go
/// through, ClickHouse's retention and figures, each as a producer.
pub fn wire_ingest(
    mut setup: ingest::Setup,
    (data, interval, retention_time): (&std::path::Path, Duration, Option<Duration>),
    store: &Arc<store::Store>,
    state: &mut api::ApiState,
    producers: &mut Vec<Box<dyn Producer>>,
) -> anyhow::Result<(Arc<ingest::Ingest>, std::net::TcpListener)> {
    state.tokens = setup.config.tokens.clone();
    let symbols = symstore::SymStore::open(data, setup.symbols_budget)
        .with_context(|| format!("open the symbol store in {}", data.display()))?;
    let symbols = Arc::new(symbols);
    if let Some(ch) = &setup.config.clickhouse {
        // Symbol sources one server received name frames on all.
        symbols.set_shared(Arc::new(ingest::SharedSymbols(Arc::clone(ch))));
    }
    setup.config.symbols = Some(Arc::clone(&symbols));
    state.symbols = Some(Arc::clone(&symbols));
    let every = interval.max(Duration::from_secs(1));
    let report = Arc::clone(&symbols);
    producers.push(Box::new(ReportSeries::new("symbols", "kansoku_symbols", every, Arc::new(move || report.report()))));
    if let Some(ch) = setup.config.clickhouse.clone() {
        // Queries read the agents' series from ClickHouse, and this
        // server's own (its ingest, the agents' clocks) from here;
        // profiles count the agents' events in ClickHouse.
        let reader = Arc::new(ch.reader());
        state.reader = Arc::new(chstore::Both(Arc::clone(store), Arc::clone(&reader)));
        state.events = Arc::new(chstore::Both(Arc::clone(store), Arc::clone(&reader)));
        state.live_delay = Some(setup.live_delay);
        // --retention-time: whole days older than it are dropped from
        // ClickHouse (checked every 10 minutes, by every server: a drop is
        // idempotent).
        if let Some(keep) = retention_time {
            let ch = Arc::clone(&ch);
            let work = move |t: i64| {
                let cutoff = (t as u64).saturating_sub(keep.as_nanos() as u64);
                if let Err(e) = ch.drop_before(cutoff, Duration::from_secs(60)) {
                    tracing::warn!("clickhouse retention: {e}");
                }
            };
            let interval = Duration::from_secs(600);
            producers.push(Box::new(Every { name: "clickhouse-retention", interval, work: Box::new(work) }));
        }
        let report = Arc::new(move || ch.report().into_iter().chain(reader.report()).collect());
        producers.push(Box::new(ReportSeries::new("clickhouse", "kansoku_clickhouse", every, report)));
    }
    let ingest = Arc::new(ingest::Ingest::new(Arc::clone(store), state.live.clone(), setup.config));
    state.cluster = Some(api::ClusterView {
        hosts: Arc::clone(&ingest.hosts),
        ingest: Arc::clone(&ingest.stats),
        jobs: Arc::clone(&ingest.jobs),
    });
    Ok((ingest, setup.listener))
}
