//! `kansoku agent` (sample here what `up` samples, ship it to a server) and
//! the ingest side of `kansoku server`: flags to the `agent` and `ingest`
//! crates' configurations, and the server's symbol store and ClickHouse
//! wired beside its ingest.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use access::Tokens;
use agent::{Agent, AgentConfig};
use anyhow::{Context, bail};
use ingest::ServerConfig;
use model::producer::Producer;
use node::rounds::{Every, ReportSeries};
use wire::rounds::Codec;

use crate::args::{hostname, parse_dur, parse_interval};
use crate::sample::SampleArgs;

#[derive(clap::Args, Debug)]
pub struct IngestArgs {
    /// Where agents connect (binary wire protocol; see docs/format/wire.md).
    #[arg(long, default_value = "127.0.0.1:7071")]
    ingest: String,
    /// Tokens, `TOKEN [HOST]` (writes and reads) or `read TOKEN` (reads)
    /// per line, the file readable by its owner only; with them every HTTP
    /// endpoint but /ping needs a token too. Agents without one are
    /// refused; a token with a host may only send as that host.
    #[arg(long, value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// TLS certificate chain (PEM) for the ingest port; with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require agents to present a certificate issued by this CA (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Most agent connections at once, counted once an agent's hello
    /// checks out (sockets that never authenticate do not take one).
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Most new series one agent host may create, over all its connections.
    #[arg(long, default_value_t = 100_000)]
    max_series_per_agent: usize,
    /// Largest frame accepted, bytes.
    #[arg(long, default_value_t = wire::FRAME_MAX)]
    max_frame: u32,
    /// Bytes of agents' binaries and kernel symbol tables kept to name their
    /// samples (DATA/buildid, DATA/kallsyms); past it the least recently
    /// used go (and are asked for again when samples name them).
    #[arg(long, default_value = "2G", value_parser = model::parse_bytes)]
    symbols_budget: u64,
    /// Where agents' samples and events are kept: `embedded` (this
    /// server's data directory) or `clickhouse://HOST:PORT[,HOST:PORT…]/DB`
    /// (ClickHouse's HTTP interface; several addresses are tried in turn),
    /// so that several servers can stand in front of one store. See
    /// docs/scale.md.
    #[arg(long, default_value = "embedded", value_name = "STORE")]
    store: String,
    /// With a clickhouse:// store: the cluster's name in ClickHouse's
    /// `remote_servers`. Tables are then replicated under Distributed ones,
    /// and a batch resent through another server is stored once.
    #[arg(long, value_name = "NAME")]
    cluster: Option<String>,
    /// With --cluster: every insert waits until this many replicas of its
    /// shard hold it (ClickHouse's insert_quorum), so an acknowledged batch
    /// survives the death of all but one of them; an insert that cannot
    /// reach the quorum is refused and the agent resends it. 0: one replica
    /// (the fastest; see docs/scale.md).
    #[arg(long, default_value_t = 0, value_name = "N")]
    insert_quorum: u32,
    /// With a clickhouse:// store: how far behind now the live tail runs
    /// (`/api/v1/live` polls ClickHouse, and samples reach it when their
    /// agent's batch does: keep it above the agents' --batch). Default 3s.
    #[arg(long, value_parser = parse_dur)]
    live_delay: Option<Duration>,
}

pub struct IngestSetup {
    pub config: ServerConfig,
    /// `--live-delay`, for a ClickHouse-backed server's live tail.
    pub live_delay: Duration,
    /// `--symbols-budget`: the symbol store opens with the data directory.
    pub symbols_budget: u64,
    pub listener: std::net::TcpListener,
}

/// Reads tokens and certificates and binds the ingest port: every mistake
/// is reported before the data directory is touched.
pub fn ingest_setup(args: &IngestArgs) -> anyhow::Result<IngestSetup> {
    let tokens = args.tokens.as_deref().map(Tokens::load).transpose()?.map(Arc::new);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(link::tls::server_config(cert, key, args.client_ca.as_deref())?),
        _ => None,
    };
    if args.max_frame < 4096 {
        bail!("--max-frame {}: at least 4096 bytes", args.max_frame);
    }
    let addr: std::net::SocketAddr = args
        .ingest
        .parse()
        .with_context(|| format!("--ingest {:?}: expected IP:PORT, e.g. 127.0.0.1:7071", args.ingest))?;
    if !addr.ip().is_loopback() && tokens.is_none() && args.client_ca.is_none() {
        tracing::warn!(
            "ingest on {addr} accepts any agent: give --tokens (and --tls-cert/--tls-key) to require credentials"
        );
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("--ingest {addr}: {e}"))?;
    listener.set_nonblocking(true).context("ingest socket")?;
    let clickhouse = match args.store.as_str() {
        "embedded" => {
            if args.cluster.is_some() {
                bail!("--cluster names a ClickHouse cluster: give --store clickhouse://HOST:PORT/DB too");
            }
            None
        }
        url => {
            if args.insert_quorum > 0 && args.cluster.is_none() {
                bail!("--insert-quorum counts the replicas of a cluster: give --cluster NAME too");
            }
            let mut writer = chstore::Writer::open(url, args.cluster.as_deref(), Duration::from_secs(30))?;
            writer.set_insert_quorum(args.insert_quorum);
            Some(Arc::new(writer))
        }
    };
    if args.live_delay.is_some() && clickhouse.is_none() {
        bail!("--live-delay is for a ClickHouse-backed server's live tail: give --store clickhouse://… too");
    }
    if args.insert_quorum > 0 && clickhouse.is_none() {
        bail!("--insert-quorum is for a ClickHouse cluster: give --store clickhouse://… --cluster NAME");
    }
    let config = ServerConfig {
        clickhouse,
        max_frame: args.max_frame,
        max_series_per_agent: args.max_series_per_agent,
        max_connections: args.max_connections,
        tokens,
        tls,
        ..ServerConfig::default()
    };
    Ok(IngestSetup {
        config,
        listener,
        symbols_budget: args.symbols_budget,
        live_delay: args.live_delay.unwrap_or(Duration::from_secs(3)),
    })
}

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
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    interval: Duration,
    /// Rounds are shipped in batches spanning this long.
    #[arg(long, default_value = "1s", value_parser = parse_dur)]
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
    #[arg(long, default_value = "10s", value_parser = parse_dur)]
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
    match crate::args::parse_budget(s) {
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
    mut setup: IngestSetup,
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
