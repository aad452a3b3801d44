//! The load generator against a small local server that stalls once, on
//! purpose, for half a second: closed loop, as ApacheBench measures, the
//! stall is one slow response among thousands and the p99 hides it; open
//! loop with coordinated omission corrected, the requests meant to leave
//! during the stall count their wait and the p99 shows it. Every request
//! the server answered is counted once.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use load::{Config, Progress, Target};

const HEADERS: &[&str] = &[];
const STALL: Duration = Duration::from_millis(500);

/// A keep-alive HTTP server on an ephemeral port whose `stall_at`th request
/// (counted from 1) waits [`STALL`] before its answer. Returns its URL and
/// the count of requests answered.
fn stalling_server(stall_at: u64) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/x", listener.local_addr().unwrap());
    let served = Arc::new(AtomicU64::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let count = Arc::clone(&count);
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let mut lines = BufReader::new(conn).lines();
                loop {
                    // A request: lines up to the empty one.
                    loop {
                        match lines.next() {
                            Some(Ok(l)) if l.is_empty() => break,
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    if count.load(Ordering::Relaxed) + 1 == stall_at {
                        std::thread::sleep(STALL);
                    }
                    // Counted before it leaves: the client may read it
                    // (and the test compare) before this thread runs again.
                    count.fetch_add(1, Ordering::Relaxed);
                    if out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello").is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, served)
}

fn config(url: &str, rate: Option<f64>) -> Config {
    Config {
        headers: HEADERS.iter().map(|h| (*h).to_owned()).collect(),
        target: Target::parse(url).unwrap(),
        connections: 1,
        threads: 1,
        duration: Duration::from_millis(1500),
        rate,
        http2: false,
        streams: 1,
        keep_alive: true,
        timeout: Duration::from_secs(10),
        interval: Duration::from_millis(100),
    }
}

#[test]
fn closed_loop_hides_the_stall_in_p99_open_loop_shows_it() {
    // Closed loop: one connection, as fast as the server answers.
    let (url, served) = stalling_server(200);
    let out = load::run(&config(&url, None), &Arc::new(Progress::default())).unwrap();
    let r = &out.recorder;
    assert_eq!(
        r.responses,
        served.load(Ordering::Relaxed),
        "every answer counted once: {:?} {} connects",
        r.failures,
        r.connects
    );
    assert_eq!((r.failures.total(), r.status[1], r.body_bytes), (0, r.responses, 5 * r.responses));
    assert!(r.responses > 400, "{} responses", r.responses);
    let sent = load::Summary::of_ns(&r.sent_ns);
    assert!(sent.max >= STALL.as_micros() as f64, "{sent:?}");
    assert!(sent.p99 < 100_000.0, "closed loop: the stall is one response of {}: {sent:?}", r.responses);
    // Closed loop, nothing was meant to leave during the stall.
    assert_eq!(r.corrected_ns.value_at_quantile(0.99), r.sent_ns.value_at_quantile(0.99));
    // The per-100 ms figures show the stall as intervals with nothing done.
    let idle = r.intervals.iter().filter(|i| i.responses == 0).count();
    assert!(idle >= 4, "{:?}", r.intervals.iter().map(|i| i.responses).collect::<Vec<_>>());

    // Open loop at 1,000 a second: ~500 requests were due during the stall.
    let (url, served) = stalling_server(200);
    let out = load::run(&config(&url, Some(1000.0)), &Arc::new(Progress::default())).unwrap();
    let r = &out.recorder;
    assert_eq!(r.responses, served.load(Ordering::Relaxed));
    assert!((1400..=1500).contains(&r.responses), "{} of 1,500 scheduled", r.responses);
    let corrected = load::Summary::of_ns(&r.corrected_ns);
    let sent = load::Summary::of_ns(&r.sent_ns);
    assert!(corrected.p99 >= 0.8 * STALL.as_micros() as f64, "corrected {corrected:?}");
    assert!(corrected.p90 >= 100_000.0, "corrected {corrected:?}");
    assert!(sent.p99 < 100_000.0, "from the send {sent:?}");
}
