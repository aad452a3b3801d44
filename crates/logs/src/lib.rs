//! How kansoku logs. One line per event on stderr, in the format a reader
//! wants: `text` for a terminal, `logfmt` or `json` for a log pipeline,
//! `journal` (the syslog priority as a `<N>` prefix, no timestamp: the
//! journal stamps and files each line at its level) when systemd reads
//! stderr, which `auto` detects (`JOURNAL_STREAM`). Levels are set per
//! module (`--log info,store=debug`, or `KANSOKU_LOG`). A line that repeats
//! from one place in the code more than [`BURST`] times in [`WINDOW`] is
//! held back and counted ([`held_back`]); the next line from there that
//! passes says how many were (`held_back=N`), so a failing disk or a
//! flood of bad clients cannot flood the log.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Lines one place may log in [`WINDOW`] before the rest are held back.
pub const BURST: u32 = 10;
/// The window of [`BURST`].
pub const WINDOW: Duration = Duration::from_secs(10);

static HELD_BACK: AtomicU64 = AtomicU64::new(0);

/// Lines held back since the start (`/api/v1/status`: `threads.log_lines_held_back`).
pub fn held_back() -> u64 {
    HELD_BACK.load(Ordering::Relaxed)
}

/// The shape of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// journal when systemd reads stderr, else text.
    Auto,
    Text,
    Logfmt,
    Json,
    Journal,
}

/// The flags every command takes (also keys of the configuration file).
#[derive(clap::Args, Debug, Clone)]
pub struct LogArgs {
    /// Log lines as text, logfmt, json or journal (`<N>` priority
    /// prefixes); auto: journal when systemd reads stderr, else text.
    #[arg(long, global = true, value_enum, default_value = "auto", value_name = "FORMAT")]
    pub log_format: Format,
    /// Log levels, per module if wanted: `info`, `debug`,
    /// `info,store=debug,ingest=trace` (tracing's EnvFilter syntax).
    #[arg(long, global = true, env = "KANSOKU_LOG", default_value = "info", value_name = "FILTER")]
    pub log: String,
}

/// Installs the subscriber for the whole process.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log).map_err(|e| format!("--log {:?}: {e}", args.log))?;
    let format = match args.log_format {
        Format::Auto if std::env::var_os("JOURNAL_STREAM").is_some() => Format::Journal,
        Format::Auto => Format::Text,
        f => f,
    };
    let ansi = format == Format::Text && std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .event_format(Lines::new(format, ansi))
        .try_init()
        .map_err(|e| format!("logging: {e}"))
}

/// Formats each event as `format`, holding back floods.
#[derive(Debug)]
pub struct Lines {
    format: Format,
    ansi: bool,
    limiter: Limiter<tracing::callsite::Identifier>,
}

impl Lines {
    pub fn new(format: Format, ansi: bool) -> Lines {
        Lines { format, ansi, limiter: Limiter::default() }
    }
}

/// At most [`BURST`] lines a [`WINDOW`] from each place `K`.
#[derive(Debug)]
struct Limiter<K> {
    places: Mutex<HashMap<K, Place>>,
}

impl<K> Default for Limiter<K> {
    fn default() -> Self {
        Limiter { places: Mutex::new(HashMap::new()) }
    }
}

#[derive(Debug)]
struct Place {
    since: Instant,
    lines: u32,
    held: u64,
}

impl<K: std::hash::Hash + Eq> Limiter<K> {
    /// Whether a line from `place` may go at `now`, and if so how many were
    /// held back before it.
    fn admit(&self, place: K, now: Instant) -> Option<u64> {
        let mut places = self.places.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let p = places.entry(place).or_insert(Place { since: now, lines: 0, held: 0 });
        if now.duration_since(p.since) >= WINDOW {
            p.since = now;
            p.lines = 0;
        }
        if p.lines >= BURST {
            p.held += 1;
            HELD_BACK.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        p.lines += 1;
        Some(std::mem::take(&mut p.held))
    }
}

/// An event's message and fields, in order.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.rest.push((field.name(), value.to_owned()));
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push((field.name(), format!("{value:?}")));
        }
    }
}

/// The syslog priority of a level (`sd-daemon(3)`).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// A logfmt value: bare if it can be, else quoted with `"` and `\` escaped.
fn logfmt_value(out: &mut String, v: &str) {
    if !v.is_empty() && v.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\') {
        out.push_str(v);
    } else {
        out.push('"');
        for c in v.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Now as RFC 3339 UTC with microseconds.
fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = model::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:06}Z", rem / 3600, rem % 3600 / 60, rem % 60, now.subsec_micros())
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let meta = event.metadata();
        let Some(held) = self.limiter.admit(meta.callsite(), Instant::now()) else {
            return Ok(());
        };
        let mut f = Fields::default();
        event.record(&mut f);
        if held > 0 {
            f.rest.push(("held_back", held.to_string()));
        }
        let mut line = String::with_capacity(128);
        match self.format {
            Format::Json => {
                let mut obj = serde_json::Map::new();
                obj.insert("ts".into(), timestamp().into());
                obj.insert("level".into(), meta.level().as_str().to_ascii_lowercase().into());
                obj.insert("target".into(), meta.target().into());
                obj.insert("msg".into(), f.message.into());
                for (k, v) in f.rest {
                    obj.insert(k.into(), v.into());
                }
                line = serde_json::Value::Object(obj).to_string();
            }
            Format::Logfmt => {
                let _ = write!(line, "ts={} level={} target=", timestamp(), meta.level().as_str().to_ascii_lowercase());
                logfmt_value(&mut line, meta.target());
                line.push_str(" msg=");
                logfmt_value(&mut line, &f.message);
                for (k, v) in &f.rest {
                    let _ = write!(line, " {k}=");
                    logfmt_value(&mut line, v);
                }
            }
            Format::Journal | Format::Text | Format::Auto => {
                if self.format == Format::Journal {
                    let _ = write!(line, "<{}>", priority(meta.level()));
                } else if self.ansi {
                    let colour = match *meta.level() {
                        Level::ERROR => "31",
                        Level::WARN => "33",
                        Level::INFO => "32",
                        _ => "34",
                    };
                    let _ = write!(line, "{} \x1b[{colour}m{:>5}\x1b[0m ", timestamp(), meta.level());
                } else {
                    let _ = write!(line, "{} {:>5} ", timestamp(), meta.level());
                }
                line.push_str(&f.message);
                for (k, v) in &f.rest {
                    let _ = write!(line, " {k}={v}");
                }
            }
        }
        writeln!(w, "{line}")
    }
}

#[cfg(test)]
mod tests;
