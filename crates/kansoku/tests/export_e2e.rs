//! `kansoku export` through the real binary: every sample and event of a
//! data directory comes back exact in CSV, line protocol, OpenMetrics and
//! Parquet (read back with the parquet crate's own reader); bad requests fail
//! with a message and an exit code.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use codec::events::{Encoding, EventBatch};
use model::{Batch, SeriesKey, Timestamp};
use store::{Appender, FsyncPolicy, Options, Store};

const BIN: &str = env!("CARGO_BIN_EXE_kansoku");
const T0: i64 = 1_763_000_000_123_456_789;

type Sample = (SeriesKey, i64, f64);
/// (cpu, time, pid, tid, ip)
type Event = (u32, i64, u32, u32, u64);

/// Every sample and event written.
fn fixture(dir: &Path) -> (Vec<Sample>, Vec<Event>) {
    let opts = Options { fsync: FsyncPolicy::Never, block_duration: Duration::from_secs(3600), ..Options::default() };
    let store = Store::open(dir, opts).unwrap();
    let keys = [
        SeriesKey::new("node_cpu_seconds_total", [("cpu", "0"), ("host", "a b"), ("mode", "user")]),
        SeriesKey::new("odd", [("host", "x,y=z"), ("path", "/q\"uote\\")]),
        SeriesKey::new("bare", Vec::<(String, String)>::new()),
    ];
    let mut app = Appender::default();
    let mut samples = Vec::new();
    for i in 0..50i64 {
        let t = T0 + i * 100_000_000;
        let mut b = Batch::new(Timestamp(t));
        for (j, k) in keys.iter().enumerate() {
            if i == 0 {
                b.defs.push((j as u32, k.clone()));
            }
            let v = match j {
                0 => i as f64 * 0.01,
                1 => -1e300 * i as f64,
                _ => 1.0 / 3.0 + i as f64,
            };
            b.points.push((j as u32, v));
            samples.push((k.clone(), t, v));
        }
        store.append(&mut app, &b).unwrap();
        if i == 25 {
            store.flush().unwrap(); // half in a block, half in the head/WAL
        }
    }
    let mut events = Vec::new();
    for cpu in 0..2u32 {
        let mut b = EventBatch { cpu, ..Default::default() };
        for i in 0..30i64 {
            let (pid, ip) = (100 + cpu, 0xffff_ffff_8100_0000u64 + i as u64 * 16);
            b.push(T0 + i * 100_000, pid, pid + u32::from(i % 3 == 0), ip);
            events.push((cpu, T0 + i * 100_000, pid, pid + u32::from(i % 3 == 0), ip));
        }
        store.events().append(&SeriesKey::new("perf_cpu_clock", [("host", "a")]), &mut b, Encoding::Fast).unwrap();
    }
    store.close().unwrap();
    (samples, events)
}

fn export(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).arg("export").args(args).arg("--data").arg(dir).output().unwrap();
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn sorted<T: PartialOrd>(mut v: Vec<T>) -> Vec<T> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

/// Splits a CSV line (quotes as written by export).
fn csv_split(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut chars) = (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[test]
fn csv_and_line_protocol_round_trip_every_sample() {
    let dir = tempfile::tempdir().unwrap();
    let (samples, events) = fixture(dir.path());
    let want: Vec<(String, i64, u64)> =
        sorted(samples.iter().map(|(k, t, v)| (k.to_string(), *t, v.to_bits())).collect());

    let (ok, csv, err) = export(dir.path(), &["{}", "--from", "0"]);
    assert!(ok, "{err}");
    let mut lines = csv.lines();
    let header = csv_split(lines.next().unwrap());
    assert_eq!(header, ["time_ns", "name", "cpu", "host", "mode", "path", "value"]);
    let got: Vec<(String, i64, u64)> = sorted(
        lines
            .map(|l| {
                let f = csv_split(l);
                let labels: Vec<(String, String)> = header[2..6]
                    .iter()
                    .zip(&f[2..6])
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let key = SeriesKey::new(f[1].clone(), labels);
                (key.to_string(), f[0].parse().unwrap(), f[6].parse::<f64>().unwrap().to_bits())
            })
            .collect(),
    );
    assert_eq!(got, want, "CSV holds every sample, exact");

    let (ok, lp, err) = export(dir.path(), &["{}", "--from", "0", "--format", "influx-lp"]);
    assert!(ok, "{err}");
    assert_eq!(lp.lines().count(), samples.len());
    assert!(lp.contains(r#"odd,host=x\,y\=z,path=/q"uote\\ value=-"#), "escaping: {}", lp.lines().nth(1).unwrap());
    assert!(lp.contains(&format!("bare value=0.3333333333333333 {T0}\n")));

    let (ok, om, err) = export(dir.path(), &["node_cpu_seconds_total", "--from", "0", "--format", "openmetrics"]);
    assert!(ok, "{err}");
    assert!(om.starts_with("# TYPE node_cpu_seconds_total unknown\n") && om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains(r#"node_cpu_seconds_total{cpu="0",host="a b",mode="user"} 0.01 1763000000.223456789"#), "{om}");

    // Events, with unsigned 64-bit addresses.
    let (ok, lp, err) = export(dir.path(), &["perf_cpu_clock", "--events", "--from", "0", "--format", "influx-lp"]);
    assert!(ok, "{err}");
    assert_eq!(lp.lines().count(), events.len());
    assert!(lp.contains(&format!("perf_cpu_clock,host=a,cpu=1 pid=101i,tid=102i,ip=18446744071578845184u {T0}\n")));
    let (ok, csv, _) = export(dir.path(), &["{}", "--events", "--from", "0"]);
    assert!(ok);
    let got: Vec<Event> = sorted(
        csv.lines()
            .skip(1)
            .map(|l| {
                let f = csv_split(l);
                (
                    f[3].parse().unwrap(),
                    f[0].parse().unwrap(),
                    f[4].parse().unwrap(),
                    f[5].parse().unwrap(),
                    f[6].parse().unwrap(),
                )
            })
            .collect(),
    );
    assert_eq!(got, sorted(events));
}

#[test]
fn parquet_round_trips_through_a_reader() {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let dir = tempfile::tempdir().unwrap();
    let (samples, events) = fixture(dir.path());
    let file = dir.path().join("out.parquet");
    let (ok, _, err) = export(dir.path(), &["{}", "--from", "0", "--format", "parquet", "-o", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let mut got = BTreeMap::new();
    for row in reader.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        let (mut t, mut name, mut labels, mut v) = (0, String::new(), Vec::new(), 0.0);
        for (col, field) in row.get_column_iter() {
            match (col.as_str(), field) {
                ("time_ns", Field::Long(x)) => t = *x,
                ("name", Field::Str(s)) => name = s.clone(),
                ("value", Field::Double(x)) => v = *x,
                (l, Field::Str(s)) => labels.push((l.to_string(), s.clone())),
                (_, Field::Null) => {}
                other => panic!("unexpected column {other:?}"),
            }
        }
        got.insert((SeriesKey::new(name, labels).to_string(), t), v.to_bits());
    }
    let want: BTreeMap<(String, i64), u64> =
        samples.iter().map(|(k, t, v)| ((k.to_string(), *t), v.to_bits())).collect();
    assert_eq!(got, want);

    let file = dir.path().join("events.parquet");
    let (ok, _, err) =
        export(dir.path(), &["{}", "--events", "--from", "0", "--format", "parquet", "-o", file.to_str().unwrap()]);
    assert!(ok, "{err}");
    let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
    let mut got = Vec::new();
    for row in reader.get_row_iter(None).unwrap() {
        let row = row.unwrap();
        let mut e = (0u32, 0i64, 0u32, 0u32, 0u64);
        for (col, field) in row.get_column_iter() {
            match (col.as_str(), field) {
                ("time_ns", Field::Long(x)) => e.1 = *x,
                ("cpu", Field::UInt(x)) => e.0 = *x,
                ("pid", Field::UInt(x)) => e.2 = *x,
                ("tid", Field::UInt(x)) => e.3 = *x,
                ("ip", Field::ULong(x)) => e.4 = *x,
                _ => {}
            }
        }
        got.push(e);
    }
    assert_eq!(sorted(got), sorted(events));
}

#[test]
fn bad_requests_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let (ok, _, err) = export(dir.path(), &["nothing_like_this", "--from", "0"]);
    assert!(!ok && err.contains("nothing matches"), "{err}");
    let (ok, _, err) = export(dir.path(), &["{", "--from", "0"]);
    assert!(!ok && err.contains("selectors look like"), "{err}");
    let (ok, _, err) = export(dir.path(), &["{}", "--format", "parquet"]);
    assert!(!ok && err.contains("--out"), "{err}");
    let (ok, _, err) = export(dir.path(), &["{}", "--events", "--format", "openmetrics", "--from", "0"]);
    assert!(!ok && err.contains("no OpenMetrics form"), "{err}");
    let (ok, _, err) = export(&dir.path().join("missing"), &["{}"]);
    assert!(!ok && err.contains("does not exist"), "{err}");
}
