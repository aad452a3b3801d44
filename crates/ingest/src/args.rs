//! `kansoku server`'s ingest flags ([`Args`]) and what they open before
//! the data directory is touched ([`setup`]): tokens and certificates read,
//! the ingest port bound, the ClickHouse writer opened — every mistake one
//! line naming the flag.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use access::TokenFile;
use anyhow::{Context, bail};

use crate::ServerConfig;

#[derive(clap::Args, Debug)]
#[group(id = "ingest_flags")]
pub struct Args {
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
    #[arg(long, value_parser = model::parse_duration)]
    live_delay: Option<Duration>,
}

pub struct Setup {
    pub config: ServerConfig,
    /// `--live-delay`, for a ClickHouse-backed server's live tail.
    pub live_delay: Duration,
    /// `--symbols-budget`: the symbol store opens with the data directory.
    pub symbols_budget: u64,
    pub listener: std::net::TcpListener,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup").field("listener", &self.listener).field("live_delay", &self.live_delay).finish()
    }
}

/// Reads tokens and certificates and binds the ingest port: every mistake
/// is reported before the data directory is touched.
pub fn setup(args: &Args) -> anyhow::Result<Setup> {
    let tokens = args.tokens.as_deref().map(TokenFile::load).transpose()?.map(Arc::new);
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
    Ok(Setup {
        config,
        listener,
        symbols_budget: args.symbols_budget,
        live_delay: args.live_delay.unwrap_or(Duration::from_secs(3)),
    })
}
