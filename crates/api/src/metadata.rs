//! What `/prometheus/api/v1/metadata` tells Grafana of each metric: its
//! type, read from the stored names as `/federate` types them (a classic
//! histogram `X` from `X_bucket{le}`, `X_sum` and `X_count`; `X_total` a
//! counter), and its help, from the tables of the docs that define every
//! series kansoku writes (`docs/metrics.md`, `trace.md`, `processes.md`),
//! built into the binary so that the docs and the answer cannot disagree.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

/// The docs whose tables name kansoku's series.
const DOCS: [&str; 3] = [
    include_str!("../../../docs/metrics.md"),
    include_str!("../../../docs/trace.md"),
    include_str!("../../../docs/processes.md"),
];

/// A metric family's metadata, as Prometheus answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: &'static str,
    pub help: String,
    pub unit: &'static str,
}

impl Meta {
    /// `{"type", "help", "unit"}`, as Prometheus writes it.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "type": self.kind, "help": self.help, "unit": self.unit })
    }
}

/// What the docs say of each series: exact names from their tables, and
/// patterns from their text (`node_memory_<Field>_bytes`).
struct Catalog {
    names: HashMap<String, String>,
    /// (prefix, suffix, help).
    patterns: Vec<(String, String, String)>,
}

impl Catalog {
    fn help(&self, name: &str) -> String {
        if let Some(h) = self.names.get(name) {
            return h.clone();
        }
        let pattern = self.patterns.iter().find(|(pre, suf, _)| {
            name.len() > pre.len() + suf.len() && name.starts_with(pre.as_str()) && name.ends_with(suf.as_str())
        });
        pattern.map(|p| p.2.clone()).unwrap_or_default()
    }
}

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| Catalog {
        names: DOCS.iter().flat_map(|d| parse_tables(d)).collect(),
        patterns: DOCS.iter().flat_map(|d| parse_patterns(d)).collect(),
    })
}

/// `(prefix, suffix, section)` of every name pattern in backticks in the
/// text of `doc` (`node_memory_<Field>_bytes` under "Memory — /proc/meminfo").
fn parse_patterns(doc: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ").or_else(|| line.strip_prefix("### ")) {
            section = h.replace(['`', '*'], "").trim().to_owned();
            continue;
        }
        if line.starts_with('|') {
            continue;
        }
        for token in line.split('`').skip(1).step_by(2) {
            let Some((pre, rest)) = token.split_once('<') else { continue };
            let Some((field, suf)) = rest.split_once('>') else { continue };
            let name_like = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !pre.is_empty() && name_like(pre) && name_like(field) && name_like(suf) {
                out.push((pre.to_owned(), suf.to_owned(), section.clone()));
            }
        }
    }
    out
}

/// `(name, help)` of every row of every table in `doc` whose first cell
/// names series in backticks.
fn parse_tables(doc: &str) -> Vec<(String, String)> {
    let plain = |s: &str| s.replace(['`', '*'], "").trim().to_owned();
    let cells = |l: &str| l.trim().trim_matches('|').split('|').map(str::trim).map(str::to_owned).collect::<Vec<_>>();
    let mut out = Vec::new();
    let (mut section, mut header) = (String::new(), Vec::new());
    let mut lines = doc.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(h) = line.strip_prefix("## ").or_else(|| line.strip_prefix("### ")) {
            section = plain(h);
        } else if line.starts_with('|') && lines.peek().is_some_and(|n| n.starts_with("|--") || n.starts_with("|:-")) {
            header = cells(line);
            lines.next();
        } else if line.starts_with("| `") && !header.is_empty() {
            let row = cells(line);
            let help: Vec<String> = row
                .iter()
                .zip(&header)
                .skip(1)
                .filter(|(c, _)| !c.is_empty())
                .map(|(c, h)| format!("{}: {}", plain(h), plain(c)))
                .collect();
            let help = if help.is_empty() { section.clone() } else { format!("{section}. {}", help.join("; ")) };
            // `a`, `b` or `name{labels}`: each name in backticks.
            for name in row[0].split('`').skip(1).step_by(2) {
                let name = name.split('{').next().unwrap_or(name);
                if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    out.push((name.to_owned(), help.clone()));
                }
            }
        } else if !line.starts_with('|') {
            header.clear();
        }
    }
    out
}

/// The metadata of the metric `names` stored (each name once): families
/// keyed as a scrape names them.
pub fn of_names<'a>(names: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Meta> {
    let names: BTreeSet<&str> = names.into_iter().collect();
    let catalog = catalog();
    let help = |n: &str| catalog.help(n);
    let histogram =
        |base: &str| ["_bucket", "_sum", "_count"].iter().all(|s| names.contains(format!("{base}{s}").as_str()));
    let mut out = BTreeMap::new();
    for &n in &names {
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| n.strip_suffix(s)).filter(|b| histogram(b));
        let (family, meta) = match base {
            Some(b) => {
                let h =
                    [b, &format!("{b}_bucket"), &format!("{b}_count")].iter().map(|n| help(n)).find(|h| !h.is_empty());
                (b.to_owned(), Meta { kind: "histogram", help: h.unwrap_or_default(), unit: "" })
            }
            None if n.ends_with("_total") => (n.to_owned(), Meta { kind: "counter", help: help(n), unit: "" }),
            None => {
                let h = help(n);
                // Documented and not a counter: a gauge; else unknown.
                let kind = if h.is_empty() { "unknown" } else { "gauge" };
                (n.to_owned(), Meta { kind, help: h, unit: "" })
            }
        };
        out.entry(family).or_insert(meta);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_series_have_their_help_and_types_follow_the_names() {
        let m = of_names([
            "node_cpu_seconds_total",
            "node_memory_MemAvailable_bytes",
            "kernel_syscall_seconds_bucket",
            "kernel_syscall_seconds_sum",
            "kernel_syscall_seconds_count",
            "half_bucket",
            "written_by_someone",
        ]);
        let cpu = &m["node_cpu_seconds_total"];
        assert_eq!(cpu.kind, "counter");
        assert!(cpu.help.starts_with("CPU — /proc/stat.") && cpu.help.contains("unit: s"), "{}", cpu.help);
        assert_eq!(m["node_memory_MemAvailable_bytes"].kind, "gauge");
        assert!(!m["node_memory_MemAvailable_bytes"].help.is_empty());
        assert_eq!(m["kernel_syscall_seconds"].kind, "histogram");
        assert!(m["kernel_syscall_seconds"].help.contains("calls"), "{}", m["kernel_syscall_seconds"].help);
        assert!(!m.contains_key("kernel_syscall_seconds_sum"), "a histogram is one family");
        assert_eq!(m["half_bucket"].kind, "unknown", "no _sum and _count: not a histogram");
        assert_eq!((m["written_by_someone"].kind, m["written_by_someone"].help.as_str()), ("unknown", ""));
    }

    /// Every row of the docs' tables gave a name: a table whose first
    /// column changes shape would silently lose its help.
    #[test]
    fn the_docs_tables_are_read() {
        let rows: usize = DOCS.iter().map(|d| d.lines().filter(|l| l.starts_with("| `")).count()).sum();
        assert!(catalog().names.len() >= rows, "{} names from {rows} rows", catalog().names.len());
        assert_eq!(catalog().help("node_memory_Active_anon_bytes"), "Memory — /proc/meminfo");
    }
}
