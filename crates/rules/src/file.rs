//! Prometheus rule files (`groups:` of `record:` and `alert:` rules), read
//! and checked before anything runs: every expression parses, every
//! duration reads, every name is a metric name.

use std::path::Path;
use std::time::Duration;

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub name: String,
    /// `1m`, `10s`, `100ms`; default: the command's `--interval`.
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default)]
    pub record: Option<String>,
    #[serde(default)]
    pub alert: Option<String>,
    pub expr: String,
    #[serde(default, rename = "for")]
    pub for_: Option<String>,
    #[serde(default)]
    pub keep_firing_for: Option<String>,
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
#[error("rule file {path}: {what}")]
pub struct FileError {
    pub path: String,
    pub what: String,
}

/// A duration as rule files write them (`1m`, `30s`, `100ms`).
pub fn duration(s: &str) -> Result<Duration, String> {
    model::parse_duration(s).map_err(|_| format!("{s:?} is not a duration (use 100ms, 30s, 1m, 1h)"))
}

fn metric_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .enumerate()
            .all(|(i, c)| c == '_' || c == ':' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit()))
}

/// Reads and checks a rule file.
pub fn load(path: &Path) -> Result<RuleFile, FileError> {
    let err = |what: String| FileError { path: path.display().to_string(), what };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let file: RuleFile = serde_norway::from_str(&text).map_err(|e| err(e.to_string()))?;
    for g in &file.groups {
        if let Some(i) = &g.interval {
            let d = duration(i).map_err(|e| err(format!("group {:?}: interval {e}", g.name)))?;
            if d < Duration::from_millis(100) {
                return Err(err(format!("group {:?}: interval {i}: at least 100ms", g.name)));
            }
        }
        for r in &g.rules {
            let what = match (&r.record, &r.alert) {
                (Some(n), None) if metric_name(n) => format!("record {n}"),
                (None, Some(n)) if !n.is_empty() => format!("alert {n}"),
                (Some(n), None) => return Err(err(format!("group {:?}: record {n:?} is not a metric name", g.name))),
                _ => return Err(err(format!("group {:?}: a rule needs one of record: or alert:", g.name))),
            };
            promql::parse(&r.expr).map_err(|e| err(format!("group {:?}, {what}: expr {:?}: {e}", g.name, r.expr)))?;
            if let Some(f) = &r.for_ {
                duration(f).map_err(|e| err(format!("group {:?}, {what}: for: {e}", g.name)))?;
            }
            if r.record.is_some() && (r.for_.is_some() || !r.annotations.is_empty()) {
                return Err(err(format!("group {:?}, {what}: for: and annotations: belong to alerts", g.name)));
            }
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<RuleFile, FileError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.yml");
        std::fs::write(&p, text).unwrap();
        load(&p)
    }

    #[test]
    fn prometheus_rule_files_read_and_mistakes_are_named() {
        let f = load_text(
            "groups:\n- name: g\n  interval: 500ms\n  rules:\n  - record: job:x:sum\n    expr: sum(x)\n  - alert: High\n    expr: x > 1\n    for: 1s\n    labels: {severity: page}\n    annotations: {summary: 'x is {{ $value }}'}\n",
        )
        .unwrap();
        assert_eq!(f.groups[0].rules.len(), 2);
        let e = load_text("groups:\n- name: g\n  rules:\n  - record: x\n    expr: sum(\n").unwrap_err();
        assert!(e.to_string().contains("expr \"sum(\""), "{e}");
        let e = load_text("groups:\n- name: g\n  interval: 10ms\n  rules: []\n").unwrap_err();
        assert!(e.to_string().contains("at least 100ms"), "{e}");
        let e = load_text("groups:\n- name: g\n  rules:\n  - expr: x\n").unwrap_err();
        assert!(e.to_string().contains("one of record: or alert:"), "{e}");
        let e = load_text("groups:\n- name: g\n  rulez: []\n").unwrap_err();
        assert!(e.to_string().contains("rulez"), "{e}");
    }
}
