//! Retention removes whole blocks and closed event files, oldest first, by
//! age and by disk budget; never the newest data; and counts what it removed.

use std::sync::atomic::Ordering;
use std::time::Duration;

use codec::events::{Column, Encoding, EventBatch};
use model::{Batch, Selector, SeriesKey, Timestamp};
use store::events::EventQuery;
use store::{Appender, DiskBudget, FsyncPolicy, Options, Retention, Store};

const HOUR: i64 = 3_600_000_000_000;

fn opts(retention: Retention) -> Options {
    Options {
        fsync: FsyncPolicy::Never,
        block_duration: Duration::from_secs(3600 * 24),
        retention,
        event_file_bytes: 1,
        ..Options::default()
    }
}

/// One block per hour `h` (newest at `now`), 100 samples each, and one event
/// file per hour with 50 events.
fn fill(store: &Store, now: i64, hours: i64) {
    let key = SeriesKey::new("m", [("host", "h")]);
    let mut app = Appender::default();
    for h in (0..hours).rev() {
        let t0 = now - h * HOUR;
        for i in 0..100 {
            let mut b = Batch::new(Timestamp(t0 + i));
            if h == hours - 1 && i == 0 {
                b.defs.push((0, key.clone()));
            }
            b.points.push((0, i as f64));
            store.append(&mut app, &b).unwrap();
        }
        store.flush().unwrap();
        let mut ev = EventBatch { cpu: 0, ..Default::default() };
        for i in 0..50 {
            ev.push(t0 + i, 1, 1, 0x400000);
        }
        // event_file_bytes = 1: every batch closes its file after it.
        store.events().append(&SeriesKey::new("perf", [("host", "h")]), &mut ev, Encoding::Fast).unwrap();
    }
}

fn samples(store: &Store) -> Vec<i64> {
    let (id, _) = store.series(&Selector::all())[0].clone();
    store.read(id, Timestamp::MIN, Timestamp::MAX).0
}

fn events(store: &Store) -> u64 {
    let q = EventQuery { streams: Selector::all(), cpus: vec![], from: i64::MIN, to: i64::MAX };
    store.events().top(&q, Column::Cpu, 1).total
}

#[test]
fn age_limit_removes_only_what_is_older() {
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp::now().as_nanos();
    let r = Retention { max_age: Some(Duration::from_secs(3 * 3600 + 60)), budget: DiskBudget::Unlimited };
    let store = Store::open(dir.path(), opts(r)).unwrap();
    fill(&store, now, 6);
    // Flushes already applied it: hours 0..=3 stay (3 h 1 min), 4 and 5 went.
    let kept = samples(&store);
    assert_eq!(kept.len(), 400);
    assert!(kept[0] >= now - 3 * HOUR, "only the newest hours remain");
    assert_eq!(store.stats().retention_removed_samples.load(Ordering::Relaxed), 200);
    // Event files: the newest one is still open and never removed; closed ones follow the age rule.
    assert_eq!(events(&store), 4 * 50);
    assert_eq!(store.stats().retention_removed_events.load(Ordering::Relaxed), 100);
    // Reopening finds the same.
    drop(store);
    let store = Store::open(dir.path(), opts(r)).unwrap();
    assert_eq!(samples(&store).len(), 400);
    assert_eq!(events(&store), 200);
}

#[test]
fn disk_budget_removes_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let now = Timestamp::now().as_nanos();
    {
        let store = Store::open(dir.path(), opts(Retention { max_age: None, budget: DiskBudget::Unlimited })).unwrap();
        fill(&store, now, 6);
        assert_eq!(samples(&store).len(), 600, "unlimited keeps everything");
    }
    let total: u64 = walk(dir.path());
    // A budget of 60 % of what is there: the oldest go, the newest stay.
    let budget = total * 6 / 10;
    let store = Store::open(dir.path(), opts(Retention { max_age: None, budget: DiskBudget::Bytes(budget) })).unwrap();
    let kept = samples(&store);
    assert!(kept.len() < 600 && !kept.is_empty(), "kept {}", kept.len());
    assert_eq!(*kept.last().unwrap(), now + 99, "the newest sample stays");
    assert!(kept.windows(2).all(|w| w[0] < w[1]));
    // Contiguous: what is left is a suffix in time.
    assert!(kept[0] == now - (kept.len() as i64 / 100 - 1) * HOUR, "oldest removed first");
    assert!(events(&store) < 300);
    let removed = store.stats().retention_removed_bytes.load(Ordering::Relaxed);
    assert!(removed > 0 && total - removed <= budget + 4096, "removed {removed} of {total}, budget {budget}");
}

fn walk(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() { walk(&e.path()) } else { m.len() }
        })
        .sum()
}

/// Retention asks the store's clock what "now" is: with a clock the test
/// moves, blocks age out at the flush after the instant they pass
/// `--retention-time`, not before, and the newest stay.
#[test]
fn blocks_age_out_by_the_store_s_clock() {
    let dir = tempfile::tempdir().unwrap();
    let now = 1_800_000_000 * 1_000_000_000;
    let clock = std::sync::Arc::new(clock::Manual::new(now));
    let retention = Retention { max_age: Some(Duration::from_secs(3 * 3600)), budget: DiskBudget::Unlimited };
    let store = Store::open(dir.path(), Options { clock: clock.clone(), ..opts(retention) }).unwrap();
    fill(&store, now, 3);
    assert_eq!(samples(&store).len(), 300, "nothing is older than three hours yet");
    // An hour on, the oldest block's last sample (now - 2 h + 99 ns) is
    // still inside the three hours: kept.
    clock.advance(HOUR);
    fill(&store, now + HOUR, 1);
    assert_eq!(samples(&store).len(), 400);
    // A microsecond later it is past them: gone at the next flush.
    clock.advance(1_000);
    fill(&store, now + HOUR + 1_000, 1);
    let kept = samples(&store);
    assert_eq!(kept.len(), 400, "the oldest hour went, the new one came");
    assert!(kept.iter().all(|&t| t >= now - HOUR), "{:?}", &kept[..3]);
}
