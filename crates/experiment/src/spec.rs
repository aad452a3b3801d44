//! The experiment file (TOML):
//!
//! ```toml
//! name = "web-keepalive"
//! description = "nginx, 512 B page: keep-alive on and off"
//! packages = ["nginx"]                 # their versions go into the result
//! setup = ["nginx -c {dir}/nginx.conf -p {dir}"]   # run in order, before all
//! teardown = ["kill $(cat {dir}/nginx.pid)"]       # always run, after all
//!
//! [parameters]                         # every combination is one point
//! keepalive = ["", "--no-keepalive"]
//! connections = [4, 16]
//!
//! [workload]
//! run = "kansoku lab load http://127.0.0.1:18780/ -c {connections} {keepalive} -d 3s --json {out}"
//! parser = "kansoku-load"              # or wrk, ab, pgbench, json, regex
//! repetitions = 5
//! warmup = 1                           # runs per point before, not counted
//! randomize = true                     # a new order of the points each round
//! timeout = "5m"
//!
//! [telemetry]                          # kansoku series over each run's window, as its metrics
//! server = "http://127.0.0.1:7070"     # a kansoku collecting the machine (make up); --telemetry overrides
//! metrics = { cpu_busy = 'sum(rate(node_cpu_seconds_total{mode!="idle"}[{window}]))' }
//! ```
//!
//! A telemetry metric is a PromQL expression evaluated on the server at the
//! run's end, `{window}` standing for the run's length (`rate(…[{window}])`,
//! `max_over_time(…[{window}])`; PromQL's own braces are written as they
//! are); it must give one number.
//!
//! Placeholders: `{name}` of a parameter, `{out}` (a file the run may
//! write, read by the `json` parsers), `{dir}` (the experiment file's
//! folder), `{rep}` (the round), `{kansoku}` (the running kansoku binary).
//! Set-up and tear-down know `{dir}` and `{kansoku}`. An unknown one is an
//! error.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::metrics::Parser;

/// The placeholders every command may use beside the parameters.
pub const PLACEHOLDERS: &[&str] = &["out", "dir", "rep", "kansoku"];

/// One combination of the parameters' values, by name.
pub type Point = BTreeMap<String, String>;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Debian packages whose versions the result records.
    #[serde(default)]
    pub packages: Vec<String>,
    #[serde(default)]
    pub setup: Vec<String>,
    #[serde(default)]
    pub teardown: Vec<String>,
    /// Parameter -> the values to sweep (strings, numbers or booleans).
    #[serde(default)]
    pub parameters: BTreeMap<String, Vec<toml::Value>>,
    pub workload: Workload,
    /// kansoku series over each run's window, beside the workload's own
    /// figures.
    #[serde(default)]
    pub telemetry: Option<Telemetry>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    /// The kansoku to ask (`http://host:port`); `kansoku lab run
    /// --telemetry URL` overrides it.
    #[serde(default)]
    pub server: Option<String>,
    /// Metric name -> a PromQL expression, `{window}` the run's length.
    pub metrics: BTreeMap<String, String>,
}

/// A telemetry metric's query for a run of `window`: `{window}` replaced
/// by its length in whole milliseconds (rounded up, at least 1 ms).
pub fn telemetry_query(expr: &str, window: Duration) -> String {
    let ms = window.as_nanos().div_ceil(1_000_000).max(1);
    expr.replace("{window}", &format!("{ms}ms"))
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// A shell command (`sh -c`), with placeholders.
    pub run: String,
    pub parser: Parser,
    #[serde(default = "one")]
    pub repetitions: usize,
    #[serde(default)]
    pub warmup: usize,
    #[serde(default = "yes")]
    pub randomize: bool,
    /// Longest one run may take (`30s`, `5m`); default 1h.
    #[serde(default)]
    pub timeout: Option<String>,
}

fn one() -> usize {
    1
}

fn yes() -> bool {
    true
}

impl Experiment {
    /// Reads and checks an experiment file; the error names the file and
    /// what is wrong in it.
    pub fn load(path: &Path) -> Result<Experiment, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Experiment::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Experiment, String> {
        let e: Experiment = toml::from_str(text).map_err(|e| e.to_string())?;
        if e.name.trim().is_empty() {
            return Err("name is empty".into());
        }
        if e.workload.repetitions == 0 {
            return Err("workload.repetitions must be at least 1".into());
        }
        for (name, values) in &e.parameters {
            if values.is_empty() {
                return Err(format!("parameter {name} has no values"));
            }
            if PLACEHOLDERS.contains(&name.as_str()) {
                return Err(format!("parameter {name}: the name is taken by a placeholder"));
            }
            if let Some(v) = values.iter().find(|v| matches!(v, toml::Value::Array(_) | toml::Value::Table(_))) {
                return Err(format!("parameter {name}: {v:?} is not a string, number or boolean"));
            }
        }
        e.timeout()?;
        e.workload.parser.check()?;
        // Every placeholder of every command names something.
        let names: Vec<&str> = e.parameters.keys().map(String::as_str).chain(PLACEHOLDERS.iter().copied()).collect();
        for cmd in e.setup.iter().chain(&e.teardown) {
            check_placeholders(cmd, &["dir", "kansoku"])?;
        }
        check_placeholders(&e.workload.run, &names)?;
        if let Some(t) = &e.telemetry {
            if t.metrics.is_empty() {
                return Err("telemetry.metrics is empty".into());
            }
            // PromQL's own braces (label matchers) stay as they are: only
            // `{window}` is replaced, so nothing else is checked here; the
            // server names what it cannot parse.
            if let Some((name, _)) = t.metrics.iter().find(|(_, e)| e.trim().is_empty()) {
                return Err(format!("telemetry.metrics.{name} is empty"));
            }
        }
        Ok(e)
    }

    pub fn timeout(&self) -> Result<Duration, String> {
        match &self.workload.timeout {
            None => Ok(Duration::from_secs(3600)),
            Some(t) => {
                model::parse_duration(t).map_err(|_| format!("workload.timeout {t:?}: a duration like 30s or 5m"))
            }
        }
    }

    /// Every combination of the parameters' values, in a fixed order.
    pub fn points(&self) -> Vec<Point> {
        let mut points = vec![Point::new()];
        for (name, values) in &self.parameters {
            points = points
                .into_iter()
                .flat_map(|p| {
                    values.iter().map(move |v| {
                        let mut q = p.clone();
                        q.insert(name.clone(), value_text(v));
                        q
                    })
                })
                .collect();
        }
        points
    }
}

/// A parameter value as it goes into a command: strings as they are.
fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        // Refused by the check in `parse`.
        toml::Value::Array(_) | toml::Value::Table(_) => String::new(),
    }
}

/// `30s`, `5m`, `2h`, `500ms`.
/// The placeholders `{name}` of a command (`{{` and `}}` are literal braces).
fn placeholders(cmd: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = cmd;
    while let Some(i) = rest.find(['{', '}']) {
        let (c, after) = (rest.as_bytes()[i], &rest[i + 1..]);
        if after.starts_with(c as char) {
            rest = &after[1..];
            continue;
        }
        if c == b'}' {
            return Err(format!("{cmd:?}: a lone }} (write }}}} for a brace)"));
        }
        let end = after.find('}').ok_or_else(|| format!("{cmd:?}: an unclosed {{"))?;
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    Ok(out)
}

fn check_placeholders(cmd: &str, known: &[&str]) -> Result<(), String> {
    for p in placeholders(cmd)? {
        if !known.contains(&p) {
            return Err(format!("{cmd:?}: no parameter or placeholder {{{p}}} (known: {})", known.join(", ")));
        }
    }
    Ok(())
}

/// `cmd` with each `{name}` replaced by `values[name]`.
pub fn expand(cmd: &str, values: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut out = String::with_capacity(cmd.len());
    let mut rest = cmd;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let (c, after) = (rest.as_bytes()[i], &rest[i + 1..]);
        if after.starts_with(c as char) {
            out.push(c as char);
            rest = &after[1..];
            continue;
        }
        if c == b'}' {
            return Err(format!("{cmd:?}: a lone }}"));
        }
        let end = after.find('}').ok_or_else(|| format!("{cmd:?}: an unclosed {{"))?;
        let name = &after[..end];
        out.push_str(values.get(name).ok_or_else(|| format!("{cmd:?}: no value for {{{name}}}"))?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The order of the runs: `warmup + repetitions` rounds, each over every
/// point — shuffled each round when `randomize` (a seeded generator, so
/// `--seed` repeats an order). Each entry: (round, point index).
pub fn schedule(points: usize, rounds: usize, randomize: bool, seed: u64) -> Vec<(usize, usize)> {
    let mut rng = crate::stats::Rng::new(seed);
    let mut out = Vec::with_capacity(points * rounds);
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..points).collect();
        if randomize {
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
        }
        out.extend(order.into_iter().map(|p| (round, p)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
name = "t"
setup = ["echo {dir}"]
[parameters]
a = ["x", "y"]
n = [1, 2, 3]
[workload]
run = "echo {a} {n} {{literal}} > {out}"
parser = { kind = "regex", metrics = { v = 'v=(\d+)' } }
repetitions = 2
"#;

    #[test]
    fn points_are_every_combination() {
        let e = Experiment::parse(FILE).unwrap();
        let points = e.points();
        assert_eq!(points.len(), 6);
        assert_eq!(points[0], Point::from([("a".into(), "x".into()), ("n".into(), "1".into())]));
        assert_eq!(points[5], Point::from([("a".into(), "y".into()), ("n".into(), "3".into())]));
        assert_eq!(e.timeout().unwrap(), Duration::from_secs(3600));
        let values = BTreeMap::from([("a", "x".to_owned()), ("n", "1".to_owned()), ("out", "/o".to_owned())]);
        assert_eq!(expand(&e.workload.run, &values).unwrap(), "echo x 1 {literal} > /o");
    }

    #[test]
    fn mistakes_are_named() {
        let err = |t: &str| Experiment::parse(t).unwrap_err();
        assert!(err(&FILE.replace("{n} ", "{m} ")).contains("no parameter or placeholder {m}"));
        assert!(err(&FILE.replace("{dir}", "{a}")).contains("{a}"));
        assert!(err(&FILE.replace("repetitions = 2", "repetitions = 0")).contains("at least 1"));
        assert!(err(&FILE.replace("n = [1, 2, 3]", "n = []")).contains("no values"));
        assert!(err(&FILE.replace("n = [1, 2, 3]", "out = [1]")).contains("taken by a placeholder"));
        assert!(err(&FILE.replace("repetitions = 2", "repetitions = 2\ntimeout = \"soon\"")).contains("timeout"));
        assert!(err(&FILE.replace("name = \"t\"", "name = \"t\"\nnmae = 1")).contains("unknown field"));
        assert!(err(&FILE.replace("{out}", "{out")).contains("unclosed"));
        assert!(err(&FILE.replace("'v=(\\d+)'", "'v=('")).contains("regex"));
        assert!(err(&format!("{FILE}\n[telemetry]\nmetrics = {{}}\n")).contains("telemetry.metrics is empty"));
        assert!(
            err(&format!("{FILE}\n[telemetry]\nmetrics = {{ a = ' ' }}\n")).contains("telemetry.metrics.a is empty")
        );
        assert!(err(&format!("{FILE}\n[telemetry]\nserver = 'x'\n")).contains("metrics"));
    }

    #[test]
    fn telemetry_reads_with_promql_braces_and_the_window_in_ms() {
        let e = Experiment::parse(&format!(
            "{FILE}\n[telemetry]\nmetrics = {{ busy = 'sum(rate(node_cpu_seconds_total{{mode!=\"idle\"}}[{{window}}]))' }}\n"
        ))
        .unwrap();
        let expr = &e.telemetry.unwrap().metrics["busy"];
        assert_eq!(
            telemetry_query(expr, Duration::from_micros(1_500_001)),
            "sum(rate(node_cpu_seconds_total{mode!=\"idle\"}[1501ms]))"
        );
        assert_eq!(telemetry_query("x[{window}]", Duration::ZERO), "x[1ms]");
    }

    #[test]
    fn schedules_shuffle_each_round_and_repeat_with_the_seed() {
        let s = schedule(5, 3, true, 42);
        assert_eq!(s.len(), 15);
        for round in 0..3 {
            let mut seen: Vec<usize> = s.iter().filter(|(r, _)| *r == round).map(|(_, p)| *p).collect();
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2, 3, 4]);
        }
        assert_eq!(s, schedule(5, 3, true, 42));
        assert_ne!(s, schedule(5, 3, true, 43));
        assert_eq!(schedule(3, 1, false, 42), [(0, 0), (0, 1), (0, 2)]);
    }
}
