//! Where a file system put its blocks — seed 001's *DAV* collector
//! (`seeds/001_ad0cddd3f1c2901a.txt`): every so often (`kansoku up
//! --fragmentation PATH`, every 10 minutes by default) each file's extents
//! are read with FIEMAP and the file system's free space with GETFSMAP
//! (`ioctl`, the crate's only unsafe module; the answers parsed from bytes
//! by `parse`), merged into physically contiguous runs and summed into
//! fragmentation figures stored as series (`scan`, [`Scanner`]); the map
//! itself is kept as a compressed snapshot file (`snapshots`) that the
//! dashboard draws as the device's address space, before and after.
//!
//! The answers are parsed from bytes by `parse` (fuzzed, and checked against
//! `filefrag` on recorded answers); each round's map is kept as a
//! zstd-compressed JSON file in `DATA/extents`.

pub mod ioctl;
pub mod parse;
pub mod scan;
pub mod snapshots;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use model::producer::{Producer, ReportFn};
use model::{Batch, SeriesKey, Timestamp};

pub use scan::{FREE, Figures, FileMap, OTHER, Snapshot, cells, files_span, scan};
pub use snapshots::Snapshots;

/// `--fragmentation` and its companions: where, how often, how many maps.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "fragmentation_flags")]
pub struct Args {
    /// Measure fragmentation under these paths (comma-separated): every
    /// regular file's extents (FIEMAP) and the file system's free space
    /// (GETFSMAP), as `kansoku_fragmentation_*` series and a map the
    /// dashboard draws (docs/fragmentation.md). Off by default.
    #[arg(id = "fragmentation", long = "fragmentation", value_delimiter = ',', value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// How often the paths are scanned (the first scan runs at start).
    #[arg(id = "fragmentation_interval", long = "fragmentation-interval", default_value = "10m", value_parser = model::parse_duration)]
    pub interval: Duration,
    /// Maps kept in DATA/extents, oldest removed first (144: a day at 10 min).
    #[arg(id = "fragmentation_keep", long = "fragmentation-keep", default_value_t = 144)]
    pub keep: usize,
}

impl Args {
    /// The scanner these flags ask for (None without paths), its maps kept
    /// under `data`; an error names the flag and the path.
    pub fn scanner(&self, host: &str, data: &std::path::Path) -> Result<Option<Scanner>, String> {
        if self.paths.is_empty() {
            return Ok(None);
        }
        if self.interval < Duration::from_secs(1) {
            return Err(format!(
                "--fragmentation-interval {:?}: at least 1s (a scan reads every file's map)",
                self.interval
            ));
        }
        for p in &self.paths {
            std::fs::metadata(p).map_err(|e| format!("--fragmentation {}: {e}", p.display()))?;
        }
        let snapshots = Snapshots::open(data.join("extents"), self.keep);
        Ok(Some(Scanner::new(self.paths.clone(), self.interval, host.to_owned(), Some(snapshots))))
    }
}

/// The fragmentation scanner: each path scanned at start and then on
/// every interval boundary; figures as series, the maps as snapshots.
#[derive(Debug)]
pub struct Scanner {
    pub paths: Vec<PathBuf>,
    pub interval: Duration,
    pub host: String,
    pub snapshots: Option<Snapshots>,
    ids: HashMap<SeriesKey, u32>,
    stats: Arc<Stats>,
}

/// What the collector counts of itself.
#[derive(Debug, Default)]
pub struct Stats {
    /// Rounds whose batch could not be queued.
    pub dropped_rounds: AtomicU64,
    pub missed_intervals: AtomicU64,
}

impl Stats {
    /// The figures of `/api/v1/status`'s `fragmentation` part.
    pub fn report(&self) -> Vec<model::report::Figure> {
        use model::report::Figure;
        vec![
            Figure::counter("dropped_rounds", self.dropped_rounds.load(Ordering::Relaxed)),
            Figure::counter("missed_intervals", self.missed_intervals.load(Ordering::Relaxed)),
        ]
    }
}

impl Scanner {
    pub fn new(paths: Vec<PathBuf>, interval: Duration, host: String, snapshots: Option<Snapshots>) -> Scanner {
        Scanner { paths, interval, host, snapshots, ids: HashMap::new(), stats: Arc::default() }
    }

    pub fn stats(&self) -> Arc<Stats> {
        Arc::clone(&self.stats)
    }

    /// One round: scans every path at `t` (wall-clock ns).
    pub fn round(&mut self, t: i64) -> Batch {
        let mut batch = Batch::new(Timestamp(t));
        let mut taken = Vec::new();
        for path in &self.paths {
            match scan::scan(path, t) {
                Ok(s) => {
                    tracing::debug!(
                        "fragmentation: {}: {} files, {} runs ({} extra), {:.3} s",
                        path.display(),
                        s.figures.files,
                        s.figures.runs,
                        s.figures.extra_runs,
                        s.figures.scan_seconds
                    );
                    taken.push(s);
                }
                Err(e) => tracing::warn!("fragmentation: cannot scan {}: {e}", path.display()),
            }
        }
        for s in &taken {
            let f = &s.figures;
            let mut put = |name: &str, v: Option<f64>| {
                let Some(v) = v else { return };
                let key = SeriesKey::new(name, [("host", self.host.as_str()), ("path", s.path.as_str())]);
                let next = self.ids.len() as u32;
                let id = *self.ids.entry(key.clone()).or_insert_with(|| {
                    batch.defs.push((next, key));
                    next
                });
                batch.points.push((id, v));
            };
            put("kansoku_fragmentation_files", Some(f.files as f64));
            put("kansoku_fragmentation_file_bytes", Some(f.file_bytes as f64));
            put("kansoku_fragmentation_runs", Some(f.runs as f64));
            put("kansoku_fragmentation_fragmented_files", Some(f.fragmented_files as f64));
            put("kansoku_fragmentation_extra_runs", Some(f.extra_runs as f64));
            put("kansoku_fragmentation_free_bytes", f.free_bytes.map(|v| v as f64));
            put("kansoku_fragmentation_free_extents", f.free_extents.map(|v| v as f64));
            put("kansoku_fragmentation_free_largest_bytes", f.free_largest_bytes.map(|v| v as f64));
            put("kansoku_fragmentation_free_ratio", f.free_fragmentation);
            put("kansoku_fragmentation_skipped_files", Some(f.skipped_files as f64));
            put("kansoku_fragmentation_scan_seconds", Some(f.scan_seconds));
        }
        if let Some(store) = &self.snapshots
            && !taken.is_empty()
            && let Err(e) = store.write(t, &taken)
        {
            tracing::warn!("fragmentation: cannot keep the snapshot in {}: {e}", store.dir().display());
        }
        batch
    }
}

impl Producer for Scanner {
    fn name(&self) -> &'static str {
        "fragmentation"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn report(&self) -> Option<ReportFn> {
        let stats = self.stats();
        Some(Arc::new(move || stats.report()))
    }

    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        Some(Scanner::round(self, t.0))
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_intervals.fetch_add(n, Ordering::Relaxed);
    }

    fn dropped(&mut self) {
        self.stats.dropped_rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// Scans at start, then on every boundary: a map to see at once.
    fn starts_at_once(&self) -> bool {
        true
    }
}
