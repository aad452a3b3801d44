//! The query column pool (`store::query::pool`): a dropped answer's
//! columns are kept and the next query's are the same memory, values and
//! gaps exactly as a fresh answer's; the pool holds at most its bound, and
//! lets everything go once idle. One test in its own binary: the pool is
//! the process's.

use model::{Batch, Selector, SeriesKey, Timestamp};
use store::query::{Agg, RangeQuery, pool, range};
use store::{Appender, Options, Store};

#[test]
fn answers_reuse_dropped_columns_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let mut app = Appender::default();
    let t0 = 1_700_000_000_000_000_000i64;
    for i in 0..2_000i64 {
        let mut b = Batch::new(Timestamp(t0 + i * 1_000_000_000));
        if i == 0 {
            b.defs = (0..4).map(|s| (s, SeriesKey::new("m", [("s", s.to_string())]))).collect();
        }
        // Series 3 has a gap every 7th second.
        b.points = (0..4u32).filter(|&s| s != 3 || i % 7 != 0).map(|s| (s, (i * 10 + i64::from(s)) as f64)).collect();
        store.append(&mut app, &b).unwrap();
    }
    let q = RangeQuery {
        selector: Selector::all(),
        from: Timestamp(t0),
        to: Timestamp(t0 + 1_999_000_000_000),
        step_ns: Some(1_000_000_000),
        points: None,
        rate: false,
        aggs: vec![Agg::Min, Agg::Max, Agg::Avg],
        group: None,
    };
    pool::trim_if_idle_for(std::time::Duration::ZERO);
    assert_eq!(pool::kept_bytes(), 0);
    let first = range(&store, &q).unwrap();
    let want = first.clone();
    let ptrs: std::collections::HashSet<usize> = first.series.iter().map(|s| s.values.as_ptr() as usize).collect();
    let bytes: usize = first.series.iter().map(|s| s.values.capacity() * 16).sum();
    let kept_before = pool::kept_bytes();
    drop(first);
    assert_eq!(pool::kept_bytes(), kept_before + bytes, "the dropped answer's columns are kept");
    let again = range(&store, &q).unwrap();
    assert_eq!(again, want, "an answer in kept columns is the same answer");
    assert!(again.series.iter().any(|s| s.values.iter().any(Option::is_none)), "the gaps are there");
    let reused = again.series.iter().filter(|s| ptrs.contains(&(s.values.as_ptr() as usize))).count();
    assert!(reused >= again.series.len() / 2, "{reused} of {} columns reused", again.series.len());
    drop(again);
    // Never more than the bound.
    pool::give((0..200).map(|_| Vec::with_capacity(1 << 16)));
    assert!(pool::kept_bytes() <= pool::POOL_BYTES_MAX, "{}", pool::kept_bytes());
    // Used just now: a trim on the idle timer keeps them; once idle, gone.
    pool::trim();
    assert!(pool::kept_bytes() > 0);
    pool::trim_if_idle_for(std::time::Duration::ZERO);
    assert_eq!(pool::kept_bytes(), 0);
}
