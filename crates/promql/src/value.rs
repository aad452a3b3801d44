//! What an expression evaluates to, over every step of a query at once: a
//! scalar per step, a vector (series, each with a value or nothing per step),
//! or a string; and a series' labels (`__name__` among them), kept sorted.

/// A series' labels, sorted by name, `__name__` included.
pub type Labels = Vec<(String, String)>;

pub const NAME: &str = "__name__";

/// A series over the steps: `points[i]` is its value at step `i`, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<Option<f64>>,
}

/// The value of an expression at every step.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(Vec<f64>),
    Vector(Vec<Series>),
    String(String),
    /// A range vector, the result of an instant query of one (`up[5m]`):
    /// each series' samples in the window, at their own times (ns).
    Matrix(Vec<(Labels, Vec<(i64, f64)>)>),
}

impl Value {
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Scalar(_) => "scalar",
            Value::Vector(_) => "vector",
            Value::String(_) => "string",
            Value::Matrix(_) => "range vector",
        }
    }
}

/// The value of `name` in `labels`, `""` when absent (as a matcher sees it).
pub fn get<'a>(labels: &'a Labels, name: &str) -> &'a str {
    labels.binary_search_by(|(k, _)| k.as_str().cmp(name)).map_or("", |i| labels[i].1.as_str())
}

/// Sets `name` to `value`, or removes it when `value` is empty.
pub fn set(labels: &mut Labels, name: &str, value: &str) {
    match labels.binary_search_by(|(k, _)| k.as_str().cmp(name)) {
        Ok(i) if value.is_empty() => {
            labels.remove(i);
        }
        Ok(i) => labels[i].1 = value.to_owned(),
        Err(_) if value.is_empty() => {}
        Err(i) => labels.insert(i, (name.to_owned(), value.to_owned())),
    }
}

pub fn drop_name(labels: &mut Labels) {
    labels.retain(|(k, _)| k != NAME);
}

/// The labels of a stored series, `__name__` among them.
pub fn of_key(key: &model::SeriesKey) -> Labels {
    let mut l: Labels = key.labels().to_vec();
    set(&mut l, NAME, key.name());
    l
}

/// A float as Prometheus prints it (Go's `FormatFloat(v, 'f', -1, 64)`):
/// the shortest decimal that reads back the same, without an exponent.
pub fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_sorted_and_floats_print_as_go_does() {
        let mut l: Labels = vec![("a".into(), "1".into())];
        set(&mut l, NAME, "m");
        set(&mut l, "b", "2");
        assert_eq!(l.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(), ["__name__", "a", "b"]);
        assert_eq!((get(&l, "b"), get(&l, "zz")), ("2", ""));
        set(&mut l, "a", "");
        assert_eq!(l.len(), 2);
        assert_eq!(format_float(1e-7), "0.0000001");
        assert_eq!(format_float(5.0), "5");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(1e21), "1000000000000000000000");
    }
}
