//! `kansoku up`: collector thread -> bounded queue -> store writer thread ->
//! live broadcast; HTTP API on a small tokio runtime. Ctrl-C or SIGTERM stops
//! sampling, drains the queue, and flushes the store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::time::Duration;

use anyhow::{Context, bail};
use collect::{Collector, CollectorConfig, INTERVAL_MAX, INTERVAL_MIN};
use model::Batch;
use store::{Appender, FsyncPolicy, Options, Store};

/// Rounds buffered between collector and store: 25 s at 100 ms. A store that
/// stalls longer makes the collector drop rounds (counted), never block.
const QUEUE_ROUNDS: usize = 256;

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Data directory (created if new).
    #[arg(long, default_value = "kansoku-data")]
    data: PathBuf,
    /// HTTP listen address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    listen: String,
    /// Sampling interval, 10ms to 60s; samples are taken on its wall-clock boundaries.
    #[arg(long, default_value = "100ms", value_parser = parse_interval)]
    interval: Duration,
    /// Value of the host label (default: this machine's hostname).
    #[arg(long)]
    host: Option<String>,
    /// WAL fsync policy: always (nothing acknowledged is lost, even on power
    /// loss), never, or a duration (power loss may lose up to that window).
    #[arg(long, default_value = "always", value_parser = parse_fsync)]
    fsync: FsyncPolicy,
    /// Head time span written out as one compressed block.
    #[arg(long, default_value = "5m", value_parser = parse_dur)]
    block_duration: Duration,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    model::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_dur(s)?;
    if !(INTERVAL_MIN..=INTERVAL_MAX).contains(&d) {
        return Err(format!("{s} is out of range: use {INTERVAL_MIN:?} to {INTERVAL_MAX:?}"));
    }
    Ok(d)
}

fn parse_fsync(s: &str) -> Result<FsyncPolicy, String> {
    match s {
        "always" => Ok(FsyncPolicy::Always),
        "never" => Ok(FsyncPolicy::Never),
        d => {
            parse_dur(d).map(FsyncPolicy::Every).map_err(|_| format!("{d:?}: use always, never, or a duration like 1s"))
        }
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let addr: SocketAddr = args
        .listen
        .parse()
        .with_context(|| format!("--listen {:?}: expected IP:PORT, e.g. 127.0.0.1:7070", args.listen))?;
    // Bind before touching the data directory: a port in use changes nothing.
    let listener = std::net::TcpListener::bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!("listen {addr}: address in use; is another kansoku running? choose another with --listen")
        } else {
            anyhow::anyhow!("listen {addr}: {e}")
        }
    })?;
    listener.set_nonblocking(true).context("listen socket")?;
    let local = listener.local_addr().context("listen socket")?;

    let opts = Options { fsync: args.fsync, block_duration: args.block_duration, ..Options::default() };
    let store = Arc::new(Store::open(&args.data, opts).with_context(|| format!("open store {}", args.data.display()))?);
    let host = args.host.clone().unwrap_or_else(hostname);
    let collector = Collector::new(&CollectorConfig { interval: args.interval, host: host.clone(), root: "/".into() });
    let mut state = api::ApiState::new(Arc::clone(&store));
    state.collector = Some(collector.stats());
    state.interval = Some(args.interval);
    let live = state.live.clone();

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = sync_channel::<Batch>(QUEUE_ROUNDS);
    let collector_thread = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new().name("collector".into()).spawn(move || collector.run(tx, stop))?
    };
    let writer_thread = {
        let store = Arc::clone(&store);
        std::thread::Builder::new().name("store-writer".into()).spawn(move || {
            let mut appender = Appender::default();
            let mut failures = 0u64;
            for batch in rx {
                match store.append(&mut appender, &batch) {
                    Ok(appended) => {
                        if failures > 0 {
                            tracing::info!("store writes resumed after {failures} failed rounds");
                            failures = 0;
                        }
                        let _ = live.send(Arc::new(appended));
                    }
                    Err(e) => {
                        // Counted in the store's write_errors; log the first of a run.
                        if failures == 0 {
                            tracing::error!("store write failed, round not stored (will retry with the next): {e}");
                        }
                        failures += 1;
                    }
                }
            }
        })?
    };

    tracing::info!(
        "kansoku up: listening on http://{local}, host {host:?}, interval {:?}, data in {}",
        args.interval,
        args.data.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        axum::serve(listener, api::router(state)).with_graceful_shutdown(shutdown_signal()).await
    });
    tracing::info!("stopping: draining the queue and flushing the store");
    stop.store(true, Ordering::Relaxed);
    if collector_thread.join().is_err() {
        bail!("collector thread panicked");
    }
    if writer_thread.join().is_err() {
        bail!("store writer thread panicked");
    }
    store.close().context("flush store")?;
    served.context("HTTP server")?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
