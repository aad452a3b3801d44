//! How much the tiers save a long `_over_time` window: the same query on
//! the same data (8 series at 10 Hz for 3 h, flushed) with the minute tier
//! and without (raw samples only). `make bench` runs it; docs/benchmarks.md.
#![allow(clippy::print_stdout, reason = "a benchmark's report is its output")]
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};
const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * SEC;
fn main() {
    for tiers in [vec![store::tier::MINUTE], vec![]] {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(dir.path(), Options { fsync: FsyncPolicy::Never, tiers: tiers.clone(), ..Options::default() })
                .unwrap();
        let mut app = Appender::default();
        for i in 0..(3 * 3600 * 10i64) {
            let mut b = Batch::new(Timestamp(T0 + i * SEC / 10));
            if i == 0 {
                b.defs = (0..8).map(|k| (k, SeriesKey::new("g", [("k", k.to_string())]))).collect();
            }
            b.points = (0..8).map(|k| (k, ((i * 7 + k as i64) % 100) as f64)).collect();
            store.append(&mut app, &b).unwrap();
        }
        store.flush().unwrap();
        let e = promql::Engine::new(&store);
        let t = std::time::Instant::now();
        let n = 20;
        for _ in 0..n {
            e.range("avg_over_time(g[1h])", T0 + 3600 * SEC, T0 + 3 * 3600 * SEC, 60 * SEC).unwrap();
        }
        println!(
            "tiers {:?}: {:.1} ms per query (avg_over_time(g[1h]), 8 series at 10 Hz, 2 h at 1 m steps)",
            tiers,
            t.elapsed().as_secs_f64() * 1e3 / n as f64
        );
    }
}
