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

/// Bytes a label name (or a metric name) may have, at every ingest path.
pub const LABEL_NAME_BYTES_MAX: usize = 1024;
/// Bytes a label value may have (a 30 MB value was taken, and every
/// query naming its series then copied it).
pub const LABEL_VALUE_BYTES_MAX: usize = 16 << 10;
/// Labels a series may have.
pub const LABELS_MAX: usize = 128;

/// A metric name as Prometheus writes one: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// A label name as Prometheus writes one: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

impl SeriesKey {
    /// Whether the key is within the size limits every ingest path holds
    /// series to ([`LABEL_NAME_BYTES_MAX`], [`LABEL_VALUE_BYTES_MAX`],
    /// [`LABELS_MAX`]); the error names what is over.
    pub fn check_size(&self) -> Result<(), String> {
        if self.name.len() > LABEL_NAME_BYTES_MAX {
            return Err(format!("a metric name of {} bytes; at most {LABEL_NAME_BYTES_MAX}", self.name.len()));
        }
        if self.labels.len() > LABELS_MAX {
            return Err(format!("{} labels on one series; at most {LABELS_MAX}", self.labels.len()));
        }
        for (k, v) in &self.labels {
            if k.len() > LABEL_NAME_BYTES_MAX {
                return Err(format!("a label name of {} bytes; at most {LABEL_NAME_BYTES_MAX}", k.len()));
            }
            if v.len() > LABEL_VALUE_BYTES_MAX {
                return Err(format!("label {k:.64}'s value of {} bytes; at most {LABEL_VALUE_BYTES_MAX}", v.len()));
            }
        }
        Ok(())
    }

    /// Whether the metric name and every label name are Prometheus's
    /// ([`is_metric_name`], [`is_label_name`]): what the Prometheus paths
    /// (remote write) take and the exposition formats can print.
    pub fn check_names(&self) -> Result<(), String> {
        if !is_metric_name(&self.name) {
            return Err(format!("invalid metric name {:?}", self.name.chars().take(64).collect::<String>()));
        }
        match self.labels.iter().find(|(k, _)| !is_label_name(k)) {
            Some((k, _)) => Err(format!("invalid label name {:?}", k.chars().take(64).collect::<String>())),
            None => Ok(()),
        }
    }

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

/// A label value as a double-quoted PromQL (and selector) string literal,
/// quotes included, escaped as the parsers read it back: what every query
/// built from a host's or a series' name puts between the braces.
pub fn quoted(v: &str) -> String {
    struct Q<'a>(&'a str);
    impl fmt::Display for Q<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("\"")?;
            write_escaped(f, self.0)?;
            f.write_str("\"")
        }
    }
    Q(v).to_string()
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
    fn quoted_values_parse_back_to_themselves() {
        for v in ["vm", "a\"b", "back\\slash", "new\nline\ttab\r", "ユニ", ""] {
            let sel = crate::Selector::parse(&format!("x{{host={}}}", quoted(v))).unwrap();
            assert_eq!(sel.matchers[1].value, v);
        }
    }

    #[test]
    fn names_and_sizes_are_checked_as_every_ingest_path_needs() {
        let ok = SeriesKey::new("node_cpu:rate5m", [("_a1", "any\nvalue \"x\"")]);
        assert_eq!((ok.check_names(), ok.check_size()), (Ok(()), Ok(())));
        for bad in ["injected_metric{job=\"forged\"} 1e9\nx", "1up", "", "a-b", "a b"] {
            assert!(SeriesKey::new(bad, [("a", "1")]).check_names().is_err(), "{bad:?}");
        }
        for bad in ["a:b", "1a", "", "a\nb", "é"] {
            let e = SeriesKey::new("m", [(bad, "1")]).check_names().unwrap_err();
            assert!(e.contains("invalid label name"), "{e}");
        }
        let long = "v".repeat(LABEL_VALUE_BYTES_MAX + 1);
        assert!(SeriesKey::new("m", [("a", long.as_str())]).check_size().unwrap_err().contains("16384"));
        assert!(SeriesKey::new("m", [("a", &long[1..])]).check_size().is_ok());
        let many: Vec<(String, String)> = (0..=LABELS_MAX).map(|i| (format!("l{i}"), "v".into())).collect();
        assert!(SeriesKey::new("m", many).check_size().is_err());
        assert!(SeriesKey::new("m".repeat(LABEL_NAME_BYTES_MAX + 1), [("a", "1")]).check_size().is_err());
    }

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
