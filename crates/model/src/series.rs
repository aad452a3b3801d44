//! The identity of a series: a metric name and a sorted set of labels, written
//! the Prometheus way: `node_cpu_seconds_total{cpu="0",host="a",mode="user"}`.

use std::fmt;

/// The pseudo-label selectors use to match a series' name.
pub const METRIC_NAME_LABEL: &str = "__name__";

/// Invariant: `labels` is sorted by name, names are unique, and none is
/// `__name__` (the name is held apart).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    name: String,
    labels: Vec<(String, String)>,
}

impl SeriesKey {
    /// Builds a key; labels may come in any order. Later duplicates of a
    /// label name replace earlier ones.
    pub fn new<N, I, K, V>(name: N, labels: I) -> SeriesKey
    where
        N: Into<String>,
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut labels: Vec<(String, String)> = labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        labels.retain(|(k, _)| k != METRIC_NAME_LABEL);
        // Stable sort keeps insertion order among equal names; keep the last.
        labels.sort_by(|a, b| a.0.cmp(&b.0));
        let mut deduped: Vec<(String, String)> = Vec::with_capacity(labels.len());
        for (k, v) in labels {
            match deduped.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => deduped.push((k, v)),
            }
        }
        SeriesKey { name: name.into(), labels: deduped }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn labels(&self) -> &[(String, String)] {
        &self.labels
    }

    /// The value of a label, `__name__` included; `None` when absent.
    pub fn get(&self, label: &str) -> Option<&str> {
        if label == METRIC_NAME_LABEL {
            return Some(&self.name);
        }
        self.labels.binary_search_by(|(k, _)| k.as_str().cmp(label)).ok().map(|i| self.labels[i].1.as_str())
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.labels.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (k, v)) in self.labels.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{k}=\"")?;
            write_escaped(f, v)?;
            f.write_str("\"")?;
        }
        f.write_str("}")
    }
}

/// Writes a label value as the inside of a double-quoted selector string.
pub(crate) fn write_escaped(f: &mut fmt::Formatter<'_>, v: &str) -> fmt::Result {
    for c in v.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '"' => f.write_str("\\\"")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c => write!(f, "{c}")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_sorted_and_deduplicated() {
        let k = SeriesKey::new("m", [("z", "1"), ("a", "2"), ("z", "3"), ("__name__", "x")]);
        assert_eq!(k.to_string(), r#"m{a="2",z="3"}"#);
        assert_eq!(k.get("z"), Some("3"));
        assert_eq!(k.get("__name__"), Some("m"));
        assert_eq!(k.get("nope"), None);
    }

    #[test]
    fn display_escapes() {
        let k = SeriesKey::new("m", [("path", "a\"b\\c\nd")]);
        assert_eq!(k.to_string(), r#"m{path="a\"b\\c\nd"}"#);
        assert_eq!(SeriesKey::new("up", Vec::<(String, String)>::new()).to_string(), "up");
    }
}
