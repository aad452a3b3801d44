//! Compaction merges a window's blocks into one — the same samples and tier
//! answers from fewer files — and a crash between writing the merged block
//! and removing its sources neither loses nor doubles a sample.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::query::{Agg, RangeQuery, range};
use store::{Appender, DiskBudget, FsyncPolicy, Options, Retention, Store};

const SEC: i64 = 1_000_000_000;
const HOUR: i64 = 3600 * SEC;
const T0: i64 = 1_800_000_000 / 3600 * 3600 * SEC;

fn opts() -> Options {
    Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(24 * 3600),
        retention: Retention { max_age: None, budget: DiskBudget::Unlimited },
        tiers: vec![store::tier::MINUTE],
        ..Options::default()
    }
}

/// Two and a half hours of two series at 10 s, flushed every five minutes:
/// 30 blocks, 12 in each whole hour and 6 in the last.
fn fill(store: &Store) {
    let mut app = Appender::default();
    let keys = [SeriesKey::new("a", [("h", "x")]), SeriesKey::new("b", [("h", "x")])];
    for i in 0..900i64 {
        let mut b = Batch::new(Timestamp(T0 + i * 10 * SEC));
        if i == 0 {
            b.defs = vec![(0, keys[0].clone()), (1, keys[1].clone())];
        }
        b.points.push((0, i as f64));
        if i % 3 != 0 {
            b.points.push((1, -(i as f64)));
        }
        store.append(&mut app, &b).unwrap();
        if i % 30 == 29 {
            store.flush().unwrap();
        }
    }
}

fn everything(store: &Store) -> Vec<(SeriesKey, Vec<i64>, Vec<f64>)> {
    store
        .series(&Selector::all())
        .into_iter()
        .map(|(id, k)| {
            let (t, v) = store.read(id, Timestamp::MIN, Timestamp::MAX);
            (k, t, v)
        })
        .collect()
}

fn buckets(store: &Store) -> Vec<Vec<Option<f64>>> {
    let q = RangeQuery {
        selector: Selector::all(),
        from: Timestamp(T0 + 7 * 60 * SEC),
        to: Timestamp(T0 + 3 * HOUR),
        step_ns: Some(60 * SEC),
        points: None,
        rate: false,
        aggs: vec![Agg::Min, Agg::Max, Agg::Count],
        group: None,
    };
    let mut frame = range(store, &q).unwrap();
    std::mem::take(&mut frame.series).into_iter().map(|s| s.values).collect()
}

fn block_files(dir: &Path) -> usize {
    fs::read_dir(dir.join("blocks"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().unwrap() == "kblk")
        .count()
}

#[test]
fn a_window_of_blocks_becomes_one_block_with_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    fill(&store);
    assert_eq!(store.disk_usage().blocks, 30);
    let (before, tiers_before) = (everything(&store), buckets(&store));
    let usage = store.disk_usage();

    // Hours 0 and 1 are over (a block of a later hour follows); hour 2 is not.
    assert_eq!(store.compact().unwrap(), 2);
    assert_eq!(store.disk_usage().blocks, 1 + 1 + 6);
    assert_eq!(block_files(dir.path()), 8);
    assert_eq!(store.stats().compactions.load(Ordering::Relaxed), 2);
    assert_eq!(everything(&store), before);
    assert_eq!(buckets(&store), tiers_before);
    assert_eq!(store.disk_usage().block_samples, usage.block_samples);
    assert_eq!(store.compact().unwrap(), 0, "nothing more to merge");

    drop(store);
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.disk_usage().blocks, 8);
    assert_eq!(everything(&store), before);
    assert_eq!(buckets(&store), tiers_before);
}

#[test]
fn a_crash_before_the_sources_are_removed_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    fill(&store);
    let before = everything(&store);
    let saved = tempfile::tempdir().unwrap();
    for e in fs::read_dir(dir.path().join("blocks")).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, saved.path().join(p.file_name().unwrap())).unwrap();
    }
    store.compact().unwrap();
    drop(store);
    // As a crash right after the merged blocks were renamed into place
    // leaves it: the merged blocks and every block they replaced.
    for e in fs::read_dir(saved.path()).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.path().join("blocks").join(p.file_name().unwrap())).unwrap();
    }
    assert_eq!(block_files(dir.path()), 30 + 2);
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(everything(&store), before, "each sample once");
    assert_eq!(block_files(dir.path()), 8, "the replaced blocks are removed on open");

    // A merged block that does not verify: its sources (still there) serve.
    drop(store);
    let merged = fs::read_dir(dir.path().join("blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().contains('-'))
        .unwrap();
    for e in fs::read_dir(saved.path()).unwrap() {
        let p = e.unwrap().path();
        fs::copy(&p, dir.path().join("blocks").join(p.file_name().unwrap())).unwrap();
    }
    let len = fs::metadata(&merged).unwrap().len();
    let f = fs::OpenOptions::new().write(true).open(&merged).unwrap();
    f.set_len(len - 3).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.stats().corrupt_blocks.load(Ordering::Relaxed), 1);
    assert_eq!(everything(&store), before, "served from the sources");
}

/// A window that never ends — every block starts in it, as when a sender
/// writes old times beside current ones — still merges, a dozen at a time.
#[test]
fn a_window_that_never_ends_still_merges() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut app = Appender::default();
    let (old, new) = (SeriesKey::new("old", [("h", "x")]), SeriesKey::new("new", [("h", "x")]));
    for i in 0..13i64 {
        let mut b = Batch::new(Timestamp(T0 + i));
        if i == 0 {
            b.defs = vec![(0, old.clone()), (1, new.clone())];
        }
        b.points.push((0, i as f64));
        store.append(&mut app, &b).unwrap();
        let mut b = Batch::new(Timestamp(T0 + 1000 * HOUR + i * SEC));
        b.points.push((1, i as f64));
        store.append(&mut app, &b).unwrap();
        store.flush().unwrap();
    }
    let before = everything(&store);
    assert_eq!(store.disk_usage().blocks, 13);
    assert_eq!(store.compact().unwrap(), 1);
    assert_eq!(store.disk_usage().blocks, 1);
    assert_eq!(everything(&store), before);
}
