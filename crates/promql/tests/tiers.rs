//! `sum|count|avg|min|max_over_time` over long windows are answered from
//! the store's tiers plus raw edges: the same answers as from raw samples
//! alone — with blocks flushed (tiers stored) and in the head (tiers
//! computed), windows cutting periods anywhere, staleness markers, a run
//! of NaN and an infinity.

use model::{Batch, SeriesKey, Timestamp};
use promql::{Engine, Value};
use store::{Appender, FsyncPolicy, Options, Store};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_800_000_000 * SEC;

fn filled(dir: &std::path::Path, tiers: Vec<i64>) -> Store {
    let store = Store::open(dir, Options { fsync: FsyncPolicy::Never, tiers, ..Options::default() }).unwrap();
    let mut app = Appender::default();
    let stale = f64::from_bits(promql::STALE_NAN);
    // 40 minutes at 700 ms (periods cut anywhere), 2 series.
    for i in 0..3_430i64 {
        let t = T0 + i * 700_000_000;
        let mut b = Batch::new(Timestamp(t));
        if i == 0 {
            b.defs = vec![
                (0, SeriesKey::new("g", [("k", "a")])),
                (1, SeriesKey::new("g", [("k", "b")])),
                (2, SeriesKey::new("g", [("k", "cancel")])),
                (3, SeriesKey::new("g", [("k", "huge")])),
            ];
        }
        let a = match i {
            500..=510 => stale,
            900..=1_000 => f64::NAN,
            1_500 => f64::INFINITY,
            _ => ((i * 37) % 101) as f64 - 50.0 + 0.125,
        };
        // Issue 43: sums that depend on the order of adding (a plain sum
        // of a period loses the 1s), and sums that overflow where the
        // values and their mean do not.
        let cancel = [1e16, 1.0, -1e16, 3.0, 1.0][i as usize % 5];
        let huge = 1.6e308 * (1.0 - (i % 7) as f64 * 1e-3);
        b.points = vec![(0, a), (1, (i % 13) as f64 * 1.5), (2, cancel), (3, huge)];
        store.append(&mut app, &b).unwrap();
        if i == 2_000 {
            store.flush().unwrap();
        }
    }
    store
}

fn points(v: &Value) -> Vec<(String, Vec<Option<f64>>)> {
    let Value::Vector(series) = v else { panic!("{v:?}") };
    series.iter().map(|s| (format!("{:?}", s.labels), s.points.clone())).collect()
}

/// Equal, both NaN, or within 1e-9 relative to the data's scale (about
/// 1): sums are added in another order, and Prometheus's running mean
/// leaves rounding where the true mean is 0.
fn same(x: Option<f64>, y: Option<f64>) -> bool {
    match (x, y) {
        (Some(x), Some(y)) => {
            x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0)
        }
        _ => x.is_none() && y.is_none(),
    }
}

#[test]
fn tiered_windows_answer_as_raw_samples_do() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let tiered = filled(d1.path(), vec![store::tier::SECOND, store::tier::MINUTE]);
    let raw = filled(d2.path(), vec![]);
    assert!(raw.tiers().is_empty() && tiered.tiers().len() == 2);
    let (start, end) = (T0 + 5 * 60 * SEC + 333_000_000, T0 + 40 * 60 * SEC);
    let mut compared = 0;
    for f in ["sum", "count", "avg", "min", "max"] {
        for r in ["4s", "7s", "4m", "5m13s", "17m"] {
            // Dense steps read raw samples (their edges cover the range);
            // sparse ones whole periods and edges.
            for step in [SEC, 7 * SEC + 1, 61 * SEC, 301 * SEC, 181 * SEC + 7] {
                let q = format!("{f}_over_time(g[{r}])");
                let a = Engine::new(&tiered).range(&q, start, end, step).unwrap();
                let b = Engine::new(&raw).range(&q, start, end, step).unwrap();
                let (pa, pb) = (points(&a.value), points(&b.value));
                assert_eq!(pa.len(), pb.len(), "{q}");
                for ((la, va), (lb, vb)) in pa.iter().zip(&pb) {
                    assert_eq!(la, lb, "{q}");
                    for (i, (x, y)) in va.iter().zip(vb).enumerate() {
                        assert!(same(*x, *y), "{q} step {step}, point {i}: tiered {x:?} raw {y:?}");
                    }
                }
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 125);
    // The cancelling series' windows are exact (a plain sum of each period
    // loses the 1s: off by hundreds).
    let q = "sum_over_time(g{k=\"cancel\"}[17m])";
    let a = Engine::new(&tiered).range(q, start, end, 301 * SEC).unwrap();
    for (labels, pts) in points(&a.value) {
        for (i, p) in pts.iter().enumerate() {
            let t = start + i as i64 * 301 * SEC;
            // Samples at 700 ms from T0 in [t − 17m, t]: their sum, exactly.
            let from = (t - 17 * 60 * SEC - T0).max(0);
            let (lo, hi) = ((from + 699_999_999) / 700_000_000, (t - T0) / 700_000_000);
            let want: f64 =
                (lo..=hi.min(3_429)).map(|k| [1e16, 1.0, -1e16, 3.0, 1.0][k as usize % 5] as i128).sum::<i128>() as f64;
            // Exact, to the last bit or two of a sum near 1e16.
            let got = p.expect("a sum");
            assert!((got - want).abs() <= 4.0 * f64::EPSILON * want.abs().max(1.0), "{labels} point {i}: {got} {want}");
        }
    }
}
