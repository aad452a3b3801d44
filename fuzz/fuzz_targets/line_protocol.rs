//! InfluxDB line protocol and InfluxQL come from any client: parsing
//! arbitrary text never panics, never yields a point at a time kansoku does
//! not store, and a line is either refused or taken whole.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for precision in [1, 1_000_000_000] {
        let parsed = influx::parse_lines(text, precision, 1_800_000_000_000_000_000, "db", Some("rp"));
        for &(id, t, _) in &parsed.points.points {
            assert!(model::Timestamp(t).is_storable(), "stored time {t}");
            assert!(parsed.points.keys[id as usize].get("db") == Some("db"));
        }
        // Every series named is used by a point (a refused line leaves none).
        let mut used = vec![false; parsed.points.keys.len()];
        parsed.points.points.iter().for_each(|p| used[p.0 as usize] = true);
        assert!(used.iter().all(|u| *u), "a series without points");
        // Every string kept is named by a point, and every string point
        // names one of them.
        let mut named = vec![false; parsed.points.strings.len()];
        for &(id, _, v) in &parsed.points.points {
            if parsed.points.keys[id as usize].get(influx::TYPE_LABEL) == Some(influx::STRING_TYPE) {
                named[v as usize] = true;
            }
        }
        assert!(named.iter().all(|n| *n), "a string no point names");
        let lines = text.lines().filter(|l| !l.trim_start().is_empty() && !l.trim_start().starts_with('#')).count();
        assert!(parsed.errors.len() <= lines);
    }
    let _ = influx::parse_query(text, 1_800_000_000_000_000_000);
});
