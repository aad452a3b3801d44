//! A component's report of itself: each of its figures named once, so that
//! `/metrics`, `/api/v1/status` and the series the component stores about
//! itself cannot disagree. A figure's key (`dropped_batches`) is its name in
//! the status JSON; its metric name adds the component's prefix and, for a
//! counter, `_total` (`kansoku_collector_dropped_batches_total`), which is
//! also the name of the series it is stored as.

/// Whether a figure only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A figure's value: counts as integers (so JSON shows `7`, not `7.0`),
/// measures as floats (NaN: not known yet, `null` in JSON).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

/// One figure of a report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    pub key: &'static str,
    /// One label distinguishing figures of one metric
    /// (`unmatched{reason="unknown_source"}`); its value joins the key in JSON.
    pub label: Option<(&'static str, &'static str)>,
    pub kind: Kind,
    pub value: Value,
}

impl Figure {
    pub fn counter(key: &'static str, v: u64) -> Figure {
        Figure { key, label: None, kind: Kind::Counter, value: Value::Int(v) }
    }

    /// A counter of seconds (CPU time spent, say).
    pub fn counter_seconds(key: &'static str, seconds: f64) -> Figure {
        Figure { key, label: None, kind: Kind::Counter, value: Value::Float(seconds) }
    }

    /// A gauge that counts things (series, open connections).
    pub fn gauge(key: &'static str, v: u64) -> Figure {
        Figure { key, label: None, kind: Kind::Gauge, value: Value::Int(v) }
    }

    /// A gauge that measures (seconds, ratios); NaN when unknown.
    pub fn measure(key: &'static str, v: f64) -> Figure {
        Figure { key, label: None, kind: Kind::Gauge, value: Value::Float(v) }
    }

    pub fn with_label(mut self, name: &'static str, value: &'static str) -> Figure {
        self.label = Some((name, value));
        self
    }

    /// `prefix_key`, and `_total` for a counter.
    pub fn metric(&self, prefix: &str) -> String {
        let total = if self.kind == Kind::Counter { "_total" } else { "" };
        format!("{prefix}_{}{total}", self.key)
    }

    /// The key in a JSON report: the key, and the label's value if any.
    pub fn json_key(&self) -> String {
        match self.label {
            Some((_, v)) => format!("{}_{v}", self.key),
            None => self.key.to_owned(),
        }
    }

    pub fn as_f64(&self) -> f64 {
        match self.value {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_is_named_with_total_and_a_label_joins_its_json_key() {
        let c = Figure::counter("dropped_batches", 3);
        assert_eq!(c.metric("kansoku_collector"), "kansoku_collector_dropped_batches_total");
        assert_eq!(Figure::measure("lateness_seconds", 0.5).metric("kansoku_x"), "kansoku_x_lateness_seconds");
        let l = Figure::counter("unmatched", 1).with_label("reason", "unknown_source");
        assert_eq!(
            (l.json_key(), l.metric("kansoku_snmp")),
            ("unmatched_unknown_source".into(), "kansoku_snmp_unmatched_total".into())
        );
        assert_eq!(Figure::gauge("series", 9).as_f64(), 9.0);
    }
}
