//! The text exposition formats a Prometheus scrapes — OpenMetrics 1.0 and
//! Prometheus text 0.0.4 — written from stored samples: the newest of each
//! series, typed (`/prometheus/federate`, [`render`]), and every sample of a
//! range (`kansoku export`, with [`type_line`], [`value_and_time`], [`EOF`]:
//! the same lines, one writer).
//! Families are typed from what is stored: `NAME_bucket` series with `le`
//! beside `NAME_sum` and `NAME_count` (every group with its `+Inf` bucket)
//! make a histogram family `NAME` — the kernel's latency histograms
//! (crates/trace) leave as OpenMetrics histograms; `NAME_total` a counter;
//! anything else is `unknown` (OpenMetrics) or untyped.

use std::collections::BTreeMap;

use promql::value::{Labels, format_float, get};

/// One series' newest sample: labels (with `__name__`), time (ns), value.
#[derive(Debug)]
pub struct Sample {
    pub labels: Labels,
    pub t: i64,
    pub v: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    Text004,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text004 => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Histogram,
    Counter,
    Unknown,
}

/// The samples as one exposition: families in name order, a histogram's
/// groups each as buckets by `le`, then `_count`, then `_sum`.
pub fn render(samples: &[Sample], format: Format) -> String {
    // Histogram bases whose every group has +Inf, _sum and _count.
    let name = |s: &Sample| get(&s.labels, "__name__").to_owned();
    let without = |l: &Labels, drop: &[&str]| -> Labels {
        l.iter().filter(|(k, _)| !drop.contains(&k.as_str())).cloned().collect()
    };
    let mut groups: BTreeMap<(String, Labels), [bool; 3]> = BTreeMap::new();
    for s in samples {
        let n = name(s);
        let rest = without(&s.labels, &["__name__", "le"]);
        if let Some(base) = n.strip_suffix("_bucket")
            && !get(&s.labels, "le").is_empty()
        {
            let g = groups.entry((base.to_owned(), rest)).or_default();
            g[0] |= get(&s.labels, "le") == "+Inf";
        } else if let Some(base) = n.strip_suffix("_sum") {
            groups.entry((base.to_owned(), rest)).or_default()[1] = true;
        } else if let Some(base) = n.strip_suffix("_count") {
            groups.entry((base.to_owned(), rest)).or_default()[2] = true;
        }
    }
    let mut complete: BTreeMap<&str, bool> = BTreeMap::new();
    for ((base, _), [inf, sum, count]) in &groups {
        let ok = complete.entry(base.as_str()).or_insert(true);
        *ok &= *inf && *sum && *count;
    }
    let histogram = |base: &str| complete.get(base).copied().unwrap_or(false);
    // (family, kind) -> (group labels, order within the group, le, sample).
    type Row<'a> = (Labels, u8, f64, &'a Sample);
    let mut families: BTreeMap<(String, Kind), Vec<Row<'_>>> = BTreeMap::new();
    for s in samples {
        let n = name(s);
        let rest = without(&s.labels, &["__name__", "le"]);
        let hist = [("_bucket", 0u8), ("_count", 1), ("_sum", 2)].iter().find_map(|(suffix, order)| {
            let base = n.strip_suffix(suffix)?;
            (histogram(base) && (*order != 0 || !get(&s.labels, "le").is_empty())).then(|| (base.to_owned(), *order))
        });
        let (family, kind, order) = match hist {
            Some((base, order)) => (base, Kind::Histogram, order),
            None => match n.strip_suffix("_total") {
                Some(base) if format == Format::OpenMetrics => (base.to_owned(), Kind::Counter, 0),
                _ if n.ends_with("_total") => (n.clone(), Kind::Counter, 0),
                _ => (n.clone(), Kind::Unknown, 0),
            },
        };
        let le = match get(&s.labels, "le") {
            "+Inf" => f64::INFINITY,
            l => l.parse().unwrap_or(f64::NAN),
        };
        families.entry((family, kind)).or_default().push((rest, order, le, s));
    }
    let mut out = String::new();
    for ((family, kind), mut rows) in families {
        rows.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2)));
        let ty = match (kind, format) {
            (Kind::Histogram, _) => "histogram",
            (Kind::Counter, _) => "counter",
            (Kind::Unknown, Format::OpenMetrics) => "unknown",
            (Kind::Unknown, Format::Text004) => "untyped",
        };
        type_line(&mut out, &family, ty);
        for (_, _, _, s) in rows {
            line(&mut out, s, format);
        }
    }
    if format == Format::OpenMetrics {
        out.push_str(EOF);
        out.push('\n');
    }
    out
}

/// The line that ends an OpenMetrics exposition.
pub const EOF: &str = "# EOF";

/// How finely an OpenMetrics sample's time is written (seconds with 3 or 9
/// decimals): Prometheus keeps milliseconds; an export keeps what is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Millis,
    Nanos,
}

/// `# TYPE family kind`.
pub fn type_line(out: &mut String, family: &str, kind: &str) {
    out.push_str("# TYPE ");
    out.push_str(family);
    out.push(' ');
    out.push_str(kind);
    out.push('\n');
}

/// ` VALUE TIME` of an OpenMetrics sample line, `t` in ns.
pub fn value_and_time(out: &mut String, v: f64, t: i64, precision: Precision) {
    let (secs, ns) = (t.div_euclid(1_000_000_000), t.rem_euclid(1_000_000_000));
    let v = format_float(v);
    match precision {
        Precision::Millis => out.push_str(&format!(" {v} {secs}.{:03}", ns / 1_000_000)),
        Precision::Nanos => out.push_str(&format!(" {v} {secs}.{ns:09}")),
    }
}

fn line(out: &mut String, s: &Sample, format: Format) {
    out.push_str(get(&s.labels, "__name__"));
    let labels: Vec<String> = s
        .labels
        .iter()
        .filter(|(k, _)| k != "__name__")
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")))
        .collect();
    if !labels.is_empty() {
        out.push('{');
        out.push_str(&labels.join(","));
        out.push('}');
    }
    match format {
        Format::OpenMetrics => value_and_time(out, s.v, s.t, Precision::Millis),
        Format::Text004 => out.push_str(&format!(" {} {}", format_float(s.v), s.t.div_euclid(1_000_000))),
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(labels: &[(&str, &str)], v: f64) -> Sample {
        let mut l: Labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        l.sort();
        Sample { labels: l, t: 1_700_000_000_250_000_000, v }
    }

    #[test]
    fn histograms_counters_and_the_rest() {
        let samples = [
            s(&[("__name__", "lat_seconds_sum"), ("host", "a")], 0.5),
            s(&[("__name__", "lat_seconds_bucket"), ("host", "a"), ("le", "+Inf")], 3.0),
            s(&[("__name__", "lat_seconds_bucket"), ("host", "a"), ("le", "0.01")], 1.0),
            s(&[("__name__", "lat_seconds_bucket"), ("host", "a"), ("le", "0.1")], 2.0),
            s(&[("__name__", "lat_seconds_count"), ("host", "a")], 3.0),
            s(&[("__name__", "reqs_total"), ("path", "a\"b")], 7.0),
            s(&[("__name__", "temp")], f64::NAN),
            // No +Inf bucket: not a histogram; each its own family.
            s(&[("__name__", "half_bucket"), ("le", "1")], 1.0),
            s(&[("__name__", "half_count")], 1.0),
            s(&[("__name__", "half_sum")], 1.0),
        ];
        let om = render(&samples, Format::OpenMetrics);
        assert_eq!(
            om,
            "# TYPE half_bucket unknown\nhalf_bucket{le=\"1\"} 1 1700000000.250\n\
             # TYPE half_count unknown\nhalf_count 1 1700000000.250\n\
             # TYPE half_sum unknown\nhalf_sum 1 1700000000.250\n\
             # TYPE lat_seconds histogram\n\
             lat_seconds_bucket{host=\"a\",le=\"0.01\"} 1 1700000000.250\n\
             lat_seconds_bucket{host=\"a\",le=\"0.1\"} 2 1700000000.250\n\
             lat_seconds_bucket{host=\"a\",le=\"+Inf\"} 3 1700000000.250\n\
             lat_seconds_count{host=\"a\"} 3 1700000000.250\n\
             lat_seconds_sum{host=\"a\"} 0.5 1700000000.250\n\
             # TYPE reqs counter\nreqs_total{path=\"a\\\"b\"} 7 1700000000.250\n\
             # TYPE temp unknown\ntemp NaN 1700000000.250\n# EOF\n"
        );
        let text = render(&samples, Format::Text004);
        assert!(text.contains("# TYPE reqs_total counter\nreqs_total{path=\"a\\\"b\"} 7 1700000000250\n"), "{text}");
        assert!(text.contains("# TYPE temp untyped\n"), "{text}");
        assert!(!text.contains("# EOF"));
    }
}
