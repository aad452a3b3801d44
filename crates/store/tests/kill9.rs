//! Crash torture: a writer process appends series batches and event batches
//! as fast as it can, printing each acknowledged sequence number; it is killed
//! with SIGKILL at a random point (mid-append, mid-fsync, mid-block-flush,
//! mid-rotation, mid-compaction), the store is reopened, and every acknowledged sample and
//! event must be there, exactly once, with nothing partial. Twelve rounds on
//! one data directory, alternating fsync policies. Beside them, a series
//! written out of order (each group of eight sequence numbers backwards,
//! so most of its points are late): every acknowledged point kept too.
//!
//! The writer is this same test binary, re-run with `KANSOKU_KILL9_CHILD` set.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use codec::events::{Column, Encoding, EventBatch};
use model::{Batch, Selector, SeriesKey, Timestamp};
use store::events::EventQuery;
use store::{Appender, FsyncPolicy, Options, Store};

const CHILD_ENV: &str = "KANSOKU_KILL9_CHILD";
const SERIES: u32 = 20;
const EVENTS_PER_SEQ: u64 = 100;
const BASE: i64 = 1_700_000_000_000_000_000;

fn opts(always: bool) -> Options {
    Options {
        fsync: if always { FsyncPolicy::Always } else { FsyncPolicy::Never },
        block_duration: Duration::from_secs(3600),
        // Flush a block every 250 batches and roll event files often, so
        // kills land in flushes and rotations too.
        head_samples_max: 250 * SERIES as usize,
        event_file_bytes: 16 << 10,
        retention: store::Retention { max_age: None, budget: store::DiskBudget::Unlimited },
        tiers: vec![store::tier::SECOND, store::tier::MINUTE],
        series_max: store::SERIES_MAX_DEFAULT,
        // Batches are 1 ns apart and blocks 250 batches: a window of 1 µs
        // merges about four blocks, so kills land in compactions too.
        compaction_window: Some(Duration::from_micros(1)),
        clock: std::sync::Arc::new(clock::System),
    }
}

fn key(i: u32) -> SeriesKey {
    SeriesKey::new("torture", [("i", i.to_string())])
}

/// The series written out of order.
fn late_key() -> SeriesKey {
    SeriesKey::new("torture_late", [("i", "late")])
}

/// Where the late series' point of sequence number `seq` (from 1) goes:
/// each group of eight backwards.
fn late_time(seq: i64) -> i64 {
    BASE + (seq - 1) / 8 * 8 + (8 - (seq - 1) % 8)
}

/// The samples of each in-order series, per the store.
fn stored_seqs(store: &Store) -> Vec<Vec<i64>> {
    let ids = store.series(&Selector::parse("torture").unwrap());
    ids.iter().map(|(id, _)| store.read(*id, Timestamp::MIN, Timestamp::MAX).0).collect()
}

fn event_counts(store: &Store) -> BTreeMap<u64, u64> {
    let q = EventQuery { streams: Selector::all(), cpus: vec![], from: i64::MIN, to: i64::MAX };
    let top = store.events().top(&q, Column::Pid, usize::MAX);
    assert_eq!(top.corrupt, 0, "no corrupt event batch after recovery");
    top.rows.into_iter().collect()
}

fn child(dir: &Path, always: bool) {
    let store = std::sync::Arc::new(Store::open(dir, opts(always)).unwrap());
    store.spawn_compactor().unwrap();
    let mut seq = stored_seqs(&store).iter().filter_map(|s| s.last()).map(|&t| t - BASE).max().unwrap_or(0);
    seq = seq.max(event_counts(&store).keys().next_back().map_or(0, |&s| s as i64));
    let mut app = Appender::default();
    let stream = SeriesKey::new("perf_cpu_clock", [("host", "t")]);
    let mut first = true;
    loop {
        seq += 1;
        let mut b = Batch::new(Timestamp(BASE + seq));
        for i in 0..SERIES {
            if first {
                b.defs.push((i, key(i)));
            }
            b.points.push((i, seq as f64));
        }
        store.append(&mut app, &b).unwrap();
        let mut late = Batch::new(Timestamp(late_time(seq)));
        if first {
            late.defs.push((SERIES, late_key()));
        }
        late.points.push((SERIES, seq as f64));
        store.append(&mut app, &late).unwrap();
        first = false;
        let mut ev = EventBatch { cpu: (seq % 2) as u32, ..Default::default() };
        for i in 0..EVENTS_PER_SEQ as i64 {
            ev.push(BASE + seq * 1000 + i, seq as u32, seq as u32, 0xffff_ffff_8100_0000 + (i as u64 % 7) * 4);
        }
        store.events().append(&stream, &mut ev, Encoding::Fast).unwrap();
        // The acknowledgement the parent reads from the pipe.
        #[allow(clippy::print_stdout)]
        {
            println!("ack {seq}");
        }
    }
}

#[test]
fn kill_9_loses_nothing_acknowledged() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&dir), std::env::var("KANSOKU_KILL9_ALWAYS").is_ok());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = fastrand::Rng::with_seed(9);
    let mut acked_events: Vec<u64> = Vec::new();
    let mut last_ack = 0i64;
    for round in 0..12 {
        let always = round % 2 == 0;
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "kill_9_loses_nothing_acknowledged", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if always {
            cmd.env("KANSOKU_KILL9_ALWAYS", "1");
        }
        let mut proc = cmd.spawn().unwrap();
        let out = BufReader::new(proc.stdout.take().unwrap());
        let kill_after = rng.usize(20..600);
        let mut acks = 0;
        // After the kill, the lines still in the pipe are acknowledgements too.
        for line in out.lines() {
            let line = line.unwrap();
            let Some(n) = line.strip_prefix("ack ") else { continue };
            let n: i64 = n.parse().unwrap();
            assert!(n > last_ack, "round {round}: sequence went backwards ({n} after {last_ack})");
            last_ack = n;
            acked_events.push(n as u64);
            acks += 1;
            if acks == kill_after {
                // SIGKILL while the child is already inside its next append.
                proc.kill().unwrap();
            }
        }
        proc.wait().unwrap();
        assert!(acks >= kill_after, "round {round}: the writer died on its own");

        let store = Store::open(dir.path(), opts(false)).unwrap();
        let seqs = stored_seqs(&store);
        assert_eq!(seqs.len(), SERIES as usize, "round {round}");
        for (i, ts) in seqs.iter().enumerate() {
            // Every series holds the same prefix: one batch is one WAL record.
            assert_eq!(ts, &seqs[0], "round {round}: series {i} differs");
        }
        let stored: Vec<i64> = seqs[0].iter().map(|t| t - BASE).collect();
        let counts = event_counts(&store);
        for &a in &acked_events {
            assert!(stored.binary_search(&(a as i64)).is_ok(), "round {round}: acknowledged batch {a} lost");
            assert_eq!(counts.get(&a), Some(&EVENTS_PER_SEQ), "round {round}: acknowledged events of {a}");
        }
        // Nothing unacknowledged beyond the one append in flight, nothing twice.
        assert!(stored.last().copied().unwrap_or(0) <= last_ack + 1, "round {round}");
        for (&s, &n) in &counts {
            assert_eq!(n, EVENTS_PER_SEQ, "round {round}: events of {s} partial or duplicated");
            assert!(s as i64 <= last_ack + 1, "round {round}");
        }
        // The late series: each acknowledged point at its time, and
        // nothing written after the last acknowledgement but the one in flight.
        let (late_id, _) = store.series(&Selector::parse("torture_late").unwrap())[0].clone();
        let (lt, lv) = store.read(late_id, Timestamp::MIN, Timestamp::MAX);
        let late: BTreeMap<i64, f64> = lt.into_iter().zip(lv).collect();
        for &a in &acked_events {
            assert_eq!(late.get(&late_time(a as i64)), Some(&(a as f64)), "round {round}: late point of {a} lost");
        }
        assert!(late.values().all(|&v| v <= (last_ack + 1) as f64), "round {round}: a late point never written");
        for (i, (_, key)) in store.series(&Selector::parse("torture").unwrap()).iter().enumerate() {
            let (id, _) = store.series(&Selector::parse("torture").unwrap())[i].clone();
            let (_, vals) = store.read(id, Timestamp::MIN, Timestamp::MAX);
            assert!(vals.iter().zip(&stored).all(|(&v, &s)| v == s as f64), "round {round}: {key} values");
        }
        // What the writer may have finished but not acknowledged becomes
        // acknowledged history for the next round.
        last_ack = last_ack.max(stored.last().copied().unwrap_or(0));
        last_ack = last_ack.max(counts.keys().next_back().map_or(0, |&s| s as i64));
        acked_events = counts.keys().copied().collect();
    }
    // The writers compacted as they went (so some kills landed near one).
    let compacted = std::fs::read_dir(dir.path().join("blocks"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().contains('-'))
        .count();
    assert!(compacted > 0, "no compaction ran");
}
