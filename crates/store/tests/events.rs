//! Event columns against a plain model: appends across streams and CPUs,
//! reopen, read-only open, top-N and scans over sub-ranges, a log truncated at
//! every offset, and a batch that rots on disk after it was written.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use codec::events::{Column, Encoding, EventBatch, Want};
use model::{Selector, SeriesKey};
use store::events::EventQuery;
use store::{FsyncPolicy, Options, Store};

/// (stream, cpu, time, pid, tid, ip)
type Event = (String, u32, i64, u32, u32, u64);

fn opts() -> Options {
    Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(3600),
        head_samples_max: 1 << 20,
        ..Options::default()
    }
}

/// `n` event batches of 50 samples on CPU 0 of `stream`, a second apart,
/// written to a store at `dir` and closed.
fn write_seconds(dir: &std::path::Path, stream: &SeriesKey, n: i64) {
    let store = Store::open(dir, opts()).unwrap();
    for k in 0..n {
        let mut b = EventBatch { cpu: 0, ..Default::default() };
        for i in 0..50 {
            b.push(1_700_000_000_000_000_000 + k * 1_000_000_000 + i * 100_000, 9, 9, 0x1000 + i as u64);
        }
        store.events().append(stream, &mut b, Encoding::Fast).unwrap();
    }
    store.close().unwrap();
}

fn stream(host: &str) -> SeriesKey {
    SeriesKey::new("perf_cpu_clock", [("host", host)])
}

/// Appends `n_batches` random batches; returns every event appended.
fn fill(store: &Store, seed: u64, n_batches: usize) -> Vec<Event> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut all = Vec::new();
    let mut clock = [1_700_000_000_000_000_000i64; 4];
    for _ in 0..n_batches {
        let host = ["a", "b"][rng.usize(..2)];
        let cpu = rng.u32(..2);
        let slot = usize::from(host == "b") * 2 + cpu as usize;
        let mut b = EventBatch { cpu, ..Default::default() };
        for _ in 0..rng.usize(1..400) {
            clock[slot] += rng.i64(90_000..110_000);
            let pid = [0, 42, 1000, 1001][rng.usize(..4)];
            let tid = if rng.u8(..4) == 0 { pid + 1 } else { pid };
            let ip = [0xffff_ffff_8100_0000u64, 0x5555_5555_0000][rng.usize(..2)] + rng.u64(..64) * 4;
            b.push(clock[slot], pid, tid, ip);
            all.push((host.to_string(), cpu, clock[slot], pid, tid, ip));
        }
        let enc = if rng.bool() { Encoding::Fast } else { Encoding::Compact };
        store.events().append(&stream(host), &mut b, enc).unwrap();
    }
    all
}

fn query(from: i64, to: i64) -> EventQuery {
    EventQuery { streams: Selector::all(), cpus: Vec::new(), from, to }
}

fn model_top(events: &[Event], q: &EventQuery, col: Column) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for e in events.iter().filter(|e| (q.from..=q.to).contains(&e.2) && (q.cpus.is_empty() || q.cpus.contains(&e.1))) {
        let v = match col {
            Column::Cpu => u64::from(e.1),
            Column::Pid => u64::from(e.3),
            Column::Tid => u64::from(e.4),
            Column::Ip => e.5,
            Column::Chain => unreachable!(),
        };
        *m.entry(v).or_insert(0) += 1;
    }
    m
}

fn check(store: &Store, events: &[Event], ctx: &str) {
    let (lo, hi) = (events.iter().map(|e| e.2).min().unwrap(), events.iter().map(|e| e.2).max().unwrap());
    let third = (hi - lo) / 3;
    for q in [query(i64::MIN, i64::MAX), query(lo + third, hi - third), {
        let mut q = query(lo, lo + third);
        q.cpus = vec![1];
        q
    }] {
        for col in [Column::Cpu, Column::Pid, Column::Tid, Column::Ip] {
            let want = model_top(events, &q, col);
            let top = store.events().top(&q, col, usize::MAX);
            assert_eq!(top.corrupt, 0, "{ctx}");
            assert_eq!(top.total, want.values().sum::<u64>(), "{ctx}: total by {col:?}");
            assert_eq!(top.distinct as usize, want.len(), "{ctx}");
            let got: BTreeMap<u64, u64> = top.rows.iter().copied().collect();
            assert_eq!(got, want, "{ctx}: counts by {col:?}");
            assert!(top.rows.windows(2).all(|w| w[0].1 >= w[1].1), "{ctx}: most frequent first");
            let top3 = store.events().top(&q, col, 3);
            assert_eq!(top3.rows[..], top.rows[..top.rows.len().min(3)], "{ctx}: top 3 is a prefix");
        }
    }
    // A scan of one host returns exactly its events.
    let mut q = query(i64::MIN, i64::MAX);
    q.streams = Selector::parse(r#"{host="b"}"#).unwrap();
    let (batches, corrupt) = store.events().scan(&q, Want::ALL);
    assert_eq!(corrupt, 0);
    let mut got: Vec<Event> = batches
        .iter()
        .flat_map(|(k, b)| {
            (0..b.len())
                .map(move |i| (k.get("host").unwrap().to_string(), b.cpu, b.time[i], b.pid[i], b.tid[i], b.ip[i]))
        })
        .collect();
    got.sort();
    let mut want: Vec<Event> = events.iter().filter(|e| e.0 == "b").cloned().collect();
    want.sort();
    assert_eq!(got, want, "{ctx}: scan of host b");
}

#[test]
fn events_match_the_model_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let events = {
        let store = Store::open(dir.path(), opts()).unwrap();
        let events = fill(&store, 7, 60);
        check(&store, &events, "live");
        check(&Store::open_read_only(dir.path()).unwrap(), &events, "read-only beside the writer");
        store.close().unwrap();
        events
    };
    let store = Store::open(dir.path(), opts()).unwrap();
    check(&store, &events, "reopened");
    assert_eq!(store.events().streams(&Selector::all()), vec![stream("a"), stream("b")]);
    // Appending after reopen goes to a new file; both are read.
    let more = fill(&store, 8, 10);
    let all: Vec<Event> = events.into_iter().chain(more).collect();
    check(&store, &all, "appended after reopen");
}

fn log_files(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(root.join("events")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

#[test]
fn log_cut_at_every_offset_keeps_whole_batches_only() {
    let src = tempfile::tempdir().unwrap();
    {
        let store = Store::open(src.path(), opts()).unwrap();
        for i in 0..4u32 {
            let mut b = EventBatch { cpu: 0, ..Default::default() };
            for j in 0..=i {
                b.push(i64::from(i * 10 + j), 7, 7, u64::from(j));
            }
            store.events().append(&stream("a"), &mut b, Encoding::Fast).unwrap();
        }
    }
    let file = log_files(src.path())[0].clone();
    let data = fs::read(&file).unwrap();
    // Where each batch's frame ends (batch i holds i + 1 events).
    let mut sizes = Vec::new();
    let mut at = 8;
    while at < data.len() {
        let end = at + 8 + u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        if data[at + 8] == 2 {
            sizes.push(end);
        }
        at = end;
    }
    assert_eq!(sizes.len(), 4);
    for cut in 0..=data.len() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("events")).unwrap();
        fs::copy(src.path().join("KANSOKU"), dir.path().join("KANSOKU")).unwrap();
        let name = file.file_name().unwrap();
        fs::write(dir.path().join("events").join(name), &data[..cut]).unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let whole = sizes.iter().filter(|&&s| s <= cut).count();
        let want: u64 = (1..=whole as u64).sum();
        let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
        assert_eq!(top.total, want, "cut at {cut}");
        assert_eq!(top.corrupt, 0, "cut at {cut}");
        // The torn file was cut back, and appending after recovery works.
        let mut b = EventBatch { cpu: 1, ..Default::default() };
        b.push(1000, 1, 1, 1);
        store.events().append(&stream("a"), &mut b, Encoding::Fast).unwrap();
        drop(store);
        let store = Store::open(dir.path(), opts()).unwrap();
        let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
        assert_eq!(top.total, want + 1, "cut at {cut}, after an append and reopen");
    }
}

#[test]
fn a_batch_that_rots_on_disk_is_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    for cpu in 0..2 {
        let mut b = EventBatch { cpu, ..Default::default() };
        for t in 0..100 {
            b.push(t, 1, 1, 0x1000 + t as u64);
        }
        store.events().append(&stream("a"), &mut b, Encoding::Fast).unwrap();
    }
    let file = log_files(dir.path())[0].clone();
    let mut data = fs::read(&file).unwrap();
    let at = data.len() - 10; // inside the last batch's columns
    data[at] ^= 0x40;
    fs::write(&file, &data).unwrap();
    let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
    assert_eq!((top.total, top.corrupt), (100, 1), "only the intact batch is served");
    assert_eq!(top.rows, vec![(0, 100)]);
    assert_eq!(store.events().stats().corrupt_batches.load(Ordering::Relaxed), 1);
}

#[test]
fn bad_batches_are_refused_and_counted_nothing_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let mut ragged =
        EventBatch { time: vec![1, 2], pid: vec![1], tid: vec![1, 1], ip: vec![1, 1], ..Default::default() };
    let e = store.events().append(&stream("a"), &mut ragged, Encoding::Fast).unwrap_err().to_string();
    assert!(e.contains("differ in length"), "{e}");
    let e = store.events().append_encoded(&stream("a"), &[3, 0, 0, 0, 0, 9, 9]).unwrap_err().to_string();
    assert!(e.contains("malformed event batch"), "{e}");
    assert_eq!(store.events().stats().batches_rejected.load(Ordering::Relaxed), 2);
    assert_eq!(store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 1).total, 0);
    // A well-formed batch encoded elsewhere is taken as is.
    let mut b = EventBatch { cpu: 3, ..Default::default() };
    b.push(5, 1, 2, 3);
    b.validate().unwrap();
    let mut enc = Vec::new();
    b.encode(&mut enc, Encoding::Compact);
    assert_eq!(store.events().append_encoded(&stream("a"), &enc).unwrap(), 1);
    assert_eq!(store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 1).rows, vec![(3, 1)]);
}

/// A reader beside a writer may see the newest file end mid-record: it
/// serves every whole batch before that, and changes nothing on disk.
#[test]
fn read_only_open_serves_the_prefix_of_a_file_being_written() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let mut b = EventBatch { cpu: 0, ..Default::default() };
        b.push(1, 2, 3, 4);
        b.push(5, 6, 7, 8);
        store.events().append(&stream("a"), &mut b, Encoding::Fast).unwrap();
    }
    let file = log_files(dir.path()).into_iter().find(|f| fs::metadata(f).unwrap().len() > 8).unwrap();
    let mut data = fs::read(&file).unwrap();
    data.extend_from_slice(&[40, 0, 0, 0, 1, 2]); // a record header without its payload
    fs::write(&file, &data).unwrap();
    let reader = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(reader.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 1).total, 2);
    assert_eq!(fs::read(&file).unwrap(), data, "a reader never truncates");
}

/// A second of every CPU goes in as one write: all of it, or none of it
/// when one batch is bad; and it reads back whole after a reopen.
#[test]
fn a_set_of_batches_is_stored_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let per_cpu = |cpu: u32, n: i64| {
        let mut b = EventBatch { cpu, ..Default::default() };
        for i in 0..n {
            b.push(1_000 + i * 100_000, 7, 7 + (i % 3) as u32, 0xffff_ffff_8100_0000 + (i as u64 % 50) * 8);
        }
        b.validate().unwrap();
        b
    };
    let set: Vec<EventBatch> = (0..8).map(|c| per_cpu(c, 60_000 + i64::from(c))).collect();
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        let encoded = codec::events::encode_many(&set, Encoding::Fast, 2);
        let mut bad = encoded.clone();
        let cut = bad[5].len() - 1;
        bad[5].truncate(cut);
        assert!(store.events().append_encoded_many(&stream("a"), &bad).is_err());
        assert_eq!(store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10).total, 0, "none stored");
        let n = store.events().append_encoded_many(&stream("a"), &encoded).unwrap();
        assert_eq!(n, set.iter().map(EventBatch::len).sum::<usize>());
        let mut again = vec![per_cpu(9, 3), per_cpu(10, 4)];
        assert_eq!(store.events().append_many(&stream("b"), &mut again, Encoding::Compact).unwrap(), 7);
    }
    let store = Store::open(dir.path(), opts()).unwrap();
    let (batches, corrupt) = store.events().scan(&query(i64::MIN, i64::MAX), Want::ALL);
    assert_eq!(corrupt, 0);
    assert_eq!(batches.len(), 10);
    for (key, b) in batches {
        let want = if key == stream("a") { &set[b.cpu as usize] } else { &per_cpu(b.cpu, i64::from(b.cpu) - 6) };
        assert_eq!(&b, want, "cpu {}", b.cpu);
    }
}

/// A mark (an agent spool's sequence number) is written with its batches in
/// one write: it survives exactly when they all do. Once, the server wrote
/// the events and then, in a second append, the mark — a crash between the
/// two stored a resent batch twice.
#[test]
fn a_mark_is_stored_exactly_when_its_batches_are() {
    let dir = tempfile::tempdir().unwrap();
    let mark = SeriesKey::new("kansoku_ingest_seq", [("host", "a"), ("spool", "0000000000000001")]);
    let batches = |seq: i64| -> Vec<Vec<u8>> {
        (0..3u32)
            .map(|cpu| {
                let mut b = EventBatch { cpu, ..Default::default() };
                for i in 0..50 {
                    b.push(1_700_000_000_000_000_000 + seq * 1_000_000_000 + i * 100_000, 7, 7, 0x1000 + i as u64);
                }
                let mut out = Vec::new();
                b.encode(&mut out, Encoding::Fast);
                out
            })
            .collect()
    };
    let events_file = |dir: &Path| -> PathBuf {
        let mut files: Vec<_> = fs::read_dir(dir.join("events")).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files.into_iter().find(|f| fs::metadata(f).unwrap().len() > 8).expect("a written event log")
    };
    {
        let store = Store::open(dir.path(), opts()).unwrap();
        for seq in 1..=2 {
            store.events().append_encoded_marked(&stream("a"), &batches(seq), Some((&mark, seq as u64))).unwrap();
        }
        assert_eq!(store.events().mark(&mark), Some(2));
        store.close().unwrap();
    }
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.events().mark(&mark), Some(2), "read back on open");
    let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
    assert_eq!(top.total, 300);
    drop(store);

    // The second group cut after its mark and one of its three batches, at a
    // frame boundary (nothing fails a checksum): neither the mark nor the
    // batch is kept, and the file is cut back to before the group.
    let file = events_file(dir.path());
    let data = fs::read(&file).unwrap();
    let mut frames = vec![8usize];
    while *frames.last().unwrap() < data.len() {
        let at = *frames.last().unwrap();
        frames.push(at + 8 + u32::from_le_bytes(data[at..at + 4].try_into().unwrap()) as usize);
    }
    // stream, mark, 3 batches, the stream's second copy, mark, 3 batches:
    // cut after the 8th frame.
    assert_eq!(frames.len(), 11, "{frames:?}");
    fs::write(&file, &data[..frames[8]]).unwrap();
    // As a crash leaves it: the written file is the newest.
    for f in fs::read_dir(dir.path().join("events")).unwrap() {
        let f = f.unwrap().path();
        if f != file {
            fs::remove_file(f).unwrap();
        }
    }
    let store = Store::open(dir.path(), opts()).unwrap();
    assert_eq!(store.events().mark(&mark), Some(1), "the cut group's mark is gone with its batches");
    let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
    assert_eq!(top.total, 150, "only the whole group's batches");
    assert_eq!(fs::metadata(&file).unwrap().len() as usize, frames[6]);
    assert_eq!(store.events().stats().damaged_files.load(Ordering::Relaxed), 1);
}

/// Damage in the middle of the newest event log is corruption, not a torn
/// tail: the batches after it were acknowledged and are kept; only the
/// damaged batch is lost, and the file is not cut.
#[test]
fn damage_inside_an_event_log_keeps_the_batches_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let stream = stream("a");
    write_seconds(dir.path(), &stream, 40);
    let files: Vec<PathBuf> = {
        let mut f: Vec<_> = fs::read_dir(dir.path().join("events")).unwrap().map(|e| e.unwrap().path()).collect();
        f.sort();
        f
    };
    let written = files.iter().find(|f| fs::metadata(f).unwrap().len() > 8).unwrap().clone();
    // As a crash leaves it: the written file is the newest.
    for f in &files {
        if f != &written {
            fs::remove_file(f).unwrap();
        }
    }
    let mut data = fs::read(&written).unwrap();
    let len = data.len();
    for b in &mut data[len / 2..len / 2 + 4] {
        *b ^= 0x5a;
    }
    fs::write(&written, &data).unwrap();

    let store = Store::open(dir.path(), opts()).unwrap();
    let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
    assert_eq!(top.corrupt, 0);
    assert!(top.total == 39 * 50 || top.total == 38 * 50, "kept {} events of 2000", top.total);
    let last = 1_700_000_000_000_000_000 + 39 * 1_000_000_000;
    assert_eq!(store.events().top(&query(last, i64::MAX), Column::Cpu, 10).total, 50, "the last batch is kept");
    assert!(store.events().stats().skipped_bytes.load(Ordering::Relaxed) > 0);
    assert_eq!(fs::metadata(&written).unwrap().len() as usize, len, "not truncated");
}

/// The event logs' form of issue 42 #13: one flipped byte in a file's magic
/// hid every batch in it. Each frame carries its own checksum: the batches
/// are read past the bad header, and the damage counted.
#[test]
fn a_damaged_event_log_magic_keeps_its_batches() {
    let dir = tempfile::tempdir().unwrap();
    let stream = stream("a");
    write_seconds(dir.path(), &stream, 10);
    let written = fs::read_dir(dir.path().join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|f| fs::metadata(f).unwrap().len() > 8)
        .unwrap();
    let mut data = fs::read(&written).unwrap();
    data[2] ^= 0x10;
    fs::write(&written, &data).unwrap();

    let store = Store::open(dir.path(), opts()).unwrap();
    let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
    assert_eq!((top.total, top.corrupt), (500, 0), "every batch, past the bad header");
    assert_eq!(store.events().stats().damaged_files.load(Ordering::Relaxed), 1);
    assert_eq!(fs::read(&written).unwrap(), data, "the file is left as it is");
}

/// The event logs' form of issue 42 #14: one flipped byte in a stream
/// definition lost every batch of that stream in the file. Each definition
/// is written twice; with both damaged, the batches are kept under a
/// placeholder stream and counted.
#[test]
fn a_damaged_stream_definition_loses_none_of_its_batches() {
    let dir = tempfile::tempdir().unwrap();
    write_seconds(dir.path(), &stream("a"), 10);
    let written = fs::read_dir(dir.path().join("events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|f| fs::metadata(f).unwrap().len() > 8)
        .unwrap();
    let good = fs::read(&written).unwrap();
    // The stream definitions' frames: (start, end).
    let mut defs = Vec::new();
    let mut at = 8;
    while at < good.len() {
        let end = at + 8 + u32::from_le_bytes(good[at..at + 4].try_into().unwrap()) as usize;
        if good[at + 8] == 1 {
            defs.push((at, end));
        }
        at = end;
    }
    assert_eq!(defs.len(), 2, "each definition twice");
    for both in [false, true] {
        let mut bad = good.clone();
        for d in &defs[..if both { 2 } else { 1 }] {
            bad[d.1 - 1] ^= 0x02;
        }
        fs::write(&written, &bad).unwrap();
        let store = Store::open(dir.path(), opts()).unwrap();
        let top = store.events().top(&query(i64::MIN, i64::MAX), Column::Cpu, 10);
        assert_eq!((top.total, top.corrupt), (500, 0), "both copies damaged: {both}");
        let orphaned = store.events().stats().orphaned_batches.load(Ordering::Relaxed);
        let streams = store.events().streams(&Selector::all());
        if both {
            let placeholder = SeriesKey::new(
                store::events::ORPHAN,
                [("file", written.file_stem().unwrap().to_str().unwrap()), ("stream_id", "0")],
            );
            assert_eq!((orphaned, streams), (10, vec![placeholder]));
        } else {
            assert_eq!((orphaned, streams), (0, vec![stream("a")]));
        }
    }
}

/// A batch whose first event is over 30 s old when it arrives moves the
/// source's generation (what the profiles' counted minutes are kept by); a
/// live one does not.
#[test]
fn late_batches_move_the_generation() {
    use source::EventSource;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    let batch = |t: i64| {
        let mut b = EventBatch { cpu: 0, ..Default::default() };
        b.push(t, 9, 9, 0x1000);
        b
    };
    let now = clock::realtime_ns();
    let g0 = store.generation();
    store.events().append(&stream("a"), &mut batch(now - 1_000_000_000), Encoding::Fast).unwrap();
    assert_eq!(store.generation(), g0, "a second-old batch is live");
    store.events().append(&stream("a"), &mut batch(now - 600_000_000_000), Encoding::Fast).unwrap();
    assert_ne!(store.generation(), g0, "a ten-minute-old batch is late");
    assert_eq!(store.events().stats().late_batches.load(Ordering::Relaxed), 1);
}
