//! What a store that keeps every sample must survive: a time at the edge of
//! `i64`, damage in the middle of the WAL's newest segment, and a range that
//! cuts a downsampled tier's period. Each test failed before its fix.

mod common;

use std::fs;
use std::sync::atomic::Ordering;
use std::time::Duration;

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::query::{Agg, RangeQuery, range};
use store::wal::{SEGMENT_MAGIC, encode_samples, encode_series, list_segments, segment_path};
use store::{Appender, DiskBudget, FsyncPolicy, Options, Retention, Store};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * SEC;

fn opts(tiers: Vec<i64>) -> Options {
    Options {
        fsync: FsyncPolicy::Always,
        block_duration: Duration::from_secs(24 * 3600),
        retention: Retention { max_age: None, budget: DiskBudget::Unlimited },
        tiers,
        ..Options::default()
    }
}

fn key() -> SeriesKey {
    SeriesKey::new("m", [("host", "h")])
}

fn batch(t: i64, v: f64, define: bool) -> Batch {
    let mut b = Batch::new(Timestamp(t));
    if define {
        b.defs.push((0, key()));
    }
    b.points.push((0, v));
    b
}

fn all(store: &Store) -> (Vec<i64>, Vec<f64>) {
    let ids = store.series(&Selector::all());
    ids.first().map_or((vec![], vec![]), |(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX))
}

#[test]
fn a_time_past_the_storable_range_is_refused_counted_and_harms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![store::tier::SECOND, store::tier::MINUTE])).unwrap();
    let mut app = Appender::default();
    store.append(&mut app, &batch(T0, 1.0, true)).unwrap();
    for t in [i64::MAX, Timestamp::STORABLE_END.0, -1, i64::MIN] {
        store.append(&mut app, &batch(t, 9.0, false)).unwrap();
    }
    store.append(&mut app, &batch(T0 + SEC, 2.0, false)).unwrap();
    assert_eq!(store.stats().out_of_range_dropped.load(Ordering::Relaxed), 4);
    // Once, the flush of a block holding i64::MAX looped, allocating, and so
    // did every restart, since the point stayed in the WAL.
    store.flush().unwrap();
    drop(store);
    let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
    assert_eq!(all(&store), (vec![T0, T0 + SEC], vec![1.0, 2.0]));
}

/// `time >= 5s AND time < 3s` reaches the store as a reversed range: it
/// reads nothing, from the head and from blocks (it panicked in the head;
/// found by the `influxql` fuzz target).
#[test]
fn a_reversed_range_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![])).unwrap();
    let mut app = Appender::default();
    for i in 0..3 {
        store.append(&mut app, &batch(T0 + i * SEC, i as f64, i == 0)).unwrap();
    }
    let reversed = |store: &Store| store.read(0, Timestamp(T0 + 2 * SEC), Timestamp(T0));
    assert_eq!(reversed(&store), (vec![], vec![]));
    store.flush().unwrap();
    assert_eq!(reversed(&store), (vec![], vec![]));
    assert_eq!(all(&store).0.len(), 3);
}

#[test]
fn a_wal_written_with_such_a_time_replays_without_it() {
    // A data directory from before the refusal: the WAL holds i64::MAX.
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap());
    let wal = dir.path().join("wal");
    for (_, p) in list_segments(&wal).unwrap() {
        fs::remove_file(p).unwrap();
    }
    let mut seg = SEGMENT_MAGIC.to_vec();
    encode_series(&mut seg, 0, &key());
    encode_samples(&mut seg, T0, [(0, 1.0)].into_iter());
    encode_samples(&mut seg, i64::MAX, [(0, 2.0)].into_iter());
    fs::write(segment_path(&wal, 7), seg).unwrap();

    let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
    assert_eq!(store.stats().out_of_range_dropped.load(Ordering::Relaxed), 1);
    store.flush().unwrap();
    assert_eq!(all(&store), (vec![T0], vec![1.0]));
}

/// A store that acknowledged `n` one-sample rounds and crashed: its
/// directory, and the newest WAL segment in it.
fn crashed_after(n: i64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![])).unwrap();
    let mut app = Appender::default();
    for i in 0..n {
        store.append(&mut app, &batch(T0 + i * SEC, i as f64, i == 0)).unwrap();
    }
    let crashed = tempfile::tempdir().unwrap();
    common::crash_copy(dir.path(), crashed.path());
    drop(store);
    let newest = list_segments(&crashed.path().join("wal")).unwrap().pop().unwrap().1;
    (crashed, newest)
}

#[test]
fn damage_inside_the_newest_segment_keeps_the_records_after_it() {
    let n = 400;
    let (crashed, newest) = crashed_after(n);
    let mut data = fs::read(&newest).unwrap();
    let len_before = data.len();
    // Four bytes in the middle: inside one record's payload.
    let mid = data.len() / 2;
    for b in &mut data[mid..mid + 4] {
        *b ^= 0xa5;
    }
    fs::write(&newest, &data).unwrap();

    let store = Store::open(crashed.path(), opts(vec![])).unwrap();
    let (ts, vals) = all(&store);
    // One round's record, maybe two, held the damaged bytes; every other
    // acknowledged sample is there — those after the damage too.
    assert!(ts.len() >= n as usize - 2 && ts.len() < n as usize, "kept {} of {n}", ts.len());
    assert_eq!(ts.last(), Some(&(T0 + (n - 1) * SEC)), "the records after the damage were replayed");
    assert!(vals.iter().zip(&ts).all(|(v, t)| *v == ((t - T0) / SEC) as f64));
    assert!(store.stats().wal_skipped_bytes.load(Ordering::Relaxed) > 0);
    assert_eq!(store.stats().wal_damaged_segments.load(Ordering::Relaxed), 1);
    assert_eq!(fs::metadata(newest).unwrap().len() as usize, len_before, "not truncated");
    drop(store);
    // Reported again, never lost, on the next open too.
    let store = Store::open(crashed.path(), opts(vec![])).unwrap();
    assert_eq!(all(&store).0, ts);
}

#[test]
fn a_torn_tail_is_still_cut() {
    let (crashed, newest) = crashed_after(50);
    let mut data = fs::read(&newest).unwrap();
    let whole = data.len() as u64;
    data.extend_from_slice(&[0x30, 0, 0, 0, 1, 2, 3, 4, 5]); // half a record
    fs::write(&newest, &data).unwrap();
    let store = Store::open(crashed.path(), opts(vec![])).unwrap();
    assert_eq!(all(&store).0.len(), 50);
    assert_eq!(fs::metadata(newest).unwrap().len(), whole);
    assert_eq!(store.stats().wal_skipped_bytes.load(Ordering::Relaxed), 0);
}

#[test]
fn a_tier_answers_exactly_as_raw_samples_do_where_the_range_cuts_a_bucket() {
    let raw_dir = tempfile::tempdir().unwrap();
    let tier_dir = tempfile::tempdir().unwrap();
    let raw = Store::open(raw_dir.path(), opts(vec![])).unwrap();
    let tiered = Store::open(tier_dir.path(), opts(vec![store::tier::SECOND, store::tier::MINUTE])).unwrap();
    let (mut a, mut b) = (Appender::default(), Appender::default());
    // 20 minutes at 100 ms, values that make min, max and count differ per minute.
    let start = T0 - T0 % (60 * SEC);
    for i in 0..12_000i64 {
        let v = ((i * 7919) % 100) as f64;
        raw.append(&mut a, &batch(start + i * SEC / 10, v, i == 0)).unwrap();
        tiered.append(&mut b, &batch(start + i * SEC / 10, v, i == 0)).unwrap();
    }
    raw.flush().unwrap();
    tiered.flush().unwrap();
    assert!(!tiered.tiers().is_empty());
    let mut rng = fastrand::Rng::with_seed(7);
    for round in 0..120 {
        let mut from = start + rng.i64(0..1200 * SEC);
        let mut to = from + rng.i64(0..900 * SEC);
        let step = [SEC, 10 * SEC, 60 * SEC, 120 * SEC][round % 4];
        if round >= 60 {
            // Whole seconds or whole minutes, cutting buckets all the same:
            // the tier periods inside the range answer alone.
            let unit = [SEC, 60 * SEC][round % 2];
            from -= from.rem_euclid(unit);
            to = to - to.rem_euclid(unit) + unit - 1;
        }
        let q = RangeQuery {
            selector: Selector::all(),
            from: Timestamp(from),
            to: Timestamp(to),
            step_ns: Some(step),
            points: None,
            rate: false,
            aggs: vec![Agg::Count, Agg::Min, Agg::Max, Agg::Avg],
            group: None,
        };
        let (want, got) = (range(&raw, &q).unwrap(), range(&tiered, &q).unwrap());
        assert_eq!(got.times, want.times);
        for (g, w) in got.series.iter().zip(&want.series) {
            for (i, (gv, wv)) in g.values.iter().zip(&w.values).enumerate() {
                let close = match (gv, wv) {
                    (Some(x), Some(y)) => (x - y).abs() <= 1e-9 * y.abs().max(1.0),
                    (x, y) => x == y,
                };
                assert!(close, "{:?} bucket {i} from {from} to {to} step {step}: tier {gv:?}, raw {wv:?}", g.agg);
            }
        }
    }
}

#[test]
fn bucket_arithmetic_holds_at_the_ends_of_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
    let mut app = Appender::default();
    store.append(&mut app, &batch(T0, 1.0, true)).unwrap();
    let q = |from, to, step_ns, points| RangeQuery {
        selector: Selector::all(),
        from: Timestamp(from),
        to: Timestamp(to),
        step_ns,
        points,
        rate: false,
        aggs: vec![Agg::Count],
        group: None,
    };
    // The whole of i64 in ten points: one of them holds the sample.
    let f = range(&store, &q(i64::MIN, i64::MAX, None, Some(10))).unwrap();
    assert!(f.times.len() <= 11);
    assert_eq!(f.series[0].values.iter().flatten().sum::<f64>(), 1.0);
    // A step past ten years, or not positive: a clear refusal.
    for step in [i64::MAX, 0, -5, store::query::STEP_NS_MAX + 1] {
        let e = range(&store, &q(0, T0, Some(step), None)).unwrap_err();
        assert!(e.to_string().contains("step must be from 1ns"), "{e}");
    }
    // Too many buckets names a count a person can read.
    let e = range(&store, &q(i64::MIN, i64::MAX, Some(1), None)).unwrap_err().to_string();
    assert!(e.contains("7258118400000000000 cells"), "{e}");
}

#[test]
fn blocks_do_not_each_hold_a_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let n_blocks = 150;
    {
        let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
        let mut app = Appender::default();
        for b in 0..n_blocks {
            store.append(&mut app, &batch(T0 + b * SEC, b as f64, b == 0)).unwrap();
            store.flush().unwrap();
        }
        assert_eq!(store.disk_usage().blocks, n_blocks as u64);
    }
    // Reopened: nothing open until read; reading every block keeps a bounded few open.
    let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
    assert_eq!(store.open_block_files(), 0);
    let (ts, vals) = all(&store);
    assert_eq!(ts.len(), n_blocks as usize);
    assert_eq!(vals[149], 149.0);
    assert!(store.open_block_files() <= 64, "{} block files open", store.open_block_files());
    assert_eq!(store.stats().corrupt_chunks.load(Ordering::Relaxed), 0);
}
