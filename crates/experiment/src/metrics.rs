//! A workload's own output read into metrics. A parser is a preset by name
//! (`kansoku-load`, `wrk`, `ab`, `pgbench`) or written out:
//!
//! ```toml
//! parser = { kind = "regex", metrics = { tps = 'tps = ([0-9.]+)' } }        # over stdout and stderr
//! parser = { kind = "json", metrics = { rps = "/result/responses_per_s" } } # JSON pointers into {out}
//! parser = { kind = "json", from = "stdout", metrics = { … } }             # … or into stdout
//! ```
//!
//! Every metric must be found in every run; one that is not fails the run,
//! naming the metric.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Parser {
    Preset(String),
    Spec(Spec),
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// `regex` or `json`.
    pub kind: String,
    /// Metric name -> a regex whose first group is the number, or a JSON
    /// pointer to it.
    pub metrics: BTreeMap<String, String>,
    /// For `json`: `out` (the file `{out}`, default) or `stdout`.
    #[serde(default)]
    pub from: Option<String>,
}

/// The presets: what each tool's own report says.
fn preset(name: &str) -> Option<Spec> {
    let spec = |kind: &str, m: &[(&str, &str)]| Spec {
        kind: kind.into(),
        metrics: m.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        from: None,
    };
    Some(match name {
        "kansoku-load" => spec(
            "json",
            &[
                ("responses_per_s", "/result/responses_per_s"),
                ("p50_us", "/result/latency_us/from_intended/p50"),
                ("p99_us", "/result/latency_us/from_intended/p99"),
                ("max_us", "/result/latency_us/from_intended/max"),
                ("cpu_s", "/result/cpu_s"),
            ],
        ),
        "wrk" => spec("regex", &[("responses_per_s", r"Requests/sec:\s+([0-9.]+)")]),
        "ab" => spec(
            "regex",
            &[
                ("responses_per_s", r"Requests per second:\s+([0-9.]+)"),
                ("mean_ms", r"Time per request:\s+([0-9.]+) \[ms\] \(mean\)"),
            ],
        ),
        "pgbench" => spec("regex", &[("tps", r"tps = ([0-9.]+)"), ("latency_ms", r"latency average = ([0-9.]+) ms")]),
        _ => return None,
    })
}

impl Parser {
    /// The parser spelled out (a preset's definition).
    pub fn spec(&self) -> Result<Spec, String> {
        match self {
            Parser::Spec(s) => Ok(s.clone()),
            Parser::Preset(name) => preset(name).ok_or_else(|| {
                format!("workload.parser {name:?}: no such preset (kansoku-load, wrk, ab, pgbench; or kind = \"regex\" / \"json\")")
            }),
        }
    }

    /// Checks the parser: a known preset or kind, regexes that compile
    /// with a group, pointers that start with `/`.
    pub fn check(&self) -> Result<(), String> {
        let s = self.spec()?;
        if s.metrics.is_empty() {
            return Err("workload.parser: no metrics".into());
        }
        match (s.kind.as_str(), s.from.as_deref()) {
            ("regex", None) => {
                for (m, re) in &s.metrics {
                    let r = regex::Regex::new(re).map_err(|e| format!("workload.parser metric {m}: regex {e}"))?;
                    if r.captures_len() < 2 {
                        return Err(format!(
                            "workload.parser metric {m}: the regex {re:?} has no group for the number"
                        ));
                    }
                }
                Ok(())
            }
            ("json", None | Some("out" | "stdout")) => {
                match s.metrics.iter().find(|(_, p)| !p.is_empty() && !p.starts_with('/')) {
                    Some((m, p)) => Err(format!("workload.parser metric {m}: {p:?} is not a JSON pointer (/a/b)")),
                    None => Ok(()),
                }
            }
            ("json", Some(other)) => Err(format!("workload.parser from = {other:?}: out or stdout")),
            (kind, _) => Err(format!("workload.parser kind {kind:?}: regex or json")),
        }
    }

    /// The metrics of one run from its output (`text`: stdout and stderr)
    /// and the file it wrote at `{out}`, if any.
    pub fn read(&self, text: &str, out_file: Option<&str>) -> Result<BTreeMap<String, f64>, String> {
        let s = self.spec()?;
        let mut metrics = BTreeMap::new();
        match s.kind.as_str() {
            "regex" => {
                for (m, re) in &s.metrics {
                    let r = regex::Regex::new(re).map_err(|e| e.to_string())?;
                    let v = r
                        .captures(text)
                        .and_then(|c| c.get(1))
                        .ok_or_else(|| format!("metric {m}: {re:?} matched nothing in the output"))?;
                    let n = v.as_str().parse().map_err(|_| format!("metric {m}: {:?} is not a number", v.as_str()))?;
                    metrics.insert(m.clone(), n);
                }
            }
            _ => {
                let doc = match s.from.as_deref() {
                    Some("stdout") => text,
                    _ => out_file.ok_or("the workload wrote nothing at {out} for the json parser")?,
                };
                let doc: serde_json::Value =
                    serde_json::from_str(doc).map_err(|e| format!("the workload's JSON: {e}"))?;
                for (m, p) in &s.metrics {
                    let v = doc
                        .pointer(p)
                        .and_then(serde_json::Value::as_f64)
                        .ok_or_else(|| format!("metric {m}: no number at {p} of the workload's JSON"))?;
                    metrics.insert(m.clone(), v);
                }
            }
        }
        Ok(metrics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_read_their_tools_reports() {
        let pg = "number of transactions actually processed: 1000\nlatency average = 2.130 ms\ntps = 469.48 (without initial connection time)\n";
        let m = Parser::Preset("pgbench".into()).read(pg, None).unwrap();
        assert_eq!(m, BTreeMap::from([("latency_ms".into(), 2.13), ("tps".into(), 469.48)]));
        let load = r#"{"result": {"responses_per_s": 10.5, "cpu_s": 1.0, "latency_us": {"from_intended": {"p50": 1, "p99": 2, "max": 3}}}}"#;
        let m = Parser::Preset("kansoku-load".into()).read("", Some(load)).unwrap();
        assert_eq!((m["responses_per_s"], m["p99_us"], m.len()), (10.5, 2.0, 5));
        let wrk = "Requests/sec:  70000.12\n";
        assert_eq!(Parser::Preset("wrk".into()).read(wrk, None).unwrap()["responses_per_s"], 70000.12);
    }

    #[test]
    fn a_missing_metric_is_named() {
        let e = Parser::Preset("pgbench".into()).read("tps = 5", None).unwrap_err();
        assert!(e.contains("latency_ms"), "{e}");
        let e = Parser::Preset("kansoku-load".into()).read("", None).unwrap_err();
        assert!(e.contains("{out}"), "{e}");
        let p = Parser::Spec(Spec {
            kind: "json".into(),
            metrics: [("x".to_owned(), "/a".to_owned())].into(),
            from: Some("stdout".into()),
        });
        assert_eq!(p.read(r#"{"a": 4}"#, None).unwrap()["x"], 4.0);
        assert!(p.read(r#"{"a": "no"}"#, None).unwrap_err().contains("no number at /a"));
    }

    #[test]
    fn bad_parsers_are_refused() {
        assert!(Parser::Preset("nope".into()).check().unwrap_err().contains("no such preset"));
        let spec = |kind: &str, v: &str| {
            Parser::Spec(Spec { kind: kind.into(), metrics: [("m".to_owned(), v.to_owned())].into(), from: None })
        };
        assert!(spec("regex", "tps").check().unwrap_err().contains("no group"));
        assert!(spec("json", "a/b").check().unwrap_err().contains("JSON pointer"));
        assert!(spec("xml", "/a").check().unwrap_err().contains("regex or json"));
        assert!(spec("regex", r"(\d+)").check().is_ok());
    }
}
