//! Helpers shared by the end-to-end tests: start the real binary (and the
//! peers they run beside it), talk HTTP to it, read its live tail.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_kansoku");
/// Upper bound on any single wait; a hung test fails instead of hanging CI.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Up {
    pub child: Child,
    pub addr: String,
    /// The line that said where it listens (a server's also says where
    /// agents connect: `agents on ADDR`).
    pub line: String,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `kansoku up` on an ephemeral port and returns once it says where it listens.
pub fn up(data: &Path) -> Up {
    start(&["up", "--listen", "127.0.0.1:0", "--interval", "100ms", "--host", "e2e"], data)
}

/// Starts `kansoku ARGS --data DATA` and returns once it says where it listens.
pub fn start(args: &[&str], data: &Path) -> Up {
    start_cmd(Command::new(BIN), args, data)
}

/// [`start`] under a cap on its address space (`prlimit --as`), as a
/// small machine would run it: an allocation past the cap ends the
/// process, so a test that it stays up shows its memory is bounded.
pub fn start_capped(as_bytes: u64, args: &[&str], data: &Path) -> Up {
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={as_bytes}")).arg("--").arg(BIN);
    start_cmd(cmd, args, data)
}

fn start_cmd(mut cmd: Command, args: &[&str], data: &Path) -> Up {
    let child = cmd.args(args).arg("--data").arg(data).stderr(Stdio::piped()).spawn().unwrap();
    listening(child)
}

/// Waits for a child started with piped stderr to say where it listens.
pub fn listening(mut child: Child) -> Up {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (addr, line) = loop {
        let line = lines.next().expect("kansoku exited before listening").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break (rest.split([',', ' ']).next().unwrap().to_owned(), line);
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Up { child, addr, line }
}

pub fn http_get(addr: &str, path_and_query: &str) -> (u16, String) {
    http_get_with(addr, path_and_query, "")
}

/// [`http_get`] with extra `headers` (each ending in CRLF).
pub fn http_get_with(addr: &str, path_and_query: &str, headers: &str) -> (u16, String) {
    let (status, body) = http_get_bytes_with(addr, path_and_query, headers);
    (status, String::from_utf8(body).expect("a UTF-8 body"))
}

/// [`http_get`] of a binary body.
pub fn http_get_bytes(addr: &str, path_and_query: &str) -> (u16, Vec<u8>) {
    http_get_bytes_with(addr, path_and_query, "")
}

fn http_get_bytes_with(addr: &str, path_and_query: &str, headers: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(s, "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\n{headers}\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("a header");
    let head = String::from_utf8_lossy(&resp[..at]);
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, resp[at + 4..].to_vec())
}

/// POSTs `body` with extra `headers` (each ending in CRLF); (status, body).
pub fn http_post(addr: &str, path: &str, headers: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    write!(s, "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n{headers}\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    (head.split_whitespace().nth(1).unwrap().parse().unwrap(), body.to_owned())
}

/// `CREATE DATABASE name` through `/query` (with extra `headers`, each
/// ending in CRLF): a database must exist before `/write` (issue 49).
pub fn create_database(addr: &str, name: &str, headers: &str) {
    let form = format!("q={}", enc(&format!("CREATE DATABASE \"{name}\"")));
    let headers = format!("Content-Type: application/x-www-form-urlencoded\r\n{headers}");
    let (status, body) = http_post(addr, "/query", &headers, form.as_bytes());
    assert_eq!(status, 200, "CREATE DATABASE {name}: {body}");
}

pub fn enc(s: &str) -> String {
    client::escape(s)
}

/// A subscription to the live tail (`/api/v1/live`): its `points` events
/// as they come, each read within [`IO_TIMEOUT`].
pub struct Live {
    lines: std::io::Lines<BufReader<TcpStream>>,
    /// The newest `series` list: what the values of `points` index into.
    pub series: Vec<serde_json::Value>,
}

impl Live {
    pub fn open(addr: &str, selector: &str) -> Live {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        write!(s, "GET /api/v1/live?match={} HTTP/1.1\r\nHost: {addr}\r\n\r\n", enc(selector)).unwrap();
        Live { lines: BufReader::new(s).lines(), series: Vec::new() }
    }

    /// The next `points` event: its time (ns) and values. Fails when none
    /// comes within [`IO_TIMEOUT`], keep-alives or `series` events or not
    /// (a tail that sends no points once hung a suite instead of failing).
    pub fn next_points(&mut self) -> (i64, Vec<Option<f64>>) {
        let mut event = String::new();
        let deadline = std::time::Instant::now() + IO_TIMEOUT;
        loop {
            assert!(std::time::Instant::now() < deadline, "no points on the live tail within {IO_TIMEOUT:?}");
            let line = self.lines.next().expect("live tail closed").expect("live tail stalled");
            if let Some(e) = line.strip_prefix("event: ") {
                event = e.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                assert_ne!(event, "lagged", "test client lagged: {data}");
                if event == "series" {
                    let v: serde_json::Value = serde_json::from_str(data).unwrap();
                    self.series = v["series"].as_array().unwrap().clone();
                }
                if event == "points" {
                    let v: serde_json::Value = serde_json::from_str(data).unwrap();
                    let values = v["values"].as_array().unwrap().iter().map(serde_json::Value::as_f64).collect();
                    return (v["t_ns"].as_i64().unwrap(), values);
                }
            }
        }
    }
}

/// Asks `check` at each `points` event of `selector` on the live tail (a
/// new report of what is waited for, never a clock) until it answers
/// `Ok`; fails after `n` events with `what` and the last answer. (A
/// subscription per wait: one left unread for long would lag.)
pub fn until<T>(addr: &str, selector: &str, n: usize, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let mut reports = Live::open(addr, selector);
    for _ in 0..n {
        match check() {
            Ok(v) => return v,
            Err(_) => {
                reports.next_points();
            }
        }
    }
    check().unwrap_or_else(|last| panic!("{what}: not after {n} reports of {selector}; last: {last}"))
}

/// Reads `n` `points` events from the live tail; returns their times (ns).
pub fn live_times(addr: &str, selector: &str, n: usize) -> Vec<i64> {
    let mut live = Live::open(addr, selector);
    (0..n).map(|_| live.next_points().0).collect()
}

pub fn query(addr: &str, selector: &str, from: i64, to: i64) -> serde_json::Value {
    let path = format!(
        "/api/v1/query?query={}&from={}&to={}&time_unit=ns",
        enc(selector),
        from as f64 / 1e9,
        to as f64 / 1e9 + 0.05
    );
    let (status, body) = http_get(addr, &path);
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// A JSON file a command wrote (a lab result).
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// A child process (a peer: Prometheus, Alertmanager, a workload) killed
/// and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port free a moment ago, for a peer that cannot be told to
/// pick its own and say it. Taken below the kernel's ephemeral range
/// (`ip_local_port_range`, 32768 and up by default), so that no port-0
/// listener or outgoing connection of a test running beside this one can
/// take it before the peer binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7919);
    loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (base.wrapping_add(k.wrapping_mul(104_729)) % 22_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Waits for `ready` (polled every 100 ms), at most `limit`, else fails
/// naming `what`.
pub fn wait(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a peer (Prometheus, Alertmanager, influxd, node_exporter) and
/// returns once its log says `ready` — its own line, the event itself, not
/// a poll; the rest of its log is drained. Fails after 60 s or if it exits.
pub fn peer(mut cmd: Command, ready: &'static str) -> Killed {
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e} (scripts/deps.sh test installs it)"));
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in lines.map_while(Result::ok) {
            if line.contains(ready)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    let peer = Killed(child);
    rx.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("{what} did not log {ready:?} within 60 s"));
    peer
}
