//! PromQL comes from any client (Grafana, curl): any text either fails to
//! parse or evaluates — over a small store of counters and gauges, as an
//! instant and as a range query — to a value or an error, never a panic,
//! and a vector result has one point per step.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

const T0: i64 = 1_800_000_000_000_000_000;

fn store() -> &'static Store {
    static STORE: OnceLock<Store> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kansoku-fuzz-promql-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir, Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
        let mut app = Appender::default();
        for i in 0..200i64 {
            let mut b = Batch::new(Timestamp(T0 + i * 15_000_000_000));
            if i == 0 {
                b.defs = vec![
                    (0, SeriesKey::new("c_total", [("a", "1")])),
                    (1, SeriesKey::new("c_total", [("a", "2")])),
                    (2, SeriesKey::new("g", [("a", "1"), ("le", "0.5")])),
                    (3, SeriesKey::new("g", [("a", "1"), ("le", "+Inf")])),
                ];
            }
            b.points = vec![(0, i as f64), (1, (i % 7) as f64), (2, (i * 3 % 11) as f64 - 5.0), (3, 1e300 / (i + 1) as f64)];
            store.append(&mut app, &b).unwrap();
        }
        store
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Long enough to reach the depth and operator bounds (issue 42).
    if text.len() > 4096 {
        return;
    }
    // The parser's own panics (promql::parse catches them: an error, not a
    // crash) must not reach libFuzzer's aborting hook; ours must.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let parsed = promql::parse(text);
    std::panic::set_hook(hook);
    if parsed.is_err() {
        return;
    }
    let mut engine = promql::Engine::new(store());
    engine.limits = promql::Limits { series: 100, samples: 200_000, ..promql::Limits::default() };
    let end = T0 + 200 * 15_000_000_000;
    for out in [engine.instant(text, end), engine.range(text, T0, end, 60_000_000_000)] {
        if let Ok(o) = out
            && let promql::Value::Vector(v) = &o.value
        {
            assert!(v.iter().all(|s| s.points.len() == o.times.len()));
        }
    }
});
