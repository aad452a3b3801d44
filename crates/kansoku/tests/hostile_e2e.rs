//! Issue 42: no request ends the server. `kansoku server` under a 4 GB
//! address-space cap (`prlimit --as`) gets each request that once ended it
//! (`lab::hostile`: one per class), with `/ping` asked throughout from
//! another thread. Each is refused as documented (docs/api.md, "Limits"),
//! every ping is answered, the process is still there, its peak resident
//! set stays far below the cap, and its `threads` section shows no panic.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, mpsc};
use std::time::Duration;

const CAP: u64 = 4_000_000_000;

#[test]
fn no_small_request_ends_the_server_and_ping_is_answered_throughout() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = common::start_capped(
        CAP,
        &["server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0", "--http-body-timeout", "1s"],
        &dir.path().join("data"),
    );
    let addr = srv.addr.clone();
    let pid = srv.child.id();
    // A point for the InfluxQL classes to find.
    common::create_database(&addr, "hostile", "");
    let (code, body) = common::http_post(&addr, "/write?db=hostile", "", b"hostile v=1 1800000000000000000\n");
    assert_eq!(code, 204, "{body}");

    let (stop_tx, stop_rx) = mpsc::sync_channel::<()>(1);
    let (answered, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let pinger = {
        let (addr, answered, failed) = (addr.clone(), Arc::clone(&answered), Arc::clone(&failed));
        std::thread::spawn(move || {
            // A ping every 100 ms (pacing, not synchronisation) until told to stop.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(Duration::from_millis(100)) {
                match lab::hostile::http(&addr, "GET", "/ping", "", b"").0 {
                    204 => answered.fetch_add(1, Relaxed),
                    other => {
                        eprintln!("/ping answered {other}");
                        failed.store(true, Relaxed);
                        return;
                    }
                };
            }
        })
    };
    let mut wrong = Vec::new();
    for class in lab::hostile::classes() {
        if let Err(e) = (class.send)(&addr, "") {
            wrong.push(format!("{}: {e}", class.name));
        }
        assert!(srv.child.try_wait().unwrap().is_none(), "the server ended on {}", class.name);
    }
    stop_tx.send(()).unwrap();
    pinger.join().unwrap();
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert!(!failed.load(Relaxed), "a /ping went unanswered");
    assert!(answered.load(Relaxed) > 0);
    let peak = lab::procs::peak_rss_bytes(pid);
    eprintln!("hostile_e2e: peak resident set {} MiB under a {} MB cap", peak >> 20, CAP / 1_000_000);
    assert!(peak > 0 && peak < CAP / 2, "peak resident set {peak} bytes");
    let (_, status) = common::http_get(&addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["threads"]["panics"], 0, "{}", status["threads"]);
    assert!(status["http"]["body_timeouts"].as_u64().unwrap() >= 16, "{}", status["http"]);
}
