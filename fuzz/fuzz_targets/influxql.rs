//! InfluxQL comes from any client (Grafana, the Python client, curl): any
//! text either fails to parse with a message or runs — over a small
//! database of two measurements — to an answer or a statement error, never
//! a panic; a chunked answer is one JSON document per line.
#![no_main]
use std::collections::BTreeSet;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use store::{FsyncPolicy, Options, Store};

/// The store, and the string dictionary its string points' ids name.
fn store() -> &'static (Store, influx::strings::Dict) {
    static STORE: OnceLock<(Store, influx::strings::Dict)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("kansoku-fuzz-influxql-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir, Options { fsync: FsyncPolicy::Never, ..Options::default() }).unwrap();
        let mut lines = String::new();
        for i in 0..40u64 {
            let host = ["a", "b", "c"][(i % 3) as usize];
            lines.push_str(&format!("cpu,host={host},region=r{} load={},n={}i,ip={}u {}\n", i % 2, i as f64 / 4.0, i, u64::MAX - i, i));
            if i % 4 == 0 {
                lines.push_str(&format!("mem used={} {}\n", 1e3 + i as f64, i));
            }
            let msg = ["ok", "", "a \\\"b\\\"", "ok"][(i % 4) as usize];
            lines.push_str(&format!("log,host=h{} msg=\"{msg}\",up={} {i}\n", i % 2, i % 3 == 0));
        }
        let mut parsed = influx::parse_lines(&lines, 1_000_000_000, 0, "db", None);
        assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
        let mut dict = influx::strings::Dict::default();
        let (ids, new) = dict.plan(&parsed.points.strings).unwrap();
        dict.commit(new.unwrap());
        parsed.points.set_string_ids(&ids);
        influx::write(&store, &parsed.points).unwrap();
        (store, dict)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // Long enough to reach the depth and comparison bounds (issue 42).
    if text.len() > 4096 {
        return;
    }
    let Ok(statements) = influx::parse_query(text, 100_000_000_000) else { return };
    let mut dbs = BTreeSet::new();
    let (store, dict) = store();
    let strings = |id| dict.get(id).cloned();
    for (i, s) in statements.iter().enumerate() {
        if let Ok(answer) = influx::execute(store, s, Some("db"), Some(1), &mut dbs, &strings) {
            let mut out = String::new();
            influx::chunk_lines(i, &answer, matches!(s, influx::Statement::Select(_)), 3, &mut out);
            for line in out.lines() {
                serde_json::from_str::<serde_json::Value>(line).expect("a chunk is one JSON document");
            }
        }
    }
});
