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

/// A time in ns as seconds, the float nearest the decimal (`…354.11`, not
/// the `…354.1100001` that `ns as f64 / 1e9` rounds twice into): what
/// Prometheus's `float64(ms) / 1000` gives for whole milliseconds.
pub fn seconds(ns: i64) -> f64 {
    const MS: i64 = 1_000_000;
    if ns % MS == 0 && (ns / MS).unsigned_abs() < 1 << 53 {
        // Both exact: one correctly rounded division.
        (ns / MS) as f64 / 1e3
    } else {
        let a = ns.unsigned_abs();
        let sign = if ns < 0 { "-" } else { "" };
        format!("{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000).parse().unwrap_or(ns as f64 / 1e9)
    }
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

/// A float as Go's `strconv.FormatFloat(v, 'e', -1, 64)` prints it:
/// `1e+300`, `8.5e-01`, `5e-324` (the exponent signed, two digits at least).
pub fn go_exponent(v: f64) -> String {
    if !v.is_finite() {
        return format_float(v);
    }
    let s = format!("{v:e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// A sample's value in Prometheus's JSON (vectors and matrices:
/// `jsonutil.MarshalValue`): plain decimals, but an exponent below 1e-6 and
/// from 1e21 (`1e+300`, not 301 digits). Scalars are written by
/// [`format_float`], without an exponent, as Prometheus writes them.
pub fn format_sample(v: f64) -> String {
    let a = v.abs();
    if a.is_finite() && a != 0.0 && !(1e-6..1e21).contains(&a) { go_exponent(v) } else { format_float(v) }
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

    #[test]
    fn samples_print_as_prometheus_json_does() {
        assert_eq!(format_sample(1e300), "1e+300");
        assert_eq!(format_sample(5e-324), "5e-324");
        assert_eq!(format_sample(-1.5e-7), "-1.5e-07");
        assert_eq!(format_sample(1e-6), "0.000001");
        assert_eq!(format_sample(1e21), "1e+21");
        assert_eq!(format_sample(123456.75), "123456.75");
        assert_eq!(format_sample(0.0), "0");
        assert_eq!(format_sample(-0.0), "-0");
        assert_eq!(format_sample(f64::NAN), "NaN");
        assert_eq!(go_exponent(0.85), "8.5e-01");
    }

    #[test]
    fn seconds_are_the_float_nearest_the_decimal() {
        assert_eq!(seconds(1_795_752_354_110_000_000), 1795752354.11);
        assert_ne!(1_795_752_354_110_000_000i64 as f64 / 1e9, 1795752354.11, "the test needs a twice-rounded case");
        assert_eq!(seconds(-1_500_000), -0.0015);
        assert_eq!(seconds(1_795_752_354_110_000_123), "1795752354.110000123".parse::<f64>().unwrap());
        assert_eq!(seconds(-1), -0.000000001);
    }
}
