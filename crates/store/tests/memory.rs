//! What an open store holds per flushed block: where each entry is, not its
//! key (the store interns every key once, for all blocks). Measured by the
//! allocator's own count, so it fails if a block's index copies keys again:
//! each block of the tracer's few thousand series and their tiers once held
//! ~2.7 MB of keys, and `kansoku up` grew by that every five minutes until
//! compaction. One test in this file: nothing else allocates meanwhile.

use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

#[test]
fn a_flushed_block_holds_places_not_keys() {
    const SERIES: u32 = 3000;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { fsync: FsyncPolicy::Never, compaction_window: None, ..Options::default() };
    assert!(!opts.tiers.is_empty(), "the test counts a tier entry beside each series");
    let store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut app = Appender::default();
    let key = |k: u32| {
        SeriesKey::new(
            "kansoku_syscall_latency_seconds_bucket",
            [("host", "a-host-name".to_owned()), ("syscall", format!("call_{k}")), ("le", "0.000128".to_owned())],
        )
    };
    let mut t = 1_800_000_000_000_000_000i64;
    let mut allocated = Vec::new();
    for block in 0..4 {
        for i in 0..40 {
            let mut b = Batch::new(Timestamp(t));
            if block == 0 && i == 0 {
                b.defs = (0..SERIES).map(|k| (k, key(k))).collect();
            }
            b.points = (0..SERIES).map(|k| (k, f64::from(k + i))).collect();
            store.append(&mut app, &b).unwrap();
            t += 1_000_000_000;
        }
        store.flush().unwrap();
        allocated.push(store::heap::allocated_bytes().expect("glibc counts its allocations"));
    }
    assert_eq!(store.disk_usage().blocks, 4);
    // From the second block on: the first also sized the store's own tables.
    let per_block = allocated[3].saturating_sub(allocated[1]) / 2;
    let entries = SERIES as usize * (1 + opts.tiers.len());
    assert!(
        per_block < 120 * entries,
        "a block of {entries} entries holds {per_block} bytes ({} an entry): {allocated:?}",
        per_block / entries
    );
}
