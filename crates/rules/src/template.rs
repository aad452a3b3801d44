//! The part of Prometheus's alert templates people use in labels and
//! annotations: `{{ $labels.NAME }}`, `{{ $value }}`, `{{ $externalLabels.NAME }}`
//! (none here), `{{ humanize $value }}` and `{{ printf "%.2f" $value }}`.
//! Anything else is left in the text as written, so a mistake shows.

use std::collections::BTreeMap;

/// `$value` as Prometheus prints it, and with SI prefixes (`humanize`).
fn humanize(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (v.abs() >= 1.0 && v.abs() < 1000.0) {
        return format!("{}", (v * 1e4).round() / 1e4);
    }
    let prefixes =
        [(1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in prefixes {
        if v.abs() >= scale {
            return format!("{}{p}", (v / scale * 1e4).round() / 1e4);
        }
    }
    let small =
        [(1e-3, "m"), (1e-6, "u"), (1e-9, "n"), (1e-12, "p"), (1e-15, "f"), (1e-18, "a"), (1e-21, "z"), (1e-24, "y")];
    for (scale, p) in small {
        if v.abs() >= scale {
            return format!("{}{p}", (v / scale * 1e4).round() / 1e4);
        }
    }
    format!("{v}")
}

/// Expands the template `text` for an alert with `labels` and `value`.
pub fn expand(text: &str, labels: &BTreeMap<String, String>, value: f64) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find("}}") else {
            out.push_str(&rest[open..]);
            return out;
        };
        let inner = rest[open + 2..open + close].trim().trim_start_matches('-').trim_end_matches('-').trim();
        let words: Vec<&str> = inner.split_whitespace().collect();
        let expanded = match words.as_slice() {
            ["$value"] | [".Value"] => Some(promql::value::format_float(value)),
            ["humanize", "$value"] => Some(humanize(value)),
            ["printf", fmt, "$value"] => printf(fmt.trim_matches('"'), value),
            [w] => w
                .strip_prefix("$labels.")
                .or_else(|| w.strip_prefix(".Labels."))
                .map(|name| labels.get(name).cloned().unwrap_or_default()),
            _ => None,
        };
        match expanded {
            Some(e) => out.push_str(&e),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &rest[open + close + 2..];
    }
    out.push_str(rest);
    out
}

/// `printf "%.Nf"`, `"%f"`, `"%g"`, `"%d"` of one number.
fn printf(fmt: &str, v: f64) -> Option<String> {
    let (pre, spec) = fmt.split_once('%')?;
    let (spec, post) = spec.find(['f', 'g', 'd']).map(|i| (&spec[..=i], &spec[i + 1..]))?;
    let body = match spec.strip_suffix('f') {
        Some(p) => {
            let prec = p.strip_prefix('.').and_then(|n| n.parse::<usize>().ok()).unwrap_or(6);
            format!("{v:.prec$}")
        }
        None if spec.ends_with('d') => format!("{}", v as i64),
        None => format!("{v}"),
    };
    Some(format!("{pre}{body}{post}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alert_templates_expand_as_prometheus_does() {
        let labels: BTreeMap<String, String> = [("host".to_owned(), "n1".to_owned())].into();
        assert_eq!(expand("{{ $labels.host }} at {{ $value }}", &labels, 0.75), "n1 at 0.75");
        assert_eq!(expand("{{humanize $value}}B", &labels, 1_500_000.0), "1.5MB");
        assert_eq!(expand("{{ printf \"%.1f\" $value }}%", &labels, 93.456), "93.5%");
        assert_eq!(expand("{{ $labels.missing }}|{{ .Unknown }}", &labels, 1.0), "|{{ .Unknown }}");
        assert_eq!(expand("no template", &labels, 1.0), "no template");
        assert_eq!(expand("open {{ $value", &labels, 1.0), "open {{ $value");
    }
}
