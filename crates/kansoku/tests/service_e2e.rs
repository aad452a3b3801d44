//! What systemd hears from `kansoku up` run as a `Type=notify` service with
//! `WatchdogSec=` (packaging/systemd): READY=1 once it serves, WATCHDOG=1
//! pings at half the period, STOPPING=1 once SIGTERM arrives. The test plays
//! systemd's side of the protocol: a datagram socket named by NOTIFY_SOCKET.

mod common;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};

use common::{BIN, IO_TIMEOUT, http_get};

#[test]
fn systemd_hears_ready_watchdog_pings_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    let child = Command::new(BIN)
        .args(["--config", "/dev/null", "up", "--listen", "127.0.0.1:0", "--trace", "off", "--data"])
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "400000")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let up = common::listening(child);
    let mut buf = [0u8; 256];
    let mut next = || {
        let n = sock.recv(&mut buf).expect("a notification within the timeout");
        String::from_utf8_lossy(&buf[..n]).trim_end().to_owned()
    };
    assert_eq!(next(), "READY=1");
    // It serves by the time it says so.
    assert_eq!(http_get(&up.addr, "/api/v1/status").0, 200);
    // Pings keep coming, each within the half period (timing is not
    // asserted: two in a row show the loop runs).
    assert_eq!(next(), "WATCHDOG=1");
    assert_eq!(next(), "WATCHDOG=1");
    nix_kill(pid);
    loop {
        let m = next();
        if m == "STOPPING=1" {
            break;
        }
        assert_eq!(m, "WATCHDOG=1", "only pings before STOPPING=1");
    }
    let mut up = up;
    let status = up.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

fn nix_kill(pid: u32) {
    let ok = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(ok.success());
}
