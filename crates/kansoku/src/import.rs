//! `kansoku import`: recordings made with `perf record` (a `perf.data` file,
//! read through `perf script`) or `perf script` text, into the store's event
//! columns beside what kansoku samples itself.

use std::path::PathBuf;

use anyhow::{Context, bail};
use codec::events::{Encoding, EventBatch};
use model::{SeriesKey, Timestamp};
use store::{Options, Store};

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// A perf.data file (needs `perf`, Debian's linux-perf) or the text of
    /// `perf script -F cpu,pid,tid,time,ip --ns`.
    file: PathBuf,
    /// Data directory to import into (not while a kansoku writes to it).
    #[arg(long, default_value = "kansoku-data")]
    data: PathBuf,
    /// Value of the host label of the imported stream.
    #[arg(long)]
    host: Option<String>,
    /// Name of the event stream.
    #[arg(long, default_value = "perf_cpu_clock")]
    stream: String,
    /// Wall-clock time of the first sample (RFC 3339 or Unix seconds).
    /// Default: wall-clock times as recorded (`perf record -k
    /// CLOCK_REALTIME`), else perf's since-boot clock mapped through this
    /// machine's, which is right for recordings made here since the last
    /// boot (perf.data keeps no wall-clock reference of its own).
    #[arg(long)]
    start: Option<String>,
}

/// perf's clocks count from boot; anything past 2001 is a wall clock.
const WALL_CLOCK_MIN_NS: i64 = 1_000_000_000 * 1_000_000_000;

pub fn run(args: ImportArgs) -> anyhow::Result<()> {
    let head = std::fs::read(&args.file).with_context(|| format!("read {}", args.file.display()))?;
    let is_perf_data = head.starts_with(b"PERFILE2");
    let text = if is_perf_data {
        perf::script::script(&args.file)?
    } else {
        String::from_utf8(head).with_context(|| format!("{}: neither perf.data nor text", args.file.display()))?
    };
    let mut batches = perf::script::parse(&text, 0)?;
    let n: usize = batches.iter().map(EventBatch::len).sum();
    if n == 0 {
        bail!("{}: no samples in it", args.file.display());
    }
    let first = batches.iter().filter_map(|b| b.time.first()).min().copied().unwrap_or(0);
    let last = batches.iter().filter_map(|b| b.time.last()).max().copied().unwrap_or(0);
    let uptime = clock::monotonic_ns();
    let offset = match &args.start {
        Some(s) => {
            model::parse_time(s, Timestamp::now()).map_err(|e| anyhow::anyhow!("--start: {e}"))?.as_nanos() - first
        }
        None if first >= WALL_CLOCK_MIN_NS => 0,
        None if last <= uptime => clock::realtime_ns() - uptime,
        None => bail!(
            "{}: times are since a boot other than this machine's (the last is {:.0} s after boot, this machine has been up {:.0} s); give --start",
            args.file.display(),
            last as f64 / 1e9,
            uptime as f64 / 1e9
        ),
    };
    for b in &mut batches {
        b.time.iter_mut().for_each(|t| *t += offset);
    }
    let n_cpus = batches.len();
    let host = args.host.clone().unwrap_or_else(crate::args::hostname);
    let stream = SeriesKey::new(args.stream.as_str(), [("host", host.as_str())]);
    let store =
        Store::open(&args.data, Options::default()).with_context(|| format!("open store {}", args.data.display()))?;
    let mut stored = 0usize;
    for b in batches {
        for mut piece in perf::script::pieces(&b, 100_000_000, codec::events::MAX_EVENTS) {
            stored += store.events().append(&stream, &mut piece, Encoding::Compact)?;
        }
    }
    store.close()?;
    tracing::info!(
        "imported {stored} samples of {n_cpus} CPUs as {stream}, {} .. {}",
        Timestamp(first + offset),
        Timestamp(last + offset)
    );
    Ok(())
}
