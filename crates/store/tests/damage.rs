//! Issue 42: one damaged byte must cost at most what it damaged. A WAL
//! segment's magic, a series definition in the WAL, a block's index; and a
//! series whose head generation holds only a staleness marker (it panicked
//! the writer's flush). Each test failed before its fix.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::wal::{SEGMENT_MAGIC, encode_samples, encode_series, list_segments, segment_path};
use store::{Appender, DiskBudget, FsyncPolicy, Options, Retention, Store};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * SEC;
const SERIES: usize = 3;

fn opts(tiers: Vec<i64>) -> Options {
    Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(24 * 3600),
        retention: Retention { max_age: None, budget: DiskBudget::Unlimited },
        tiers,
        compaction_window: None,
        ..Options::default()
    }
}

fn key(i: usize) -> SeriesKey {
    SeriesKey::new("m", [("host", "h"), ("i", &i.to_string())])
}

fn value(i: usize, round: i64) -> f64 {
    (round * 10 + i as i64) as f64
}

/// Round `round` of every series (defined in round 0 of an appender).
fn round(round: i64, define: bool) -> Batch {
    let mut b = Batch::new(Timestamp(T0 + round * SEC));
    for i in 0..SERIES {
        if define {
            b.defs.push((i as u32, key(i)));
        }
        b.points.push((i as u32, value(i, round)));
    }
    b
}

fn append_rounds(store: &Store, rounds: std::ops::Range<i64>) {
    let mut app = Appender::default();
    for r in rounds.clone() {
        store.append(&mut app, &round(r, r == rounds.start)).unwrap();
    }
}

/// Every series the store lists, by key, with its samples.
fn everything(store: &Store) -> Vec<(SeriesKey, Vec<i64>, Vec<f64>)> {
    store
        .series(&Selector::all())
        .into_iter()
        .map(|(id, key)| {
            let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
            (key, ts, vals)
        })
        .collect()
}

/// What `rounds` of every series read back as.
fn expected(rounds: impl Iterator<Item = i64> + Clone) -> Vec<(SeriesKey, Vec<i64>, Vec<f64>)> {
    let mut out: Vec<_> = (0..SERIES)
        .map(|i| {
            let ts = rounds.clone().map(|r| T0 + r * SEC).collect();
            let vals = rounds.clone().map(|r| value(i, r)).collect();
            (key(i), ts, vals)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Asserts `got == want`, naming each series and its sample count on failure
/// (the samples themselves are too many to print).
#[track_caller]
fn assert_same(got: &[(SeriesKey, Vec<i64>, Vec<f64>)], want: &[(SeriesKey, Vec<i64>, Vec<f64>)], ctx: &str) {
    let brief = |s: &[(SeriesKey, Vec<i64>, Vec<f64>)]| {
        s.iter().map(|(k, ts, _)| format!("{k}: {} samples", ts.len())).collect::<Vec<_>>().join(", ")
    };
    assert!(got == want, "{ctx}: got [{}], want [{}]", brief(got), brief(want));
}

/// A figure of the store's report by name (None: the store has no such figure).
fn figure(store: &Store, name: &str) -> Option<f64> {
    store.report().iter().find(|f| f.key == name).map(model::report::Figure::as_f64)
}

fn damaged_dir(root: &Path) -> PathBuf {
    root.join("wal").join("damaged")
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Record boundaries of a WAL segment (magic excluded): (start, end, kind byte).
fn records(seg: &[u8]) -> Vec<(usize, usize, u8)> {
    let mut out = Vec::new();
    let mut pos = SEGMENT_MAGIC.len();
    while pos + 8 <= seg.len() {
        let len = u32::from_le_bytes(seg[pos..pos + 4].try_into().unwrap()) as usize;
        out.push((pos, pos + 8 + len, seg[pos + 8]));
        pos += 8 + len;
    }
    assert_eq!(pos, seg.len(), "a whole number of records");
    out
}

/// Issue 42 #13: one flipped byte in the 8-byte magic of a WAL segment lost
/// every sample in it, and the next flush deleted the file. Now its records
/// are read past the bad header, and the file is moved aside, not deleted.
#[test]
fn a_flipped_byte_in_a_wal_magic_loses_nothing_and_the_segment_is_kept_aside() {
    // Two segments, as two crashed runs leave them: 1 (rounds 0..100), 2 (100..150).
    let first = tempfile::tempdir().unwrap();
    let store = Store::open(first.path(), opts(vec![store::tier::MINUTE])).unwrap();
    append_rounds(&store, 0..100);
    let crashed = tempfile::tempdir().unwrap();
    common::crash_copy(first.path(), crashed.path());
    drop(store);
    let store = Store::open(crashed.path(), opts(vec![store::tier::MINUTE])).unwrap();
    append_rounds(&store, 100..150);
    let dir = tempfile::tempdir().unwrap();
    common::crash_copy(crashed.path(), dir.path());
    drop(store);

    let segments = list_segments(&dir.path().join("wal")).unwrap();
    assert_eq!(segments.len(), 2);
    for (seq, path) in &segments {
        // Both the older segment and the newest one: neither may lose anything.
        let case = tempfile::tempdir().unwrap();
        common::crash_copy(dir.path(), case.path());
        let path = case.path().join("wal").join(path.file_name().unwrap());
        let mut data = fs::read(&path).unwrap();
        data[3] ^= 0x20;
        fs::write(&path, &data).unwrap();

        let store = Store::open(case.path(), opts(vec![store::tier::MINUTE])).unwrap();
        assert_same(&everything(&store), &expected(0..150), &format!("segment {seq}: every acknowledged sample"));
        assert!(store.stats().wal_damaged_segments.load(Ordering::Relaxed) >= 1);
        store.flush().unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!path.exists(), "segment {seq}: no longer among the live segments");
        assert_eq!(
            files_in(&damaged_dir(case.path())),
            std::slice::from_ref(&name),
            "segment {seq}: kept aside, not deleted"
        );
        assert_eq!(fs::read(damaged_dir(case.path()).join(&name)).unwrap(), data, "as it was");
        assert_eq!(figure(&store, "wal_damaged_kept"), Some(1.0));
        drop(store);
        let store = Store::open(case.path(), opts(vec![store::tier::MINUTE])).unwrap();
        assert_same(&everything(&store), &expected(0..150), &format!("segment {seq}: in the block after the flush"));
    }
}

/// The damaged folder is bounded: the oldest files go past its limit.
#[test]
fn damaged_segments_kept_aside_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let limit = store::wal::DAMAGED_KEEP;
    for k in 0..limit as i64 + 3 {
        let store = Store::open(dir.path(), opts(vec![])).unwrap();
        append_rounds(&store, k * 10..k * 10 + 5);
        let crashed = tempfile::tempdir().unwrap();
        common::crash_copy(dir.path(), crashed.path());
        drop(store);
        // The run "crashed": its segment (the newest) gets a bad magic.
        let (_, newest) = list_segments(&crashed.path().join("wal")).unwrap().pop().unwrap();
        let mut data = fs::read(&newest).unwrap();
        data[0] ^= 1;
        fs::write(&newest, &data).unwrap();
        fs::remove_dir_all(dir.path()).unwrap();
        common::crash_copy(crashed.path(), dir.path());
        let store = Store::open(dir.path(), opts(vec![])).unwrap();
        store.flush().unwrap();
        let kept = files_in(&damaged_dir(dir.path()));
        assert_eq!(kept.len(), (k as usize + 1).min(limit), "after {} damaged segments: {kept:?}", k + 1);
        assert_same(&everything(&store), &expected((0..=k).flat_map(|j| j * 10..j * 10 + 5)), &format!("round {k}"));
    }
}

/// Issue 42 #14: one flipped byte in a series definition record dropped every
/// sample of that series in the segment, silently. The writer now writes
/// each definition twice, and replay takes either copy.
#[test]
fn a_damaged_series_definition_loses_none_of_its_samples() {
    let first = tempfile::tempdir().unwrap();
    let store = Store::open(first.path(), opts(vec![])).unwrap();
    append_rounds(&store, 0..50);
    let dir = tempfile::tempdir().unwrap();
    common::crash_copy(first.path(), dir.path());
    drop(store);
    let (_, seg) = list_segments(&dir.path().join("wal")).unwrap().pop().unwrap();
    let mut data = fs::read(&seg).unwrap();
    // The first definition of series 1: a byte of its key.
    let def = records(&data).into_iter().filter(|r| r.2 == 1).nth(1).unwrap();
    data[def.1 - 1] ^= 0x04;
    fs::write(&seg, &data).unwrap();

    let store = Store::open(dir.path(), opts(vec![])).unwrap();
    assert_same(&everything(&store), &expected(0..50), "all of series 1");
    assert_eq!(figure(&store, "wal_orphaned_samples"), Some(0.0));
    assert!(store.stats().wal_skipped_bytes.load(Ordering::Relaxed) > 0, "the damage is reported");
}

/// Where no copy of a definition survives (a segment from before the copies,
/// or both damaged), the samples are kept under a placeholder series naming
/// the segment and the WAL id, and counted; never dropped silently.
#[test]
fn samples_whose_definition_is_lost_are_kept_under_a_placeholder_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), opts(vec![])).unwrap());
    let wal = dir.path().join("wal");
    for (_, p) in list_segments(&wal).unwrap() {
        fs::remove_file(p).unwrap();
    }
    // As a writer before the copies wrote it: one definition per series.
    let mut seg = SEGMENT_MAGIC.to_vec();
    encode_series(&mut seg, 0, &key(0));
    let damaged_at = seg.len() + 12;
    encode_series(&mut seg, 1, &key(1));
    for r in 0..20 {
        encode_samples(&mut seg, T0 + r * SEC, [(0, value(0, r)), (1, value(1, r))].into_iter());
    }
    seg[damaged_at] ^= 0x40;
    fs::write(segment_path(&wal, 7), &seg).unwrap();

    let store = Store::open(dir.path(), opts(vec![])).unwrap();
    let placeholder = SeriesKey::new("kansoku_wal_orphan", [("segment", "0000000007"), ("wal_id", "1")]);
    let ts: Vec<i64> = (0..20).map(|r| T0 + r * SEC).collect();
    let got = everything(&store);
    let want = [
        (placeholder, ts.clone(), (0..20).map(|r| value(1, r)).collect()),
        (key(0), ts, (0..20).map(|r| value(0, r)).collect()),
    ];
    assert_same(&got, &want, "series 1 under a placeholder");
    assert_eq!(figure(&store, "wal_orphaned_samples"), Some(20.0));
    store.flush().unwrap();
    assert_eq!(files_in(&damaged_dir(dir.path())), ["0000000007.wal"], "not replayed whole: kept aside");
    drop(store);
    assert_same(&everything(&Store::open(dir.path(), opts(vec![])).unwrap()), &want, "after the flush");
}

/// The footer's (index offset, index length).
fn index_of(block: &[u8]) -> (usize, usize) {
    let f = block.len() - 20;
    let off = u64::from_le_bytes(block[f..f + 8].try_into().unwrap()) as usize;
    let len = u32::from_le_bytes(block[f + 8..f + 12].try_into().unwrap()) as usize;
    (off, len)
}

fn only_block(root: &Path) -> PathBuf {
    let blocks: Vec<PathBuf> = fs::read_dir(root.join("blocks")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(blocks.len(), 1, "{blocks:?}");
    blocks[0].clone()
}

/// Issue 42 #15: one flipped byte in a block's index skipped the whole block,
/// every intact chunk with it. Now the chunks are found by their own frames.
#[test]
fn a_flipped_byte_in_a_block_index_loses_no_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
    append_rounds(&store, 0..600);
    store.flush().unwrap();
    let tiers: Vec<_> =
        (0..SERIES as u32).map(|id| store.read_tier(id, store::tier::MINUTE, Timestamp::MIN, Timestamp::MAX)).collect();
    assert!(tiers.iter().all(|t| t.ts.len() >= 10));
    drop(store);
    let path = only_block(dir.path());
    let good = fs::read(&path).unwrap();
    let (off, len) = index_of(&good);
    for at in [off, off + len / 2, off + len - 1, good.len() - 10, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x08;
        fs::write(&path, &bad).unwrap();
        let store = Store::open(dir.path(), opts(vec![store::tier::MINUTE])).unwrap();
        assert_same(&everything(&store), &expected(0..600), &format!("flip at {at}"));
        assert_eq!(figure(&store, "recovered_blocks"), Some(1.0), "flip at {at}");
        assert_eq!(store.stats().corrupt_blocks.load(Ordering::Relaxed), 0);
        assert_eq!(store.stats().corrupt_chunks.load(Ordering::Relaxed), 0);
        for (id, want) in tiers.iter().enumerate() {
            let got = store.read_tier(id as u32, store::tier::MINUTE, Timestamp::MIN, Timestamp::MAX);
            assert_eq!(&got, want, "flip at {at}: tier of series {id}");
        }
    }
}

/// Issue 42 #21: a series whose samples in a head generation are all
/// staleness markers (a process that ended just after a flush) has no tier
/// periods; the flush indexed `ts[0]` of that empty tier and panicked the
/// writer thread. Now the empty tier is not written.
#[test]
fn a_generation_of_only_staleness_markers_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(vec![store::tier::SECOND, store::tier::MINUTE])).unwrap();
    let stale = f64::from_bits(model::STALE_NAN);
    let proc_key = SeriesKey::new("kansoku_process_cpu_seconds_total", [("host", "h"), ("pid", "42")]);
    let mut app = Appender::default();
    let mut b = Batch::new(Timestamp(T0));
    b.defs.push((0, key(0)));
    b.defs.push((1, proc_key.clone()));
    b.points.extend([(0, 1.0), (1, 3.5)]);
    store.append(&mut app, &b).unwrap();
    store.flush().unwrap();
    // The process ended: its series' next (and last) sample is the marker.
    let mut b = Batch::new(Timestamp(T0 + SEC));
    b.points.extend([(0, 2.0), (1, stale)]);
    store.append(&mut app, &b).unwrap();
    store.flush().unwrap();
    assert_eq!(store.stats().flush_errors.load(Ordering::Relaxed), 0);
    drop(store);

    let store = Store::open(dir.path(), opts(vec![store::tier::SECOND, store::tier::MINUTE])).unwrap();
    let id = store.series(&Selector::all()).into_iter().find(|(_, k)| *k == proc_key).unwrap().0;
    let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
    assert_eq!(ts, [T0, T0 + SEC]);
    assert_eq!((vals[0], vals[1].to_bits()), (3.5, model::STALE_NAN));
    for res in [store::tier::SECOND, store::tier::MINUTE] {
        let t = store.read_tier(id, res, Timestamp::MIN, Timestamp::MAX);
        assert_eq!((t.count.iter().sum::<f64>(), t.sum.iter().sum::<f64>()), (1.0, 3.5), "the marker is no sample");
    }
}

/// Issue 42, the class: a flipped bit anywhere in a WAL segment (its magic,
/// a definition or either copy of it, a samples record, a length or a
/// checksum) costs at most the samples record holding it; every other
/// record is read back, its samples under their own series, and a segment
/// that did not replay whole is kept aside, never deleted.
#[test]
fn every_flipped_byte_of_a_wal_segment_loses_at_most_its_record() {
    // Rounds 0..6 of series 0..3, and series 3 from round 3: one append a round.
    let rounds = 6;
    let late = SeriesKey::new("m", [("host", "h"), ("i", "late")]);
    let src = tempfile::tempdir().unwrap();
    let store = Store::open(src.path(), opts(vec![])).unwrap();
    let mut app = Appender::default();
    for r in 0..rounds {
        let mut b = round(r, r == 0);
        if r >= 3 {
            if r == 3 {
                b.defs.push((3, late.clone()));
            }
            b.points.push((3, -(r as f64)));
        }
        store.append(&mut app, &b).unwrap();
    }
    let base = tempfile::tempdir().unwrap();
    common::crash_copy(src.path(), base.path());
    drop(store);
    let (_, seg) = list_segments(&base.path().join("wal")).unwrap().pop().unwrap();
    let seg_name = seg.file_name().unwrap().to_owned();
    let good = fs::read(&seg).unwrap();
    let recs = records(&good);
    let samples: Vec<(usize, usize)> = recs.iter().filter(|r| r.2 == 2).map(|r| (r.0, r.1)).collect();
    assert_eq!(samples.len(), rounds as usize);
    assert_eq!(recs.iter().filter(|r| r.2 == 1).count(), 2 * (SERIES + 1), "each definition twice");
    // Everything, but for the round whose samples record is `lost`.
    let want = |lost: Option<i64>| {
        let kept = (0..rounds).filter(move |r| Some(*r) != lost);
        let mut w = expected(kept.clone());
        let late_rounds: Vec<i64> = kept.filter(|r| *r >= 3).collect();
        w.push((
            late.clone(),
            late_rounds.iter().map(|r| T0 + r * SEC).collect(),
            late_rounds.iter().map(|r| -(*r as f64)).collect(),
        ));
        w.sort_by(|a, b| a.0.cmp(&b.0));
        w
    };
    for i in 0..good.len() {
        let case = tempfile::tempdir().unwrap();
        common::crash_copy(base.path(), case.path());
        let mut bad = good.clone();
        bad[i] ^= 1 << (i % 8);
        let path = case.path().join("wal").join(&seg_name);
        fs::write(&path, &bad).unwrap();
        let store = Store::open(case.path(), opts(vec![])).unwrap();
        let lost = samples.iter().position(|s| (s.0..s.1).contains(&i)).map(|k| k as i64);
        assert_same(&everything(&store), &want(lost), &format!("flip at {i}"));
        assert_eq!(figure(&store, "wal_orphaned_samples"), Some(0.0), "flip at {i}");
        store.flush().unwrap();
        let in_last = i >= recs.last().unwrap().0;
        let kept = files_in(&damaged_dir(case.path()));
        assert!(
            kept == [seg_name.to_string_lossy()] || (in_last && kept.is_empty()),
            "flip at {i}: the segment is kept aside (only a torn-looking tail is cut): {kept:?}"
        );
    }
}
