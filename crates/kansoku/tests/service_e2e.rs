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

/// SIGHUP, as `systemctl reload` would send it to a server: the tokens
/// file is read again (the new set in use at once; a broken file keeps the
/// old set, saying why), a changed setting of the configuration file is
/// named as needing a restart, and the process goes on serving.
#[test]
fn sighup_reads_the_tokens_again_and_names_what_needs_a_restart() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let write_private = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write_private(&tokens, "old-token-0123456789\n");
    let conf = dir.path().join("kansoku.toml");
    std::fs::write(&conf, format!("[server]\ntokens = {tokens:?}\nmax-series = 1000\n")).unwrap();
    let mut child = Command::new(BIN)
        .args(["--config", conf.to_str().unwrap(), "server", "--listen", "127.0.0.1:0", "--ingest", "127.0.0.1:0"])
        .arg("--data")
        .arg(dir.path().join("data"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(4096);
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |what: &str| -> String {
        loop {
            let line = rx.recv_timeout(IO_TIMEOUT).unwrap_or_else(|_| panic!("no log line with {what:?}"));
            if line.contains(what) {
                return line;
            }
        }
    };
    let line = wait_for("listening on http://");
    let addr = line.split("listening on http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    let status =
        |token: &str| common::http_get_with(&addr, "/api/v1/status", &format!("Authorization: Bearer {token}\r\n")).0;
    assert_eq!(status("old-token-0123456789"), 200);
    assert_eq!(status("new-token-0123456789"), 401);
    let hup = || assert!(Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());

    write_private(&tokens, "new-token-0123456789\n");
    std::fs::write(&conf, format!("[server]\ntokens = {tokens:?}\nmax-series = 2000\n")).unwrap();
    hup();
    assert!(wait_for("SIGHUP: 1 tokens in use").contains(&*tokens.to_string_lossy()));
    let changed = wait_for("SIGHUP: --");
    assert!(changed.contains("--max-series changed") && changed.contains("restart to apply"), "{changed}");
    assert_eq!(status("new-token-0123456789"), 200);
    assert_eq!(status("old-token-0123456789"), 401);

    // A broken file: the set in use stays, and the log says why.
    write_private(&tokens, "short\n");
    hup();
    let kept = wait_for("SIGHUP: tokens kept as they were (1 in use)");
    assert!(kept.contains("shorter than 16 characters"), "{kept}");
    assert_eq!(status("new-token-0123456789"), 200);
    let _ = child.kill();
    let _ = child.wait();
}
