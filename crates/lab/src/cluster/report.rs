//! `kansoku lab report RESULT.json... --out report.html`: the results of
//! `lab transfer --cores` (the replay) and `lab interference` as one HTML
//! page with plots (inline SVG: no script, no network, opens anywhere),
//! each beside the paper's figures (`seeds/000_8748c71b7784e574.txt`); and
//! results of `lab run` (any experiment file): each metric's medians per
//! point with bootstrap intervals, the environment, every run.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Result files written by `lab transfer --cores ... --out` and `lab
    /// interference --out`.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The HTML page to write.
    #[arg(long, default_value = "kansoku-lab-report.html")]
    out: PathBuf,
}

/// The paper's parallel transfer: cores -> ms until every core-second was
/// stored (its figure of 1, 8, 14 and 28 cores).
const PAPER_TRANSFER_MS: [(f64, f64); 4] = [(1.0, 170.0), (8.0, 240.0), (14.0, 310.0), (28.0, 510.0)];
/// The paper's benchmark degradation beside its sampling, per cent.
const PAPER_DEGRADATION: f64 = 7.5;

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    for path in &args.inputs {
        let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let doc: Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        docs.push((path.display().to_string(), doc));
    }
    let html = render(&docs)?;
    std::fs::write(&args.out, html).with_context(|| format!("write {}", args.out.display()))?;
    crate::out::result!("kansoku lab report: wrote {}", args.out.display());
    Ok(())
}

/// The page for result documents (name, JSON); a document of no known
/// experiment is an error naming it.
pub fn render(docs: &[(String, Value)]) -> anyhow::Result<String> {
    let mut body = String::new();
    for (name, doc) in docs {
        let section = if doc.get("replay").is_some() {
            replay(doc)
        } else if doc.get("results").is_some() && doc.get("idle_transfer_ms").is_some() {
            interference(doc)
        } else if doc.get("summary").is_some() && doc.get("environment").is_some() {
            experiment(doc)
        } else if doc["experiment"] == "latency" && doc.get("curve").is_some() {
            latency(doc)
        } else if doc["experiment"] == "limits" {
            limits(doc)
        } else {
            anyhow::bail!("{name}: not the output of `lab transfer --cores`, `lab interference` or `lab run`");
        };
        let (cores, cpu, kernel) = match doc.get("machine") {
            Some(m) => (m["cores"].to_string(), &m["cpu"], &m["kernel"]),
            None => {
                let env = &doc["environment"];
                (env["cpu.cores"].as_str().unwrap_or("?").to_owned(), &env["cpu.model"], &env["kernel.release"])
            }
        };
        let _ = write!(
            body,
            "<section>{section}<p class=src>From <code>{}</code>; machine: {cores} × {}, kernel {}.</p></section>",
            esc(name),
            esc(cpu.as_str().unwrap_or("?")),
            esc(kernel.as_str().unwrap_or("?")),
        );
    }
    Ok(format!(
        "<!doctype html><html lang=en><meta charset=utf-8><title>kansoku lab report</title><style>{STYLE}</style>\
         <h1>kansoku lab report</h1>{body}</html>\n"
    ))
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}\
h2{margin-top:2em}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
th{background:#f4f4f4}.src{color:#666;font-size:12px}svg{display:block;margin:1em 0}svg text{font:11px sans-serif}";

const COLOURS: [&str; 6] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

/// A named line of (x, y) points; dashed: a reference.
type Series = (String, Vec<(f64, f64)>, bool);

/// A line per series over a log2 x axis (cores), y from 0.
struct Lines<'a> {
    title: &'a str,
    y_label: &'a str,
    series: Vec<Series>,
}

impl Lines<'_> {
    fn svg(&self) -> String {
        let (w, h, l, r, t, b) = (760.0, 320.0, 60.0, 210.0, 30.0, 40.0);
        let pts = self.series.iter().flat_map(|s| s.1.iter()).filter(|p| p.1.is_finite());
        let (x_max, y_max) = pts.fold((1.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
        let y_max = nice(y_max);
        let x_of = |x: f64| l + (x.max(1.0).log2() / x_max.log2().max(1.0)) * (w - l - r);
        let y_of = |y: f64| h - b - y / y_max * (h - t - b);
        let mut s =
            format!("<svg width={w} height={h} viewBox='0 0 {w} {h}' role=img aria-label='{}'>", esc(self.title));
        let _ = write!(s, "<text x={l} y=18 font-weight=bold>{}</text>", esc(self.title));
        for i in 0..=4 {
            let y = y_max * f64::from(i) / 4.0;
            let _ = write!(
                s,
                "<line x1={l} x2={} y1={y1:.1} y2={y1:.1} stroke=#eee /><text x={} y={:.1} text-anchor=end>{}</text>",
                w - r,
                l - 4.0,
                y_of(y) + 4.0,
                fmt(y),
                y1 = y_of(y)
            );
        }
        let mut xs: Vec<f64> = self.series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        for x in xs {
            let _ = write!(s, "<text x={:.1} y={} text-anchor=middle>{x}</text>", x_of(x), h - b + 14.0);
        }
        let _ = write!(s, "<text x={:.1} y={} text-anchor=middle>cores</text>", (l + w - r) / 2.0, h - 6.0);
        let _ = write!(
            s,
            "<text transform='translate(14 {:.1}) rotate(-90)' text-anchor=middle>{}</text>",
            h / 2.0,
            esc(self.y_label)
        );
        for (i, (name, points, dashed)) in self.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = points
                .iter()
                .filter(|p| p.1.is_finite())
                .map(|p| format!("{:.1},{:.1}", x_of(p.0), y_of(p.1)))
                .collect();
            let dash = if *dashed { " stroke-dasharray='5 4'" } else { "" };
            let _ = write!(
                s,
                "<polyline class=series fill=none stroke='{c}' stroke-width=2{dash} points='{}' />",
                path.join(" ")
            );
            for p in points.iter().filter(|p| p.1.is_finite()) {
                let _ = write!(
                    s,
                    "<circle cx={:.1} cy={:.1} r=3 fill='{c}'><title>{}: {} cores, {}</title></circle>",
                    x_of(p.0),
                    y_of(p.1),
                    esc(name),
                    p.0,
                    fmt(p.1)
                );
            }
            let ly = t + 16.0 * i as f64;
            let _ = write!(
                s,
                "<line x1={} x2={} y1={ly} y2={ly} stroke='{c}' stroke-width=2{dash} /><text x={} y={}>{}</text>",
                w - r + 10.0,
                w - r + 30.0,
                w - r + 34.0,
                ly + 4.0,
                esc(name)
            );
        }
        s.push_str("</svg>");
        s
    }
}

/// A bar: its label, its value and, if known, an interval drawn as a whisker.
type Bar = (String, f64, Option<(f64, f64)>);

/// Horizontal bars, one group per label, a bar per value (with its
/// interval as a whisker), with an optional reference line.
fn bars(title: &str, unit: &str, groups: &[(String, Vec<Bar>)], reference: Option<(f64, &str)>) -> String {
    bars_on(title, unit, groups, reference, false)
}

/// [`bars`] on a log scale, with its powers of ten marked: for values
/// spanning decades (throughput by read size, 512 B to 1 MiB), where a
/// linear scale leaves the small ones invisible.
fn log_bars(title: &str, unit: &str, groups: &[(String, Vec<Bar>)]) -> String {
    bars_on(title, unit, groups, None, true)
}

fn bars_on(
    title: &str,
    unit: &str,
    groups: &[(String, Vec<Bar>)],
    reference: Option<(f64, &str)>,
    log: bool,
) -> String {
    let (w, l, r, row) = (720.0, 250.0, 80.0, 16.0);
    let n: usize = groups.iter().map(|g| g.1.len() + 1).sum();
    // Room under the bars for the value axis's labels.
    let h = 54.0 + row * n as f64;
    let vals = groups
        .iter()
        .flat_map(|g| g.1.iter().flat_map(|v| [v.1, v.2.map_or(v.1, |c| c.0), v.2.map_or(v.1, |c| c.1)]))
        .chain(reference.map(|r| r.0));
    let positive = vals.clone().filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = if log {
        let (a, b) = positive.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        if a.is_finite() {
            (10f64.powf(a.log10().floor()), 10f64.powf(b.log10().ceil()).max(10f64.powf(a.log10().floor() + 1.0)))
        } else {
            (1.0, 10.0)
        }
    } else {
        (
            vals.clone().filter(|v| v.is_finite()).fold(0.0f64, f64::min),
            nice(vals.filter(|v| v.is_finite()).fold(0.0f64, f64::max)),
        )
    };
    let span = (hi - lo).max(1e-9);
    let x_of = |v: f64| {
        if log {
            l + (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * (w - l - r)
        } else {
            l + (v - lo) / span * (w - l - r)
        }
    };
    let mut s = format!("<svg width={w} height={h} viewBox='0 0 {w} {h}' role=img aria-label='{}'>", esc(title));
    let _ = write!(s, "<text x=4 y=16 font-weight=bold>{}{}</text>", esc(title), if log { " (log scale)" } else { "" });
    if log {
        let mut e = lo.log10().round() as i32;
        while f64::from(e) <= hi.log10() + 1e-9 {
            let x = x_of(10f64.powi(e));
            let _ = write!(
                s,
                "<line x1={x:.1} x2={x:.1} y1=24 y2={:.1} stroke=#eee /><text class=tick x={x:.1} y={:.1} text-anchor=middle>{}</text>",
                h - 14.0,
                h - 3.0,
                fmt(10f64.powi(e))
            );
            e += 1;
        }
    } else {
        // A value axis: four steps of a round size from the axis's start
        // (issue 44: the bars had none, only each bar's own figure).
        let step = tick_step(span / 4.0);
        let mut k = (lo / step).ceil();
        while k * step <= hi + step * 1e-9 {
            let (v, x) = (k * step, x_of(k * step));
            let _ = write!(
                s,
                "<line x1={x:.1} x2={x:.1} y1=24 y2={:.1} stroke=#eee /><text class=tick x={x:.1} y={:.1} text-anchor=middle>{}{}</text>",
                h - 14.0,
                h - 3.0,
                fmt(v),
                if k == 0.0 { String::new() } else { esc(unit) }
            );
            k += 1.0;
        }
    }
    let mut y = 30.0;
    for (group, values) in groups {
        let _ = write!(s, "<text x=4 y={:.1} font-weight=bold>{}</text>", y + 11.0, esc(group));
        y += row;
        for (i, (label, v, ci)) in values.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let (a, b) = (x_of(0.0_f64.max(lo)), x_of(if v.is_finite() { *v } else { lo.max(0.0) }));
            let _ = write!(
                s,
                "<text x={} y={:.1} text-anchor=end>{}</text><rect class=bar x={:.1} y={:.1} width={:.1} height={} fill='{c}'><title>{}: {}{}</title></rect><text x={:.1} y={:.1}>{}{}</text>",
                l - 6.0,
                y + 11.0,
                esc(label),
                a.min(b),
                y + 2.0,
                (b - a).abs().max(0.5),
                row - 4.0,
                esc(label),
                fmt(*v),
                esc(unit),
                // After the whisker, if any.
                ci.filter(|c| c.1.is_finite()).map_or(a.max(b), |c| a.max(b).max(x_of(c.1))) + 4.0,
                y + 11.0,
                fmt(*v),
                esc(unit)
            );
            if let Some((lo, hi)) = ci.filter(|c| c.0.is_finite() && c.1.is_finite()) {
                let (x0, x1, ym) = (x_of(lo), x_of(hi), y + row / 2.0);
                let _ = write!(
                    s,
                    "<path class=ci d='M{x0:.1} {:.1}V{:.1}M{x0:.1} {ym:.1}H{x1:.1}M{x1:.1} {:.1}V{:.1}' stroke=#222 fill=none><title>{} – {}</title></path>",
                    ym - 4.0,
                    ym + 4.0,
                    ym - 4.0,
                    ym + 4.0,
                    fmt(lo),
                    fmt(hi)
                );
            }
            y += row;
        }
    }
    if let Some((v, label)) = reference {
        let x = x_of(v);
        let _ = write!(
            s,
            "<line x1={x:.1} x2={x:.1} y1=24 y2={:.1} stroke=#555 stroke-dasharray='4 3' /><text x={:.1} y={:.1} fill=#555>{}</text>",
            h - 4.0,
            x + 3.0,
            h - 6.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// One step of a latency curve: the injected latency, the measured PD (%)
/// with its interval, and the model's PD.
struct CurvePoint {
    x_ns: f64,
    pd: f64,
    interval: Option<(f64, f64)>,
    model: Option<f64>,
}

/// A duration in ns with a readable unit: "500 ns", "2 µs", "1.5 ms".
fn dur_ns(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{} s", fmt(v / 1e9)),
        a if a >= 1e6 => format!("{} ms", fmt(v / 1e6)),
        a if a >= 1e3 => format!("{} µs", fmt(v / 1e3)),
        _ => format!("{} ns", fmt(v)),
    }
}

/// Seed 003's degradation curve: PD (%) against the added latency on a log
/// x axis with units (0 at the left edge), the measured points with their
/// intervals, the model's curve dashed, the knee and the budget marked.
fn degradation(points: &[CurvePoint], knee: Option<f64>, budget: Option<f64>) -> String {
    let (w, h, l, r, t, b) = (760.0, 340.0, 60.0, 150.0, 30.0, 46.0);
    let positive = points.iter().map(|p| p.x_ns).filter(|&x| x > 0.0);
    let (x_min, x_max) = positive.fold((f64::INFINITY, 0.0f64), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if x_min.is_finite() { ((x_min / 2.0).log10(), x_max.max(x_min * 2.0).log10()) } else { (0.0, 1.0) };
    // x = 0 sits at the left edge, the positive steps on a log scale beyond it.
    let zero_w = 30.0;
    let x_of = |x: f64| if x <= 0.0 { l } else { l + zero_w + (x.log10() - lo) / (hi - lo) * (w - l - r - zero_w) };
    let ys =
        points.iter().flat_map(|p| [p.pd, p.interval.map_or(p.pd, |c| c.1), p.model.unwrap_or(p.pd)]).chain(budget);
    let y_max = nice(ys.clone().filter(|v| v.is_finite()).fold(1.0f64, f64::max));
    let y_min = ys.filter(|v| v.is_finite()).fold(0.0f64, f64::min).min(0.0);
    let y_of = |y: f64| h - b - (y - y_min) / (y_max - y_min) * (h - t - b);
    let mut s =
        format!("<svg class=curve width={w} height={h} viewBox='0 0 {w} {h}' role=img aria-label='degradation curve'>");
    let _ = write!(s, "<text x={l} y=18 font-weight=bold>Degradation PD (%) against the added latency</text>");
    for i in 0..=4 {
        let y = y_min + (y_max - y_min) * f64::from(i) / 4.0;
        let _ = write!(
            s,
            "<line x1={l} x2={} y1={y1:.1} y2={y1:.1} stroke=#eee /><text class=tick x={} y={:.1} text-anchor=end>{} %</text>",
            w - r,
            l - 4.0,
            y_of(y) + 4.0,
            fmt(y),
            y1 = y_of(y)
        );
    }
    // Ticks at the powers of ten in range, and 0.
    let _ = write!(s, "<text class=tick x={l} y={} text-anchor=middle>0</text>", h - b + 14.0);
    let mut e = lo.ceil() as i32;
    while f64::from(e) <= hi {
        let x = 10f64.powi(e);
        let _ = write!(
            s,
            "<line x1={px:.1} x2={px:.1} y1={t} y2={} stroke=#eee /><text class=tick x={px:.1} y={} text-anchor=middle>{}</text>",
            h - b,
            h - b + 14.0,
            dur_ns(x),
            px = x_of(x)
        );
        e += 1;
    }
    let _ =
        write!(s, "<text x={:.1} y={} text-anchor=middle>added latency (log scale)</text>", (l + w - r) / 2.0, h - 8.0);
    let _ = write!(s, "<text transform='translate(14 {:.1}) rotate(-90)' text-anchor=middle>PD, %</text>", h / 2.0);
    if let Some(bud) = budget {
        let y = y_of(bud);
        let _ = write!(
            s,
            "<line class=budget x1={l} x2={} y1={y:.1} y2={y:.1} stroke=#555 stroke-dasharray='4 3' /><text x={} y={:.1} fill=#555>budget {} %</text>",
            w - r,
            w - r + 4.0,
            y + 4.0,
            fmt(bud)
        );
    }
    if let Some(k) = knee.filter(|k| *k > 0.0) {
        let x = x_of(k);
        let _ = write!(
            s,
            "<line class=knee x1={x:.1} x2={x:.1} y1={t} y2={} stroke=#e15759 stroke-dasharray='2 3' /><text x={:.1} y={} fill=#e15759>knee {}</text>",
            h - b,
            x + 3.0,
            t + 10.0,
            dur_ns(k)
        );
    }
    let line = |pick: &dyn Fn(&CurvePoint) -> Option<f64>| -> String {
        points
            .iter()
            .filter_map(|p| pick(p).filter(|v| v.is_finite()).map(|v| format!("{:.1},{:.1}", x_of(p.x_ns), y_of(v))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = write!(
        s,
        "<polyline class=model fill=none stroke='{}' stroke-width=2 stroke-dasharray='6 4' points='{}' />",
        COLOURS[1],
        line(&|p| p.model)
    );
    let _ = write!(
        s,
        "<polyline class=measured fill=none stroke='{}' stroke-width=2 points='{}' />",
        COLOURS[0],
        line(&|p| Some(p.pd))
    );
    for p in points.iter().filter(|p| p.pd.is_finite()) {
        let (x, y) = (x_of(p.x_ns), y_of(p.pd));
        if let Some((a, c)) = p.interval.filter(|c| c.0.is_finite() && c.1.is_finite()) {
            let _ = write!(
                s,
                "<path class=ci d='M{x:.1} {:.1}V{:.1}M{:.1} {:.1}H{:.1}M{:.1} {:.1}H{:.1}' stroke=#222 fill=none />",
                y_of(a),
                y_of(c),
                x - 3.0,
                y_of(a),
                x + 3.0,
                x - 3.0,
                y_of(c),
                x + 3.0
            );
        }
        let _ = write!(
            s,
            "<circle class=point cx={x:.1} cy={y:.1} r=3.5 fill='{}'><title>{}: PD {} %{}</title></circle>",
            COLOURS[0],
            dur_ns(p.x_ns),
            fmt(p.pd),
            p.model.map_or(String::new(), |m| format!(", model {} %", fmt(m)))
        );
    }
    for (i, (name, dash)) in [("measured", ""), ("model", " stroke-dasharray='6 4'")].iter().enumerate() {
        let ly = t + 16.0 * i as f64;
        let _ = write!(
            s,
            "<line x1={} x2={} y1={ly} y2={ly} stroke='{}' stroke-width=2{dash} /><text x={} y={}>{name}</text>",
            w - r + 10.0,
            w - r + 30.0,
            COLOURS[i],
            w - r + 34.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>");
    s
}

/// A metric's name as a person reads it, and its unit from the suffix:
/// `max_us` is "max" in " µs", `requests_per_second` "requests" in "/s".
fn metric_title(m: &str) -> (String, String) {
    const UNITS: [(&str, &str); 9] = [
        ("_ns", " ns"),
        ("_us", " µs"),
        ("_ms", " ms"),
        ("_seconds", " s"),
        ("_s", " s"),
        ("_bytes", " B"),
        ("_per_second", "/s"),
        ("_per_s", "/s"),
        ("_percent", " %"),
    ];
    let (base, unit) =
        UNITS.iter().find_map(|(suffix, unit)| m.strip_suffix(suffix).map(|b| (b, *unit))).unwrap_or((m, ""));
    let title = base.replace('_', " ");
    (if unit.is_empty() { title } else { format!("{title} ({})", unit.trim_start()) }, unit.to_owned())
}

/// A round number at or above `v` for an axis's end.
fn nice(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 7.5, 10.0].iter().map(|m| m * p).find(|&c| c >= v).unwrap_or(10.0 * p)
}

/// A round step (1, 2, 2.5 or 5 times a power of ten) at or above `v`.
fn tick_step(v: f64) -> f64 {
    if v.is_nan() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * p).find(|&c| c >= v).unwrap_or(10.0 * p)
}

fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn replay(doc: &Value) -> String {
    let rows = doc["replay"].as_array().cloned().unwrap_or_default();
    let mut modes: Vec<String> = Vec::new();
    for r in &rows {
        let m = r["mode"].as_str().unwrap_or("?").to_owned();
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    let of = |m: &str, k: &str| -> Vec<(f64, f64)> {
        rows.iter().filter(|r| r["mode"] == m).map(|r| (num(r, "cores"), num(r, k))).collect()
    };
    let mut durable =
        Lines { title: "Time until all n core-seconds are durable (mean)", y_label: "ms", series: Vec::new() };
    for m in &modes {
        // Staggered sends are spread over the second by design: each core's
        // own time to durable is its figure.
        let (name, key) = if m == "staggered" {
            (format!("{m} (each core's own)"), "per_sender_ms_mean")
        } else {
            (m.clone(), "all_durable_ms_mean")
        };
        durable.series.push((name, of(m, key), false));
    }
    durable.series.push(("paper (parallel)".into(), PAPER_TRANSFER_MS.to_vec(), true));
    let mut cpu = Lines { title: "CPU per sample, sender + server", y_label: "µs/sample", series: Vec::new() };
    for m in &modes {
        cpu.series.push((m.clone(), of(m, "end_to_end_cpu_us_per_sample"), false));
    }
    let mut table = String::from(
        "<table><tr><th>mode<th>cores<th>all durable, ms mean<th>max<th>sender µs/sample<th>server µs/sample<th>wire B/sample",
    );
    for r in &rows {
        let _ = write!(
            table,
            "<tr><td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}",
            esc(r["mode"].as_str().unwrap_or("?")),
            r["cores"],
            fmt(num(r, "all_durable_ms_mean")),
            fmt(num(r, "all_durable_ms_max")),
            fmt(num(r, "sender_cpu_us_per_sample")),
            fmt(num(r, "server_cpu_us_per_sample")),
            fmt(num(r, "wire_bytes_per_sample")),
        );
    }
    table.push_str("</table>");
    format!(
        "<h2>Transfer: n core-seconds of 10 kHz samples to the server</h2><p>One core-second of <code>{}</code>, \
         replicated to n cores and sent once a second; targets: 28 core-seconds durable in ≤ 30 ms, ≤ 0.1 µs CPU \
         and ≤ 4 B on the wire per sample.</p>{}{}{table}",
        esc(doc["recording"].as_str().unwrap_or("?")),
        durable.svg(),
        cpu.svg()
    )
}

fn interference(doc: &Value) -> String {
    let mut out = format!(
        "<h2>Interference: CPU benchmarks beside sampling</h2><p>Medians of {} interleaved repetitions; degradation \
         against the benchmark alone. The transfer alone (idle machine): {} ms.</p>",
        doc["repeat"],
        fmt(num(doc, "idle_transfer_ms"))
    );
    let mut groups = Vec::new();
    let mut table = String::from("<table><tr><th>benchmark<th>configuration<th>median score<th>degradation %<th>notes");
    for w in doc["results"].as_array().into_iter().flatten() {
        let name = w["workload"].as_str().unwrap_or("?").to_owned();
        let mut values = Vec::new();
        for r in w["rows"].as_array().into_iter().flatten() {
            let cfg = r["config"].as_str().unwrap_or("?");
            let mut notes = String::new();
            if let Some(a) = r["agent_cpu_share"].as_f64() {
                let _ = write!(notes, "agent {:.2} % of a core", a * 100.0);
            }
            if let Some(s) = r["transfer_stretch"].as_f64() {
                let _ = write!(notes, "transfer stretched {s:.2}×");
            }
            let _ = write!(
                table,
                "<tr><td>{}<td>{}<td>{}<td>{}<td>{}",
                esc(&name),
                esc(cfg),
                fmt(num(r, "median_score")),
                fmt(num(r, "degradation_percent")),
                esc(&notes)
            );
            if cfg != "none" {
                values.push((cfg.to_owned(), num(r, "degradation_percent"), None));
            }
        }
        groups.push((name, values));
    }
    table.push_str("</table>");
    out.push_str(&bars(
        "Benchmark degradation, % (lower is better)",
        " %",
        &groups,
        Some((PAPER_DEGRADATION, "paper: 7–8 %")),
    ));
    out.push_str(&table);
    out
}

/// A result of `lab latency`: the degradation curve as bars with their
/// intervals (and the model's beside them), the knee, the tier budget and
/// the injector's calibration.
fn latency(doc: &Value) -> String {
    let budget = &doc["budget"];
    let mut out = format!(
        "<h2>Latency sensitivity (seed 003)</h2><p>Throughput ({}) at each injected latency; PD = (P[0] − P[x]) / P[0] \
         with 95 % bootstrap intervals. Knee (kneedle): {}. Tier budget: {}{} hops of {} ns within {} %.</p>",
        esc(doc["metric"].as_str().unwrap_or("?")),
        doc["knee_ns"].as_f64().map_or("none".into(), |k| {
            let ci = doc["knee_interval_ns"].as_array().map_or(String::new(), |v| {
                format!(
                    " (interval {} – {} ns)",
                    fmt(v[0].as_f64().unwrap_or(f64::NAN)),
                    fmt(v[1].as_f64().unwrap_or(f64::NAN))
                )
            });
            format!("{} ns{ci}", fmt(k))
        }),
        if budget["at_least"] == true { "at least " } else { "" },
        budget["tiers"],
        fmt(num(budget, "hop_ns")),
        fmt(num(budget, "percent")),
    );
    let pair = |v: &Value| v.as_array().map(|a| (a[0].as_f64().unwrap_or(f64::NAN), a[1].as_f64().unwrap_or(f64::NAN)));
    let points: Vec<CurvePoint> = doc["curve"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| CurvePoint {
            x_ns: num(p, "x_ns"),
            pd: num(p, "pd"),
            interval: pair(&p["pd_interval"]),
            model: p["model_pd"].as_f64(),
        })
        .collect();
    out.push_str(&degradation(&points, doc["knee_ns"].as_f64(), budget["percent"].as_f64()));
    // The shape beside the paper's: knee, PD at it and at 1.4 times it.
    let paper = &doc["paper"];
    if paper.is_object() {
        let here = &paper["here"];
        let pct = |v: &Value| v.as_f64().map_or("–".into(), |v| format!("{} %", fmt(v)));
        let _ = write!(
            out,
            "<table><tr><th>beside the paper<th>knee<th>PD at the knee<th>PD at {f} × the knee\
             <tr><td>seed 003: OLTP (TPC-C-like), PCIe switch hops<td>{} ns<td>under {}<td>~{}\
             <tr><td>this run: {}<td>{}<td>{}<td>{}</table>",
            fmt(num(paper, "knee_ns")),
            pct(&paper["pd_at_knee_below"]),
            pct(&paper["pd_past_knee"]),
            esc(doc["metric"].as_str().unwrap_or("?")),
            here["knee_ns"].as_f64().map_or("none".into(), |k| format!("{} ns", fmt(k))),
            pct(&here["pd_at_knee"]),
            pct(&here["pd_past_knee"]),
            f = fmt(num(paper, "past_knee_factor")),
        );
    }
    let mut table = String::from("<table><tr><th>requested ns<th>set ns<th>added p50 ns<th>added p99 ns<th>honoured");
    for c in doc["calibration"].as_array().into_iter().flatten() {
        let _ = write!(
            table,
            "<tr><td>{}<td>{}<td>{}<td>{}<td>{}",
            fmt(num(c, "requested_ns")),
            fmt(num(c, "set_ns")),
            fmt(num(c, "added_p50_ns")),
            fmt(num(c, "added_p99_ns")),
            if c["honoured"] == true { "yes" } else { "no" }
        );
    }
    table.push_str("</table>");
    out.push_str(&table);
    out
}

/// `lab limits`: each part's table with theory beside the measured
/// figure, and bars (a dashed line where theory is one figure).
fn limits(doc: &Value) -> String {
    let mib = |v: f64| v / 1048576.0;
    let mut out = String::from("<h2>Component limits against theory (seeds 004, 001)</h2>");
    let b = &doc["baselines"];
    if b.is_object() {
        let per: Vec<String> = b["cpu"]["per_core_mips"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| fmt(v.as_f64().unwrap_or(f64::NAN)))
            .collect();
        let _ = write!(
            out,
            "<h3>Baselines</h3><p>Integer kernel, M iterations/s: per core alone {}; all cores at once {}. Memory, one thread: read {} MiB/s, write {} MiB/s, copy {} MiB/s. Theory: {}.</p>",
            per.join(", "),
            fmt(num(&b["cpu"], "all_cores_mips")),
            fmt(mib(num(&b["memory"], "read"))),
            fmt(mib(num(&b["memory"], "write"))),
            fmt(mib(num(&b["memory"], "copy"))),
            esc(b["theory"].as_str().unwrap_or("?"))
        );
    }
    let d = &doc["disk"];
    if d.is_object() {
        let _ = write!(
            out,
            "<h3>Disk: {}</h3><p>Theory: {}.</p>",
            esc(d["target"]["path"].as_str().unwrap_or("?")),
            esc(d["theory"].as_str().unwrap_or("?"))
        );
        let groups: Vec<(String, Vec<Bar>)> = d["position"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let measured = num(p, "bytes_per_second");
                let mut bars = vec![("measured".to_owned(), mib(measured), None)];
                if let Some(t) = p["theory"].as_f64() {
                    bars[0].0 = format!("measured ({} × theory)", fmt(measured / t));
                    bars.push(("theory".to_owned(), mib(t), None));
                }
                (format!("{:.1} %", num(p, "fraction") * 100.0), bars)
            })
            .collect();
        out.push_str(&bars("Sequential read by position (O_DIRECT), MiB/s", " MiB/s", &groups, None));
        let groups: Vec<(String, Vec<Bar>)> = d["sizes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s.get("refused").is_none())
            .map(|s| {
                (
                    format!("{} B reads", num(s, "read_bytes")),
                    vec![("measured".to_owned(), mib(num(s, "bytes_per_second")), None)],
                )
            })
            .collect();
        out.push_str(&log_bars("Sequential read by read size, MiB/s", " MiB/s", &groups));
        let iops = d["iops_theory"].as_f64();
        let groups: Vec<(String, Vec<Bar>)> = d["depths"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| (format!("depth {}", num(x, "depth")), vec![("IOPS".to_owned(), num(x, "iops"), None)]))
            .collect();
        out.push_str(&bars("Random 4 KiB reads by queue depth, IOPS", "", &groups, iops.map(|v| (v, "data sheet"))));
        let mut t = String::from("<table><tr><th>policy<th>p50 µs<th>p99 µs<th>MiB/s<th>× buffered p50");
        let base = d["writes"].as_array().and_then(|w| w.first()).map_or(f64::NAN, |w| num(w, "p50_us"));
        for w in d["writes"].as_array().into_iter().flatten() {
            let _ = write!(
                t,
                "<tr><td>{}<td>{}<td>{}<td>{}<td>{}",
                esc(w["sync"].as_str().unwrap_or("?")),
                fmt(num(w, "p50_us")),
                fmt(num(w, "p99_us")),
                fmt(mib(num(w, "bytes_per_second"))),
                fmt(num(w, "p50_us") / base)
            );
        }
        t.push_str("</table>");
        let _ = write!(
            out,
            "<h3>Writes: fsync against buffered</h3>{t}<p>fsync theory: {}.</p>",
            d["fsync_theory_us"].as_object().map_or("unknown (no rpm in a data sheet)".to_owned(), |f| format!(
                "{} – {} µs",
                fmt(f["low"].as_f64().unwrap_or(f64::NAN)),
                fmt(f["high"].as_f64().unwrap_or(f64::NAN))
            ))
        );
    }
    let n = &doc["network"];
    if n.is_object() {
        let tbf = num(&n["theory"]["tbf"], "value");
        let working: Vec<String> = n["theory"]["tbf"]["working"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(n["theory"]["wire"]["working"].as_array().into_iter().flatten().skip(1))
            .map(|l| format!("<li>{}", esc(l.as_str().unwrap_or(""))))
            .collect();
        let _ = write!(
            out,
            "<h3>Network: TCP payload through tc tbf at {} (MTU {})</h3><ul>{}</ul>",
            esc(n["rate"].as_str().unwrap_or("?")),
            n["mtu"],
            working.join("")
        );
        let groups: Vec<(String, Vec<Bar>)> = n["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    format!("{} streams", num(r, "streams")),
                    vec![("measured".to_owned(), mib(num(&r["received"], "bytes_per_second")), None)],
                )
            })
            .collect();
        out.push_str(&bars(
            "TCP payload by parallel streams, MiB/s",
            " MiB/s",
            &groups,
            Some((mib(tbf), "tbf theory")),
        ));
        let _ = write!(
            out,
            "<p>Unshaped, {} streams: {} MiB/s (the machine's own limit over veth).</p>",
            n["unshaped"]["streams"],
            fmt(mib(num(&n["unshaped"]["received"], "bytes_per_second")))
        );
    }
    out
}

/// A result of `lab run`: per metric, each point's median with a 95 %
/// bootstrap interval; the environment's main lines; every run.
fn experiment(doc: &Value) -> String {
    let exp = &doc["experiment"];
    let mut out = format!(
        "<h2>Experiment {}</h2><p>{}</p><p>Medians of the counted runs with 95 % bootstrap intervals;          points visited in a random order each round (seed {}).</p>",
        esc(exp["name"].as_str().unwrap_or("?")),
        esc(exp["description"].as_str().unwrap_or("")),
        doc["seed"]
    );
    let label = |p: &Value| -> String {
        let fields: Vec<String> =
            p.as_object().into_iter().flatten().map(|(k, v)| format!("{k}={:?}", v.as_str().unwrap_or("?"))).collect();
        if fields.is_empty() { "(no parameters)".into() } else { fields.join(" ") }
    };
    let summary = doc["summary"].as_array().cloned().unwrap_or_default();
    let mut metrics: Vec<String> = Vec::new();
    for s in &summary {
        for m in s["metrics"].as_object().into_iter().flatten().map(|(m, _)| m) {
            if !metrics.contains(m) {
                metrics.push(m.clone());
            }
        }
    }
    for m in &metrics {
        let groups: Vec<(String, Vec<Bar>)> = summary
            .iter()
            .filter_map(|s| {
                let v = s["metrics"].get(m)?;
                let values: Vec<f64> = v["values"].as_array()?.iter().filter_map(Value::as_f64).collect();
                let ci = experiment::stats::bootstrap_median(&values, 2000, 1);
                Some((label(&s["point"]), vec![(format!("n={}", values.len()), num(v, "median"), ci)]))
            })
            .collect();
        let (title, unit) = metric_title(m);
        out.push_str(&bars(&title, &unit, &groups, None));
    }
    let env = &doc["environment"];
    let mut table = String::from("<table><tr><th>environment<th>");
    for (k, v) in env.as_object().into_iter().flatten() {
        if ["cpu.model", "cpu.cores", "memory.total", "kernel.release", "cpu.governor", "kansoku.version"]
            .contains(&k.as_str())
            || k.starts_with("package.")
        {
            let _ = write!(table, "<tr><td>{}<td style=text-align:left>{}", esc(k), esc(v.as_str().unwrap_or("")));
        }
    }
    table.push_str("</table><table><tr><th>point<th>round<th>s<th>metrics");
    for r in doc["runs"].as_array().into_iter().flatten() {
        let shown = match r.get("error") {
            Some(e) => format!("failed: {}", e.as_str().unwrap_or("?")),
            None => r["metrics"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    let (title, unit) = metric_title(k);
                    format!("{title}: {}{unit}", fmt(v.as_f64().unwrap_or(f64::NAN)))
                })
                .collect::<Vec<_>>()
                .join(" "),
        };
        // Numbered from 1, as the console numbers them while they run.
        let round = format!(
            "{}{}",
            r["round"].as_u64().map_or(0, |n| n + 1),
            if r["warmup"] == true { " (warm-up)" } else { "" }
        );
        let link = r["dashboard"].as_str().map_or(String::new(), |u| format!(" <a href='{}'>telemetry</a>", esc(u)));
        let _ = write!(
            table,
            "<tr><td style=text-align:left>{}<td>{}<td>{}<td style=text-align:left>{}{link}",
            esc(&label(&r["point"])),
            esc(&round),
            fmt(num(r, "seconds")),
            esc(&shown)
        );
    }
    table.push_str("</table>");
    out.push_str(&table);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(s: &str, needle: &str) -> usize {
        s.matches(needle).count()
    }

    #[test]
    fn both_experiments_become_plots_and_tables() {
        let replay = serde_json::json!({
            "machine": { "cores": 2, "cpu": "Test <CPU>", "kernel": "6.1" },
            "recording": "perf record -F 10000",
            "replay": [
                { "mode": "set", "cores": 1, "all_durable_ms_mean": 2.5, "all_durable_ms_max": 3.0,
                  "end_to_end_cpu_us_per_sample": 0.13, "wire_bytes_per_sample": 3.7 },
                { "mode": "set", "cores": 28, "all_durable_ms_mean": 21.9, "all_durable_ms_max": 28.7,
                  "end_to_end_cpu_us_per_sample": 0.12, "wire_bytes_per_sample": 3.7 },
                { "mode": "single", "cores": 28, "all_durable_ms_mean": 47.5, "all_durable_ms_max": 50.0,
                  "end_to_end_cpu_us_per_sample": 0.15, "wire_bytes_per_sample": 3.7 },
            ],
        });
        let interference = serde_json::json!({
            "machine": { "cores": 2, "cpu": "x", "kernel": "6.1" }, "repeat": 3, "idle_transfer_ms": 4.0,
            "results": [{ "workload": "7z b", "rows": [
                { "config": "none", "median_score": 100.0, "degradation_percent": 0.0 },
                { "config": "kernel@10000", "median_score": 95.0, "degradation_percent": 5.0 },
                { "config": "kansoku@10000", "median_score": 94.0, "degradation_percent": 6.0, "agent_cpu_share": 0.007 },
            ]}],
        });
        let html = render(&[("r.json".into(), replay), ("i.json".into(), interference)]).unwrap();
        // Two modes in each of two plots, the paper's transfer in the first.
        assert_eq!(count(&html, "<polyline class=series"), 5);
        assert_eq!(count(&html, "<circle"), 2 * 3 + 4, "a point per row per plot, four of the paper");
        // A bar per configuration other than `none`; the table has them all.
        assert_eq!(count(&html, "<rect class=bar"), 2);
        assert_eq!(count(&html, "<tr>"), 1 + 3 + 1 + 3);
        assert!(html.contains("agent 0.70 % of a core"), "{html}");
        assert!(html.contains("Test &lt;CPU&gt;") && !html.contains("<CPU>"), "escaped");
        let bad = render(&[("x.json".into(), serde_json::json!({ "a": 1 }))]).unwrap_err();
        assert!(bad.to_string().contains("x.json"), "{bad}");
    }

    #[test]
    fn an_experiment_result_becomes_bars_with_intervals() {
        let doc = serde_json::json!({
            "experiment": { "name": "web", "description": "a <test>" }, "seed": 7,
            "environment": { "cpu.model": "X", "cpu.cores": "2", "kernel.release": "6.18", "package.nginx": "1.22" },
            "summary": [
                { "point": { "k": "on" }, "metrics": { "max_us": { "n": 3, "median": 10.0, "values": [9.0, 10.0, 11.0] } } },
                { "point": { "k": "off" }, "metrics": { "max_us": { "n": 3, "median": 5.0, "values": [4.0, 5.0, 6.0] } } },
            ],
            "runs": [
                { "point": { "k": "on" }, "round": 0, "warmup": true, "seconds": 1.0, "metrics": { "max_us": 9.0 },
                  "dashboard": "http://h/#from=1&to=2" },
                { "point": { "k": "off" }, "round": 1, "warmup": false, "seconds": 1.0, "error": "exit 1" },
            ],
        });
        let html = render(&[("e.json".into(), doc)]).unwrap();
        assert_eq!(count(&html, "<rect class=bar"), 2);
        assert_eq!(count(&html, "<path class=ci"), 2);
        assert!(html.contains("a &lt;test&gt;") && html.contains("package.nginx") && html.contains("failed: exit 1"));
        assert!(html.contains("<a href='http://h/#from=1&amp;to=2'>telemetry</a>") && html.contains("(warm-up)"));
        assert!(html.contains("machine: 2 × X, kernel 6.18"), "{html}");
        // Metrics as people read them; rounds from 1, as the console counts.
        assert!(
            html.contains(">max (µs)</text>") && html.contains("max (µs): 9 µs") && !html.contains("max_us"),
            "{html}"
        );
        assert!(html.contains("<td>1 (warm-up)<td>") && html.contains("<td>2<td>"), "{html}");
    }

    /// A linear chart has a value axis: round steps from zero to its end,
    /// with the unit.
    #[test]
    fn linear_bars_have_a_value_axis() {
        let groups =
            vec![("x".to_owned(), vec![("a".to_owned(), 12.5, Some((11.0, 14.0))), ("b".to_owned(), 22.5, None)])];
        let svg = bars("v", " ms", &groups, None);
        let ticks: Vec<&str> = svg
            .split("<text class=tick")
            .skip(1)
            .map(|t| t.split('>').nth(1).unwrap().split('<').next().unwrap())
            .collect();
        assert_eq!(ticks, ["0", "10.0 ms", "20.0 ms"], "{svg}");
    }

    /// Read sizes span decades: on a log scale the smallest bar is visible.
    #[test]
    fn log_bars_show_every_decade() {
        let groups =
            vec![("sizes".to_owned(), vec![("512 B".to_owned(), 0.5, None), ("1 MiB".to_owned(), 500.0, None)])];
        let svg = log_bars("read", " MiB/s", &groups);
        let widths: Vec<f64> = svg
            .split("<rect class=bar")
            .skip(1)
            .map(|r| r.split("width=").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(widths.len(), 2);
        assert!(widths[0] > 50.0 && widths[1] > widths[0], "{widths:?}");
        assert!(svg.contains("(log scale)") && svg.contains(">0.1</text>") && svg.contains(">1000</text>"), "{svg}");
    }

    #[test]
    fn a_latency_curve_becomes_the_degradation_curve_and_the_calibration_a_table() {
        let doc = serde_json::json!({
            "experiment": "latency", "metric": "tps", "machine": { "cores": 2, "cpu": "X", "kernel": "6.18" },
            "knee_ns": 1500.0, "knee_interval_ns": [1200.0, 1800.0],
            "budget": { "hop_ns": 300.0, "percent": 5.0, "tiers": 5, "at_least": false },
            "curve": [
                { "x_ns": 0.0, "throughput": 100.0, "pd": 0.0, "pd_interval": [-1.0, 1.0], "model_pd": 0.0 },
                { "x_ns": 1500.0, "throughput": 96.0, "pd": 4.0, "pd_interval": [3.0, 5.0], "model_pd": 4.5 },
            ],
            "calibration": [
                { "requested_ns": 0, "set_ns": 0, "added_p50_ns": 0.0, "added_p99_ns": 1.0, "honoured": true },
                { "requested_ns": 1500, "set_ns": 1455, "added_p50_ns": 1502.0, "added_p99_ns": 1540.0, "honoured": true },
            ],
            "paper": { "knee_ns": 1500.0, "pd_at_knee_below": 5.0, "pd_past_knee": 15.0, "past_knee_factor": 1.4,
                       "here": { "knee_ns": 1500.0, "pd_at_knee": 4.0, "pd_past_knee": null } },
        });
        let html = render(&[("l.json".into(), doc)]).unwrap();
        // The curve: a point per step with its interval, the model dashed,
        // the knee and the budget marked, the x axis in readable units.
        assert_eq!(count(&html, "<circle class=point"), 2);
        assert_eq!(count(&html, "<path class=ci"), 2);
        assert_eq!(count(&html, "<polyline class=model"), 1);
        assert!(html.contains("knee 1.5 µs") && html.contains("budget 5 %"), "{html}");
        assert!(html.contains(">1 µs</text>") && !html.contains("1500 ns</text>"), "{html}");
        assert!(
            html.contains("1500 ns (interval 1200 – 1800 ns)") && html.contains("5 hops of 300 ns within 5 %"),
            "{html}"
        );
        assert!(
            html.contains("<td>seed 003: OLTP (TPC-C-like), PCIe switch hops<td>1500 ns<td>under 5 %<td>~15.0 %"),
            "{html}"
        );
        assert!(html.contains("<td>this run: tps<td>1500 ns<td>4 %<td>–"), "{html}");
        assert_eq!(count(&html, "<tr>"), 1 + 2 + 3);
    }

    #[test]
    fn axis_ends_are_round() {
        assert_eq!(nice(21.9), 25.0);
        assert_eq!(nice(510.0), 750.0);
        assert_eq!(nice(0.13), 0.2);
        assert_eq!(nice(0.0), 1.0);
        assert_eq!(fmt(0.1290), "0.129");
        assert_eq!(fmt(21.94), "21.9");
    }
}
