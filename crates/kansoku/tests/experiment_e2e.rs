//! `kansoku lab run` and `lab compare` as a user runs them, on experiments
//! whose workload prints a number the test knows: set-up before and
//! tear-down after (also when set-up fails), warm-up rounds left out of the
//! summary, every point in every round, the environment recorded; a
//! change between two results named significant with the exact p-value;
//! a failing run reported with its cause and a non-zero exit.

mod common;

use std::path::Path;

use common::run;

fn write_experiment(dir: &Path, name: &str, offset: u32) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"
name = "{name}"
packages = ["coreutils"]
setup = ["touch {{dir}}/setup-ran"]
teardown = ["touch {{dir}}/teardown-ran"]
[parameters]
x = [1, 2]
[workload]
run = "echo value=$(( {{x}} * 10 + {{rep}} + {offset} ))"
parser = {{ kind = "regex", metrics = {{ v = 'value=(\d+)' }} }}
repetitions = 4
warmup = 1
"#
        ),
    )
    .unwrap();
    path
}

fn lab_run(file: &Path, out: &Path) -> (bool, String) {
    let o = run(&["lab", "run", file.to_str().unwrap(), "--out", out.to_str().unwrap(), "--seed", "7"]);
    // What it printed: results (stdout), then progress and errors (stderr).
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn an_experiment_runs_and_two_results_compare() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let (ok, log) = lab_run(&write_experiment(dir.path(), "e", 0), &a);
    assert!(ok, "{log}");
    assert!(log.contains("2 points x (1 warm-up + 4 repetitions) = 10 runs") && log.contains("[10/10]"), "{log}");
    assert!(dir.path().join("setup-ran").exists() && dir.path().join("teardown-ran").exists());
    let doc = common::read_json(&a);
    assert_eq!(doc["runs"].as_array().unwrap().len(), 10);
    // The report beside it: a bar with its interval per point.
    let html = std::fs::read_to_string(a.with_extension("html")).unwrap();
    assert_eq!((html.matches("<rect class=bar").count(), html.matches("<path class=ci").count()), (2, 2));
    assert!(doc["environment"]["kernel.release"].is_string() && doc["environment"]["package.coreutils"].is_string());
    // Round r of point x printed x·10 + r; round 0 is the warm-up.
    let s = &doc["summary"][0];
    assert_eq!(s["point"]["x"], "1");
    assert_eq!(s["metrics"]["v"]["values"], serde_json::json!([11.0, 12.0, 13.0, 14.0]));
    assert_eq!(s["metrics"]["v"]["median"], 12.5);
    assert_eq!(doc["summary"][1]["metrics"]["v"]["median"], 22.5);

    // B is 100 higher: four against four, all above: p = 2/70 exactly.
    let (ok, log) = lab_run(&write_experiment(dir.path(), "e", 100), &b);
    assert!(ok, "{log}");
    let o = run(&["lab", "compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{report}{}", String::from_utf8_lossy(&o.stderr));
    assert!(report.contains("environment: the same"), "{report}");
    let line = report.lines().find(|l| l.starts_with("x=\"1\"")).unwrap_or_else(|| panic!("{report}"));
    assert!(line.contains("0.0286") && line.contains("higher") && line.contains("+800.00%"), "{line}");
}

#[test]
fn failures_are_reported_with_their_cause() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_experiment(dir.path(), "f", 0);
    // A workload that fails for x = 2: its runs are errors, the rest stand.
    let text = std::fs::read_to_string(&file).unwrap().replace("echo value=", "test {x} = 1 && echo value=");
    std::fs::write(&file, text).unwrap();
    let out = dir.path().join("f.json");
    let (ok, log) = lab_run(&file, &out);
    assert!(!ok && log.contains("5 of 10 runs failed"), "{log}");
    let doc = common::read_json(&out);
    let errors: Vec<&str> = doc["runs"].as_array().unwrap().iter().filter_map(|r| r["error"].as_str()).collect();
    assert_eq!(errors.len(), 5);
    assert!(errors.iter().all(|e| e.starts_with("exit 1")), "{errors:?}");

    // A set-up that fails: the tear-down still runs; nothing else does.
    let text = std::fs::read_to_string(&file).unwrap().replace("touch {dir}/setup-ran", "exit 3");
    std::fs::write(&file, text).unwrap();
    std::fs::remove_file(dir.path().join("teardown-ran")).unwrap();
    let (ok, log) = lab_run(&file, &out);
    assert!(!ok && log.contains("setup \"exit 3\" failed (exit 3)"), "{log}");
    assert!(dir.path().join("teardown-ran").exists());

    // Mistakes in the file are named before anything runs.
    std::fs::write(&file, "name = \"g\"\n[workload]\nrun = \"echo {y}\"\nparser = \"wrk\"\n").unwrap();
    let (ok, log) = lab_run(&file, &out);
    assert!(!ok && log.contains("no parameter or placeholder {y}"), "{log}");
}

/// The experiments shipped in `experiments/` read, and their plans print.
#[test]
fn shipped_experiments_read() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let o = run(&["lab", "run", path.to_str().unwrap(), "--dry-run"]);
            let log = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
            assert!(o.status.success() && log.contains("runs, order seed"), "{}: {log}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} experiments in {}", dir.display());
}

/// `[telemetry]`: kansoku series over each run's window become the run's
/// metrics. Each run writes a probe value to a running `kansoku up` (its
/// point's), and must read back exactly that value and that one sample —
/// not the other runs' — and the collector's CPU seconds over the window
/// add up to the machine's cores. A server that cannot be reached is
/// refused before any run.
#[test]
fn telemetry_metrics_come_from_each_runs_window() {
    let dir = tempfile::tempdir().unwrap();
    let k = common::up(&dir.path().join("k"));
    common::create_database(&k.addr, "lab", "");
    let base = format!("http://{}", k.addr);
    let file = dir.path().join("tele.toml");
    // The workload lasts a second (its `sleep 1` is what it does, not a wait
    // for anything): a window of ten collector rounds for `rate()`.
    std::fs::write(
        &file,
        format!(
            r#"
name = "tele"
[parameters]
v = [3, 7]
[workload]
run = "sleep 1 && python3 -c \"import urllib.request as u; u.urlopen(u.Request('{base}/write?db=lab', data=b'probe value={{v}}', method='POST'))\" && echo ok=1"
parser = {{ kind = "regex", metrics = {{ ok = 'ok=(\d+)' }} }}
repetitions = 2
[telemetry]
server = "{base}"
metrics = {{ probe = 'max_over_time(probe_value[{{window}}])', n = 'count_over_time(probe_value[{{window}}])', cores = 'sum(rate(node_cpu_seconds_total[{{window}}]))' }}
"#
        ),
    )
    .unwrap();
    let out = dir.path().join("tele.json");
    let (ok, log) = lab_run(&file, &out);
    assert!(ok, "{log}");
    let doc = common::read_json(&out);
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let nproc = std::thread::available_parallelism().unwrap().get() as f64;
    for r in runs {
        let v: f64 = r["point"]["v"].as_str().unwrap().parse().unwrap();
        let m = &r["metrics"];
        assert_eq!((m["probe"].as_f64(), m["n"].as_f64(), m["ok"].as_f64()), (Some(v), Some(1.0), Some(1.0)), "{r}");
        let cores = m["cores"].as_f64().unwrap();
        assert!((cores - nproc).abs() < 0.25 * nproc, "CPU seconds per second over the window: {cores}, cores {nproc}");
        // The run's window on the dashboard of the telemetry server.
        assert!(r["dashboard"].as_str().unwrap().starts_with(&format!("{base}/#")), "{r}");
    }
    // Refused before any run, naming the server and the way out.
    let o = run(&["lab", "run", file.to_str().unwrap(), "--telemetry", "http://127.0.0.1:1"]);
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && log.contains("server http://127.0.0.1:1"), "{log}");
    assert!(!log.contains("[1/4]"), "no run started: {log}");
}
