//! The store against a `BTreeMap` model: random appends (in order, and
//! late: older times and rewrites, the last write winning), flushes,
//! compactions, reopens (clean and crash-like) and read-only opens must all
//! serve exactly what the model holds.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

type Model = BTreeMap<SeriesKey, BTreeMap<i64, f64>>;

/// Both tier resolutions, so every test covers them.
fn opts() -> Options {
    Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(3600),
        head_samples_max: 1 << 20,
        tiers: vec![store::tier::SECOND, store::tier::MINUTE],
        // Windows a few seconds wide: the runs' compactions merge blocks
        // that late points made overlap.
        compaction_window: Some(Duration::from_secs(5)),
        ..Options::default()
    }
}

fn check(store: &Store, model: &Model, ctx: &str) {
    let all = store.series(&Selector::all());
    assert_eq!(all.len(), model.len(), "{ctx}: series count");
    for (id, key) in all {
        let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
        let want: Vec<(i64, f64)> = model[&key].iter().map(|(&t, &v)| (t, v)).collect();
        let got: Vec<(i64, f64)> = ts.into_iter().zip(vals).collect();
        assert_eq!(got, want, "{ctx}: {key}");
        // Tiers (from blocks, the head, or both) agree with the raw samples.
        let (tt, tv): (Vec<i64>, Vec<f64>) = want.iter().copied().unzip();
        for (res, _) in store::tier::RESOLUTIONS {
            let tier = store.read_tier(id, res, Timestamp::MIN, Timestamp::MAX);
            let expect = store::tier::Tier::build(&tt, &tv, res);
            assert_eq!(tier.ts, expect.ts, "{ctx}: {key} tier {res}");
            assert_eq!((&tier.min, &tier.max, &tier.count), (&expect.min, &expect.max, &expect.count), "{ctx}: {key}");
            for (a, b) in tier.sum.iter().zip(&expect.sum) {
                assert!(
                    a.to_bits() == b.to_bits() || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
                    "{ctx}: {key} sum {a} vs {b}"
                );
            }
        }
        // A sub-range read agrees with the model too.
        if let (Some(&(a, _)), Some(&(b, _))) = (want.get(want.len() / 3), want.get(2 * want.len() / 3)) {
            let (ts, _) = store.read(id, Timestamp(a), Timestamp(b));
            let n = want.iter().filter(|(t, _)| (a..=b).contains(t)).count();
            assert_eq!(ts.len(), n, "{ctx}: {key} sub-range");
        }
    }
}

fn run(seed: u64, dir: &Path) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let keys: Vec<SeriesKey> = (0..rng.usize(1..12))
        .map(|i| SeriesKey::new(format!("m{}", i % 3), [("host", "h".to_string()), ("i", i.to_string())]))
        .collect();
    let mut model = Model::new();
    let mut store = Store::open(dir, opts()).unwrap();
    let mut appender = Appender::default();
    let mut declared = vec![false; keys.len()];
    let mut t = 1_700_000_000_000_000_000i64;
    for step in 0..rng.usize(20..200) {
        match rng.u8(0..100) {
            0..=84 => {
                // One batch in four at an earlier time (a backfill, a
                // retry, a rewrite of a kept point), the rest moving on.
                let at = if rng.u8(0..4) == 0 {
                    t - rng.i64(0..300) * 100_000_000
                } else {
                    t += rng.i64(1..3) * 100_000_000;
                    t
                };
                let mut b = Batch::new(Timestamp(at));
                for (i, key) in keys.iter().enumerate() {
                    if rng.bool() {
                        continue;
                    }
                    if !declared[i] {
                        b.defs.push((i as u32, key.clone()));
                        declared[i] = true;
                    }
                    let v = if rng.bool() { rng.u32(..) as f64 / 100.0 } else { f64::from_bits(rng.u64(..)) };
                    let v = if v.is_nan() { 0.5 } else { v };
                    b.points.push((i as u32, v));
                    model.entry(key.clone()).or_default().insert(at, v);
                }
                store.append(&mut appender, &b).unwrap();
            }
            85..=88 => store.flush().unwrap(),
            89..=91 => {
                store.flush().unwrap();
                store.compact().unwrap();
            }
            92..=95 => {
                // Clean restart.
                store.close().unwrap();
                drop(store);
                store = Store::open(dir, opts()).unwrap();
                appender = Appender::default();
                declared.fill(false);
            }
            _ => {
                // Crash: drop without close; the WAL must carry everything.
                drop(store);
                store = Store::open(dir, opts()).unwrap();
                appender = Appender::default();
                declared.fill(false);
            }
        }
        if step % 10 == 0 {
            check(&store, &model, &format!("seed {seed} step {step}"));
            let ro = Store::open_read_only(dir).unwrap();
            check(&ro, &model, &format!("seed {seed} step {step} read-only"));
        }
    }
    check(&store, &model, &format!("seed {seed} end"));
    drop(store);
    check(&Store::open(dir, opts()).unwrap(), &model, &format!("seed {seed} reopened"));
}

#[test]
fn matches_btreemap_model() {
    for seed in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        run(seed, dir.path());
    }
}

#[test]
fn torn_wal_tail_keeps_every_whole_record() {
    let dir = tempfile::tempdir().unwrap();
    let key = SeriesKey::new("m", [("host", "h")]);
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let mut app = Appender::default();
        for i in 0..30i64 {
            let mut b = Batch::new(Timestamp(1_000 + i));
            if i == 0 {
                b.defs.push((0, key.clone()));
            }
            b.points.push((0, i as f64));
            store.append(&mut app, &b).unwrap();
        }
    }
    let seg = fs::read_dir(dir.path().join("wal")).unwrap().next().unwrap().unwrap().path();
    let full = fs::read(&seg).unwrap();
    let mut last_n = 0;
    for cut in (0..=full.len()).rev() {
        let copy = tempfile::tempdir().unwrap();
        for entry in ["KANSOKU", "wal", "blocks"] {
            let from = dir.path().join(entry);
            if from.is_dir() {
                fs::create_dir(copy.path().join(entry)).unwrap();
            } else {
                fs::copy(&from, copy.path().join(entry)).unwrap();
            }
        }
        fs::write(copy.path().join("wal").join(seg.file_name().unwrap()), &full[..cut]).unwrap();
        let store = Store::open(copy.path(), opts()).unwrap();
        let ids = store.series(&Selector::all());
        let n = ids.first().map_or(0, |(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX).0.len());
        let (_, vals) = ids.first().map_or((vec![], vec![]), |(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX));
        assert_eq!(vals, (0..n).map(|i| i as f64).collect::<Vec<_>>(), "cut {cut}: not a clean prefix");
        if cut == full.len() {
            assert_eq!(n, 30);
        }
        assert!(cut == full.len() || n <= last_n || last_n == 0, "cut {cut}");
        last_n = n;
        // The torn tail was cut off on disk: appending after recovery works and survives.
        let mut app = Appender::default();
        let mut b = Batch::new(Timestamp(10_000));
        b.defs.push((0, key.clone()));
        b.points.push((0, 99.0));
        store.append(&mut app, &b).unwrap();
        drop(store);
        let store = Store::open(copy.path(), opts()).unwrap();
        let (id, _) = store.series(&Selector::all())[0].clone();
        let (ts, _) = store.read(id, Timestamp::MIN, Timestamp::MAX);
        assert_eq!(ts.len(), n + 1, "cut {cut}: sample appended after recovery lost");
    }
}

#[test]
fn directory_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("someone-elses-file"), "x").unwrap();
    let e = Store::open(dir.path(), opts()).unwrap_err().to_string();
    assert!(e.contains("is not a kansoku data directory"), "{e}");
    assert!(fs::read_dir(dir.path()).unwrap().count() == 1, "nothing written into a foreign directory");

    let ours = tempfile::tempdir().unwrap();
    let _held = Store::open(ours.path(), opts()).unwrap();
    let e = Store::open(ours.path(), opts()).unwrap_err().to_string();
    assert!(e.contains("in use by another kansoku") && e.contains(&std::process::id().to_string()), "{e}");
    assert!(Store::open_read_only(ours.path()).is_ok(), "read-only works while a writer runs");

    let e = Store::open_read_only(&dir.path().join("nope")).unwrap_err().to_string();
    assert!(e.contains("does not exist"), "{e}");
}

#[test]
fn corrupt_block_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let key = SeriesKey::new("m", [("host", "h")]);
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let mut app = Appender::default();
        let mut b = Batch::new(Timestamp(1));
        b.defs.push((0, key.clone()));
        b.points.push((0, 1.0));
        store.append(&mut app, &b).unwrap();
        store.flush().unwrap();
        let mut b = Batch::new(Timestamp(2));
        b.points.push((0, 2.0));
        store.append(&mut app, &b).unwrap();
        store.flush().unwrap();
    }
    let blocks: Vec<_> = fs::read_dir(dir.path().join("blocks")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(blocks.len(), 2);
    let first = blocks.iter().min().unwrap();
    let mut data = fs::read(first).unwrap();
    // Every byte after the magic: its index and its chunks' frames. (One
    // damaged byte, in the footer say, no longer loses a block: its frames
    // are scanned; `tests/damage.rs`.)
    data[8..].fill(0x5a);
    fs::write(first, data).unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.stats().corrupt_blocks.load(std::sync::atomic::Ordering::Relaxed), 1);
    let (id, _) = store.series(&Selector::all())[0].clone();
    assert_eq!(store.read(id, Timestamp::MIN, Timestamp::MAX), (vec![2], vec![2.0]));
}

/// A block truncated at every offset, or with a bit flipped at every byte, is
/// reported (a corrupt block or chunk, or a block recovered without its
/// index, counted) and never yields a sample that was not written; every
/// series whose chunk holds no damaged byte is still served, whole.
#[test]
fn damaged_block_never_serves_wrong_samples() {
    let src = tempfile::tempdir().unwrap();
    let keys: Vec<SeriesKey> = (0..3).map(|i| SeriesKey::new("m", [("i", i.to_string())])).collect();
    let mut truth: Model = Model::new();
    {
        let store = Store::open(src.path(), opts()).unwrap();
        let mut app = Appender::default();
        for t in 0..40i64 {
            let mut b = Batch::new(Timestamp(1000 + t * 100));
            for (i, k) in keys.iter().enumerate() {
                if t == 0 {
                    b.defs.push((i as u32, k.clone()));
                }
                let v = (t * (i as i64 + 1)) as f64 * 0.25;
                b.points.push((i as u32, v));
                truth.entry(k.clone()).or_default().insert(1000 + t * 100, v);
            }
            store.append(&mut app, &b).unwrap();
        }
        store.close().unwrap();
    }
    let block = fs::read_dir(src.path().join("blocks")).unwrap().next().unwrap().unwrap().path();
    let data = fs::read(&block).unwrap();
    let whole = truth.values().map(BTreeMap::len).sum::<usize>();
    // Where each raw chunk is (the first entries, one per series); their
    // keys frame ends where the index starts (nine entries: one frame).
    let index = store::read_block_meta(&block).unwrap();
    let keys_end = u64::from_le_bytes(data[data.len() - 20..data.len() - 12].try_into().unwrap()) as usize;
    let chunks: Vec<std::ops::Range<usize>> =
        index.entries[..keys.len()].iter().map(|e| e.offset as usize..(e.offset + u64::from(e.len)) as usize).collect();
    // (raw samples served, or fewer than all when a tier was missing; damage reported)
    let check = |bad: &[u8], ctx: &str| {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("blocks")).unwrap();
        fs::copy(src.path().join("KANSOKU"), dir.path().join("KANSOKU")).unwrap();
        fs::write(dir.path().join("blocks").join(block.file_name().unwrap()), bad).unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let mut served = 0;
        let mut served_tiers_short = false;
        for (id, key) in store.series(&Selector::all()) {
            let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
            for (t, v) in ts.iter().zip(&vals) {
                assert_eq!(truth[&key].get(t).map(|x| x.to_bits()), Some(v.to_bits()), "{ctx}: {key} at {t}");
            }
            assert!(ts.is_empty() || ts.len() == truth[&key].len(), "{ctx}: {key}: a chunk is whole or absent");
            served += ts.len();
            // Tiers: exactly those of the true samples, or nothing.
            let (tt, tv): (Vec<i64>, Vec<f64>) = truth[&key].iter().map(|(t, v)| (*t, *v)).unzip();
            for (res, _) in store::tier::RESOLUTIONS {
                let tier = store.read_tier(id, res, Timestamp::MIN, Timestamp::MAX);
                if tier.ts.is_empty() {
                    served_tiers_short = true;
                } else {
                    assert_eq!(tier, store::tier::Tier::build(&tt, &tv, res), "{ctx}: {key} tier {res}");
                }
            }
        }
        let st = store.stats();
        let reported = st.corrupt_blocks.load(std::sync::atomic::Ordering::Relaxed)
            + st.corrupt_chunks.load(std::sync::atomic::Ordering::Relaxed)
            + st.recovered_blocks.load(std::sync::atomic::Ordering::Relaxed);
        // A tier is missing only where its raw samples are (it is built from them otherwise).
        assert!(!served_tiers_short || served < whole, "{ctx}: a tier missing beside its raw samples");
        (served, reported)
    };
    let per_series = whole / keys.len();
    assert_eq!(check(&data, "intact"), (whole, 0));
    for cut in 0..data.len() {
        let (served, reported) = check(&data[..cut], &format!("cut at {cut}"));
        // A chunk frame ends where its chunk does; its key is in the keys frame.
        let before_cut = chunks.iter().filter(|c| c.end <= cut && keys_end <= cut).count();
        assert_eq!(served, before_cut * per_series, "cut at {cut}: the series whose chunk and key are whole before it");
        assert!(reported >= 1, "cut at {cut}: reported");
    }
    for i in 0..data.len() {
        let mut bad = data.clone();
        bad[i] ^= 0x10;
        let (served, reported) = check(&bad, &format!("flip at {i}"));
        let hit = chunks.iter().filter(|c| c.contains(&i)).count();
        assert_eq!(served, whole - hit * per_series, "flip at {i}: all but the series whose chunk holds it");
        assert!(reported >= 1 || served == whole, "flip at {i}: a loss reported ({reported})");
    }
}

/// Concurrent appenders with fsync on every acknowledgement: every
/// acknowledged batch is there after reopen, and they shared fsyncs.
#[test]
fn group_commit_shares_fsyncs_and_keeps_every_ack() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let threads = 8;
    let per = 150;
    {
        let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Always, ..opts() }).unwrap();
        std::thread::scope(|s| {
            for th in 0..threads {
                let store = &store;
                s.spawn(move || {
                    let mut app = Appender::default();
                    for i in 0..per {
                        let mut b = Batch::new(Timestamp(1 + i));
                        if i == 0 {
                            b.defs.push((0, SeriesKey::new("m", [("thread", th.to_string())])));
                        }
                        b.points.push((0, i as f64));
                        store.append(&mut app, &b).unwrap();
                        let mut ev = codec::events::EventBatch { cpu: th, ..Default::default() };
                        ev.push(1 + i, th, th, i as u64);
                        let stream = SeriesKey::new("perf", [("host", "h")]);
                        store.events().append(&stream, &mut ev, codec::events::Encoding::Fast).unwrap();
                    }
                });
            }
        });
        let (wal, events) = store.fsyncs();
        let appends = u64::from(threads) * per as u64;
        assert!(wal >= 1 && wal <= appends && events >= 1 && events <= appends, "{wal} {events}");
        // Dropped without close(): no final sync, no flush.
    }
    let store = Store::open(dir.path(), opts()).unwrap();
    for (id, key) in store.series(&Selector::all()) {
        let (ts, _) = store.read(id, Timestamp::MIN, Timestamp::MAX);
        assert_eq!(ts, (1..=per).collect::<Vec<i64>>(), "{key}");
    }
    let q = store::events::EventQuery { streams: Selector::all(), cpus: vec![], from: i64::MIN, to: i64::MAX };
    let top = store.events().top(&q, codec::events::Column::Cpu, 100);
    assert_eq!(top.total, u64::from(threads) * per as u64);
    assert!(top.rows.iter().all(|&(_, n)| n == per as u64));
}

/// A bucketed query answered from tiers equals the same query over raw
/// samples (min, max, count exactly; avg to rounding), across blocks and
/// head: for floats (XOR chunks) and for decimals, whose tier minima and
/// maxima a query folds undivided (`Tier::decode_for_folding`).
#[test]
fn tier_answers_match_raw_answers() {
    tier_answers_match_raw(|rng| rng.f64() * 100.0);
    tier_answers_match_raw(|rng| f64::from(rng.u32(0..1_000_000)) / 100.0);
    tier_answers_match_raw(|rng| f64::from(rng.u32(0..1_000)) * 4096.0 - 1e6);
}

fn tier_answers_match_raw(value: impl Fn(&mut fastrand::Rng) -> f64) {
    use store::query::{Agg, RangeQuery, downsample, range};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut app = Appender::default();
    let t0 = 1_700_000_000_050_000_000i64; // not on a second
    let mut rng = fastrand::Rng::with_seed(3);
    for i in 0..6000i64 {
        let mut b = Batch::new(Timestamp(t0 + i * 100_000_000 + rng.i64(0..1000)));
        if i == 0 {
            b.defs.push((0, SeriesKey::new("g", [("host", "a")])));
        }
        b.points.push((0, value(&mut rng)));
        store.append(&mut app, &b).unwrap();
        if i % 1700 == 1699 {
            store.flush().unwrap(); // blocks end mid-second
        }
    }
    let (id, _) = store.series(&Selector::all())[0].clone();
    let (ts, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
    // A reader finds the tiers the blocks hold, whatever its own options.
    assert_eq!(Store::open_read_only(dir.path()).unwrap().tiers(), [store::tier::SECOND, store::tier::MINUTE]);
    for (points, step) in [(100, 7_000_000_000i64), (7, 120_000_000_000)] {
        let q = RangeQuery {
            selector: Selector::all(),
            from: Timestamp(t0 - 50_000_000),
            to: Timestamp(t0 + 600_000_000_000),
            step_ns: None,
            points: Some(points),
            rate: false,
            aggs: vec![Agg::Min, Agg::Max, Agg::Avg, Agg::Count],
            group: None,
        };
        let f = range(&store, &q).unwrap();
        assert_eq!(f.step_ns, Some(step), "derived step snapped to whole seconds/minutes");
        let start = f.times[0];
        for s in &f.series {
            let raw = downsample(&ts, &vals, start, step, f.times.len(), s.agg.unwrap());
            for (a, b) in s.values.iter().zip(&raw) {
                match (a, b, s.agg) {
                    (Some(a), Some(b), Some(Agg::Avg)) => {
                        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{:?}: {a} vs {b}", s.agg);
                    }
                    _ => assert_eq!(a, b, "{:?}: exact, and gaps agree", s.agg),
                }
            }
        }
    }
}

/// A producer with a periodic fsync policy writes without an fsync per
/// append (its samples survive a process kill: the page cache has them),
/// while a client's append on the same store keeps the store's policy and
/// its fsync covers everything written before it.
#[test]
fn an_appender_s_own_fsync_policy_leaves_the_store_s_for_others() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    {
        let store = Store::open(dir.path(), Options { fsync: FsyncPolicy::Always, ..opts() }).unwrap();
        let mut local = Appender::with_fsync(FsyncPolicy::Every(std::time::Duration::from_secs(3600)));
        for i in 0..10 {
            let mut b = Batch::new(Timestamp(1 + i));
            if i == 0 {
                b.defs.push((0, SeriesKey::new("local", [("host", "h")])));
            }
            b.points.push((0, i as f64));
            store.append(&mut local, &b).unwrap();
        }
        assert_eq!(store.fsyncs().0, 0, "ten local rounds, no fsync within the hour");
        let mut client = Appender::default();
        let mut b = Batch::new(Timestamp(100));
        b.defs.push((0, SeriesKey::new("client", [("host", "h")])));
        b.points.push((0, 1.0));
        store.append(&mut client, &b).unwrap();
        assert_eq!(store.fsyncs().0, 1, "the client's append fsyncs as the store's policy says");
        // Dropped without close(): what was written is in the WAL.
    }
    let store = Store::open(dir.path(), opts()).unwrap();
    let found: Vec<(String, usize)> = store
        .series(&Selector::all())
        .into_iter()
        .map(|(id, key)| (key.to_string(), store.read(id, Timestamp::MIN, Timestamp::MAX).0.len()))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|(k, n)| k.starts_with("local") && *n == 10), "{found:?}");
}

/// A bucketed query runs its series on several threads: the answer still
/// lists every series once, in key order, each with its own values, from
/// blocks and head alike.
#[test]
fn a_bucketed_query_answers_each_series_in_key_order_with_its_own_values() {
    use store::query::{Agg, RangeQuery, range};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut app = Appender::default();
    const N: u32 = 53;
    let t0 = 1_700_000_000_000_000_000i64;
    // Declared in an order unlike the keys' (id order is not key order).
    let key = |s: u32| SeriesKey::new("g", [("n", format!("{:03}", (s * 29) % N).as_str())]);
    for round in 0..20i64 {
        let mut b = Batch::new(Timestamp(t0 + round * 100_000_000));
        for s in 0..N {
            if round == 0 {
                b.defs.push((s, key(s)));
            }
            b.points.push((s, f64::from((s * 29) % N) * 1000.0 + round as f64));
        }
        store.append(&mut app, &b).unwrap();
        if round == 9 {
            store.flush().unwrap();
        }
    }
    let q = RangeQuery {
        selector: Selector::all(),
        from: Timestamp(t0),
        to: Timestamp(t0 + 2_000_000_000 - 1),
        step_ns: Some(1_000_000_000),
        points: None,
        rate: false,
        aggs: vec![Agg::Min, Agg::Last],
        group: None,
    };
    let f = range(&store, &q).unwrap();
    assert_eq!(f.series.len(), 2 * N as usize);
    for (i, pair) in f.series.chunks(2).enumerate() {
        assert_eq!(pair[0].key, pair[1].key);
        assert_eq!(pair[0].key.get("n"), Some(format!("{i:03}").as_str()), "series {i} in key order");
        let base = i as f64 * 1000.0;
        assert_eq!(pair[0].values, [Some(base), Some(base + 10.0)], "min of {}", pair[0].key);
        assert_eq!(pair[1].values, [Some(base + 9.0), Some(base + 19.0)], "last of {}", pair[1].key);
    }
}
