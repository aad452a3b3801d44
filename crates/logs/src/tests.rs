//! Each format's lines, read back as their readers would; the flood limit.

use super::*;
use std::sync::Arc;

/// Lines written through a subscriber of `format`, as one string.
fn capture(format: Format, f: impl FnOnce()) -> String {
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let out = buf.clone();
    let sub =
        tracing_subscriber::fmt().with_writer(move || buf.clone()).event_format(Lines::new(format, false)).finish();
    tracing::subscriber::with_default(sub, f);
    String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
}

fn event() {
    tracing::warn!(path = "/var/lib/k b", n = 3, "disk \"full\"\nagain");
}

#[test]
fn json_lines_parse_with_every_field() {
    let out = capture(Format::Json, event);
    let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(v["level"], "warn");
    assert_eq!(v["msg"], "disk \"full\"\nagain");
    assert_eq!(v["path"], "/var/lib/k b");
    assert_eq!(v["n"], "3");
    assert!(v["ts"].as_str().unwrap().ends_with('Z'), "{v}");
    assert!(v["target"].as_str().unwrap().starts_with("logs"), "{v}");
}

#[test]
fn logfmt_quotes_what_needs_it_and_stays_one_line() {
    let out = capture(Format::Logfmt, event);
    assert_eq!(out.lines().count(), 1, "{out}");
    let line = out.trim_end();
    assert!(line.starts_with("ts=") && line.contains(" level=warn target=logs"), "{line}");
    assert!(line.contains(r#" msg="disk \"full\"\nagain" path="/var/lib/k b" n=3"#), "{line}");
}

#[test]
fn journal_lines_carry_the_syslog_priority_and_no_timestamp() {
    let out = capture(Format::Journal, || {
        tracing::error!("e");
        tracing::warn!("w");
        tracing::info!("i");
    });
    assert_eq!(out, "<3>e\n<4>w\n<6>i\n");
    let text = capture(Format::Text, || tracing::info!(k = 1, "hello"));
    assert!(text.ends_with("Z  INFO hello k=1\n"), "{text}");
}

#[test]
fn a_flood_from_one_place_is_held_back_and_counted() {
    let before = held_back();
    let out = capture(Format::Logfmt, || {
        for i in 0..25 {
            tracing::info!(i, "same place");
        }
        tracing::info!("another place");
    });
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), BURST as usize + 1, "{out}");
    assert!(lines.last().unwrap().contains("another place"));
    assert!(held_back() >= before + 15);

    // After the window, the next line says how many were held back.
    let l = Limiter::default();
    let t0 = Instant::now();
    for _ in 0..BURST {
        assert_eq!(l.admit(1u8, t0), Some(0));
    }
    assert_eq!(l.admit(1, t0 + Duration::from_secs(1)), None);
    assert_eq!(l.admit(1, t0 + Duration::from_secs(2)), None);
    assert_eq!(l.admit(2, t0 + Duration::from_secs(2)), Some(0), "another place is not held");
    assert_eq!(l.admit(1, t0 + WINDOW), Some(2));
    assert_eq!(l.admit(1, t0 + WINDOW), Some(0));
}
