//! Agents and a server, as real processes: outages in network namespaces,
//! a server killed with SIGKILL, hostile clients, TLS, twenty agents. Every
//! check reads what the server stored.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use common::{BIN, enc, http_get};
use wire::{Hello, Msg};

/// A process's stderr lines so far, `true` once it closed (the process
/// exited), and a condition variable signalled at each line.
type Log = (Mutex<(Vec<String>, bool)>, Condvar);

/// A kansoku process whose stderr is kept (for failures) and watched.
struct Proc {
    child: Child,
    log: Arc<Log>,
    name: String,
}

impl Proc {
    fn spawn(name: &str, mut cmd: Command) -> Proc {
        let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let log = Arc::new((Mutex::new((Vec::new(), false)), Condvar::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.0.lock().unwrap().0.push(line);
                sink.1.notify_all();
            }
            sink.0.lock().unwrap().1 = true;
            sink.1.notify_all();
        });
        Proc { child, log, name: name.to_owned() }
    }

    /// Waits for a log line containing `needle` (woken by each new line);
    /// returns it.
    fn wait_line(&mut self, needle: &str) -> String {
        self.wait_nth(needle, 1)
    }

    /// Waits for the `n`th log line containing `needle`; returns it.
    fn wait_nth(&mut self, needle: &str, n: usize) -> String {
        let (lock, cv) = &*self.log;
        let count = |lines: &[String]| lines.iter().filter(|l| l.contains(needle)).count();
        let (guard, timeout) = cv
            .wait_timeout_while(lock.lock().unwrap(), Duration::from_secs(30), |(lines, closed)| {
                !*closed && count(lines) < n
            })
            .unwrap();
        if let Some(l) = guard.0.iter().filter(|l| l.contains(needle)).nth(n - 1) {
            return l.clone();
        }
        let log = guard.0.join("\n");
        assert!(!timeout.timed_out(), "{}: no {needle:?} in 30 s:\n{log}", self.name);
        panic!("{} exited before logging {needle:?}:\n{log}", self.name);
    }

    fn dump(&self) -> String {
        self.log.0.lock().unwrap().0.join("\n")
    }

    /// SIGTERM, then wait for a clean exit (a watchdog kills it after 30 s).
    fn stop(&mut self) {
        signal(&self.child, "TERM");
        let pid = self.child.id().to_string();
        let (done, watch) = std::sync::mpsc::sync_channel::<()>(1);
        let watchdog = std::thread::spawn(move || {
            let hung = watch.recv_timeout(Duration::from_secs(30)).is_err();
            if hung {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            hung
        });
        let st = self.child.wait().unwrap();
        let _ = done.send(());
        assert!(!watchdog.join().unwrap(), "{} did not stop in 30 s:\n{}", self.name, self.dump());
        assert!(st.success(), "{} exited with {st}:\n{}", self.name, self.dump());
    }

    fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

struct Server {
    proc: Proc,
    http: String,
    ingest: String,
}

fn server(data: &Path, ingest: &str, extra: &[&str]) -> Server {
    let mut cmd = Command::new(BIN);
    cmd.args(["server", "--listen", "127.0.0.1:0", "--ingest", ingest]).arg("--data").arg(data).args(extra);
    let mut proc = Proc::spawn("server", cmd);
    let line = proc.wait_line("listening on http://");
    let http = line.split("listening on http://").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    let ingest = line.split("agents on ").nth(1).unwrap().split([',', ' ']).next().unwrap().to_owned();
    Server { proc, http, ingest }
}

fn agent_cmd(server: &str, data: &Path, host: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["agent", "--server", server, "--host", host, "--interval", "100ms", "--batch", "500ms"])
        .arg("--data")
        .arg(data)
        .args(extra);
    // Kernel tracing where a test asks for it (twenty tracing agents on one
    // machine would trace each other's every call).
    if !extra.contains(&"--trace") {
        cmd.args(["--trace", "off"]);
    }
    cmd
}

fn agent(server: &str, data: &Path, host: &str, extra: &[&str]) -> Proc {
    Proc::spawn(&format!("agent {host}"), agent_cmd(server, data, host, extra))
}

/// The token the test servers with `--tokens` accept; a server without
/// tokens ignores it.
const READ_TOKEN: &str = "any-host-token-0123456789";

fn json(addr: &str, path: &str) -> serde_json::Value {
    let (status, body) = common::http_get_with(addr, path, &format!("Authorization: Token {READ_TOKEN}\r\n"));
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn hosts(addr: &str) -> Vec<serde_json::Value> {
    json(addr, "/api/v1/hosts")["hosts"].as_array().unwrap().clone()
}

fn host_field(addr: &str, host: &str, field: &str) -> Option<serde_json::Value> {
    hosts(addr).into_iter().find(|h| h["host"] == host).map(|h| h[field].clone())
}

/// Polls `cond` until it holds (30 s at most).
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stored_batches(addr: &str, host: &str) -> u64 {
    host_field(addr, host, "batches").and_then(|v| v.as_u64()).unwrap_or(0)
}

fn status_u64(addr: &str, path: &[&str]) -> u64 {
    let mut v = json(addr, "/api/v1/status");
    for p in path {
        v = v[*p].clone();
    }
    v.as_u64().unwrap_or_else(|| panic!("status {path:?} is {v}"))
}

/// Raw sample times of one series in a stopped server's data directory.
fn times(data: &Path, selector: &str) -> Vec<i64> {
    let out = Command::new(BIN).args(["query", selector, "--from", "0"]).arg("--data").arg(data).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().skip(1).map(|l| l.rsplit(',').nth(1).unwrap().parse().unwrap()).collect()
}

fn last_value(data: &Path, selector: &str) -> f64 {
    let out = Command::new(BIN).args(["query", selector, "--from", "0"]).arg("--data").arg(data).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().last().unwrap().rsplit(',').next().unwrap().parse().unwrap()
}

/// Every round the agent's collector took between its first and last
/// stored round is stored exactly once: the 100 ms grid has no holes except
/// rounds the collector itself reported missing, and the store never saw a
/// sample twice.
fn assert_complete(data: &Path, host: &str) {
    let t = times(data, &format!("node_load1{{host=\"{host}\"}}"));
    assert!(t.len() > 20, "only {} rounds stored", t.len());
    assert!(t.windows(2).all(|w| w[1] > w[0]));
    let span = (t[t.len() - 1] - t[0]) / 100_000_000 + 1;
    let holes = span - t.len() as i64;
    let missed = last_value(data, &format!("kansoku_collector_missed_rounds_total{{host=\"{host}\"}}"))
        + last_value(data, &format!("kansoku_collector_dropped_batches_total{{host=\"{host}\"}}"));
    assert!(
        holes as f64 <= missed,
        "{host}: {holes} rounds missing between the first and last stored, the collector missed {missed}"
    );
    let dropped = last_value(data, &format!("kansoku_agent_spool_dropped_samples_total{{host=\"{host}\"}}"));
    assert_eq!(dropped, 0.0, "{host}: the spool dropped samples");
}

/// Network namespace with a veth to the root namespace: the agent lives
/// inside, the server listens on the root side of the link.
struct Netns {
    name: String,
    outer: String,
}

const OUTER_IP: &str = "10.213.57.1";

impl Netns {
    fn new() -> Netns {
        let id = std::process::id() % 100_000;
        let name = format!("kansoku-ag{id}");
        let (outer, inner) = (format!("ksko{id}"), format!("kski{id}"));
        let ns = Netns { name: name.clone(), outer: outer.clone() };
        // Leftovers of an earlier run that was killed.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        let _ = Command::new("ip").args(["link", "del", &outer]).output();
        for args in [
            vec!["netns", "add", &name],
            vec!["link", "add", &outer, "type", "veth", "peer", "name", &inner],
            vec!["link", "set", &inner, "netns", &name],
            vec!["addr", "add", "10.213.57.1/30", "dev", &outer],
            vec!["link", "set", &outer, "up"],
            vec!["-n", &name, "addr", "add", "10.213.57.2/30", "dev", &inner],
            vec!["-n", &name, "link", "set", &inner, "up"],
            vec!["-n", &name, "link", "set", "lo", "up"],
        ] {
            let out = Command::new("ip").args(&args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        ns
    }

    fn link(&self, up: bool) {
        let st =
            Command::new("ip").args(["link", "set", &self.outer, if up { "up" } else { "down" }]).status().unwrap();
        assert!(st.success());
    }

    fn exec(&self, cmd: Command) -> Command {
        let mut wrapped = Command::new("ip");
        wrapped.args(["netns", "exec", &self.name]).arg(cmd.get_program()).args(cmd.get_args());
        wrapped
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.outer]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

#[test]
fn a_link_outage_loses_nothing_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let ns = Netns::new();
    let mut srv = server(&data, &format!("{OUTER_IP}:0"), &[]);
    let cmd = agent_cmd(&srv.ingest, &dir.path().join("agent"), "ns-agent", &["--ack-timeout", "2s"]);
    let mut ag = Proc::spawn("agent in netns", ns.exec(cmd));
    wait_for("first batches", || stored_batches(&srv.http, "ns-agent") >= 3);

    // Cut the link until the agent gives the connection up (its ack timeout
    // fires): it keeps sampling and spools meanwhile.
    ns.link(false);
    let before = stored_batches(&srv.http, "ns-agent");
    ag.wait_line("unacknowledged");
    assert_eq!(stored_batches(&srv.http, "ns-agent"), before, "data arrived through a downed link");
    ns.link(true);
    // The backlog arrives over a new connection; then live data again.
    srv.proc.wait_nth("resuming at", 2);
    wait_for("an empty backlog", || {
        host_field(&srv.http, "ns-agent", "backlog_batches").and_then(|v| v.as_f64()) == Some(0.0)
    });
    ag.stop();
    assert_eq!(status_u64(&srv.http, &["store", "late_samples"]), 0, "a sample reached the store twice");
    srv.proc.stop();
    assert_complete(&data, "ns-agent");
}

#[test]
fn a_server_killed_mid_stream_loses_no_acknowledged_sample() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    // The restarted server must take the first one's port, so the agent
    // finds it where it was: on a loopback address of this test's own, no
    // other test's listener or outgoing connection can hold that port
    // meanwhile (they all use 127.0.0.1).
    let own = format!("127.{}.{}.1:0", 100 + std::process::id() % 100, std::process::id() / 100 % 250);
    let mut srv = server(&data, &own, &[]);
    let ingest = srv.ingest.clone();
    // With kernel tracing: its histograms share the rounds' spool.
    let mut ag = agent(&ingest, &dir.path().join("agent"), "k9", &["--ack-timeout", "2s", "--trace", "500ms"]);
    wait_for("first batches", || stored_batches(&srv.http, "k9") >= 4);
    srv.proc.kill9();
    // While the server is down the agent spools; then a new server on the
    // same data takes over.
    let mut srv = server(&data, &ingest, &[]);
    wait_for("batches to the restarted server", || stored_batches(&srv.http, "k9") >= 4);
    ag.stop();
    assert_eq!(status_u64(&srv.http, &["store", "late_samples"]), 0, "a sample reached the store twice");
    srv.proc.stop();
    assert_complete(&data, "k9");
    // The kernel's histograms came with the rounds, every read stored once.
    let reads = times(&data, "kernel_syscall_seconds_count{host=\"k9\",syscall=\"futex\"}");
    assert!(reads.len() >= 4, "{} tracer reads stored", reads.len());
    assert!(reads.windows(2).all(|w| w[1] > w[0]));
    assert!(last_value(&data, "kansoku_trace_reads_total{host=\"k9\"}") >= reads.len() as f64);
    assert_eq!(last_value(&data, "kansoku_trace_dropped_batches_total{host=\"k9\"}"), 0.0);
}

/// An agent whose kernel refuses BPF (asked for with `--trace-counts`, the
/// mode it falls back to) ships the tracepoints' counts with its rounds.
#[test]
fn an_agent_without_bpf_ships_tracepoint_counts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let mut srv = server(&data, "127.0.0.1:0", &[]);
    let mut ag = agent(&srv.ingest, &dir.path().join("agent"), "counts", &["--trace", "200ms", "--trace-counts"]);
    let line = ag.wait_line("counting tracepoint events with perf_event_open instead");
    assert!(line.contains("not asked for") && line.contains("raw_syscalls:sys_enter"), "{line}");
    wait_for("batches", || stored_batches(&srv.http, "counts") >= 4);
    ag.stop();
    srv.proc.stop();
    let selector = "kernel_tracepoint_events_total{event=\"raw_syscalls:sys_enter\",host=\"counts\"}";
    let out = Command::new(BIN).args(["query", selector, "--from", "0"]).arg("--data").arg(&data).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let values: Vec<f64> = text.lines().skip(1).map(|l| l.rsplit(',').next().unwrap().parse().unwrap()).collect();
    assert!(values.len() >= 4, "{} reads stored:\n{text}", values.len());
    // The agent's own calls alone (spooling, sending) make them grow.
    assert!(values.windows(2).all(|w| w[1] > w[0]), "{values:?}");
    let out = Command::new(BIN).args(["series", "{host=\"counts\"}"]).arg("--data").arg(&data).output().unwrap();
    let series = String::from_utf8(out.stdout).unwrap();
    assert!(series.contains("kernel_tracepoint_events_total{event=\"sched:sched_switch\""), "{series}");
    assert!(!series.contains("kernel_syscall_seconds"), "histograms in counting mode:\n{series}");
}

fn hello(host: &str, token: &str) -> Vec<u8> {
    let mut out = Vec::new();
    Msg::Hello(Hello {
        version: wire::VERSION,
        host: host.into(),
        agent_version: "hostile".into(),
        spool_id: 1,
        token: token.into(),
        interval_ns: 100_000_000,
        batch_ns: 1_000_000_000,
    })
    .encode(&mut out);
    out
}

/// Sends `bytes`, then reads until the server closes; returns the reject reason.
fn hostile(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let (msgs, _) = wire::decode_all(&got, wire::FRAME_MAX).unwrap();
    match msgs.last() {
        Some(Msg::Reject { reason }) => reason.clone(),
        other => panic!("expected a reject, got {other:?}"),
    }
}

#[test]
fn hostile_clients_are_refused_and_agents_carry_on() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# agents\ngood-token-0123456789 good\nany-host-token-0123456789\n").unwrap();
    let token_file = dir.path().join("good.token");
    std::fs::write(&token_file, "good-token-0123456789\n").unwrap();
    for f in [&tokens, &token_file] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    }
    let tokens_arg = tokens.to_str().unwrap();
    let srv = server(&dir.path().join("server"), "127.0.0.1:0", &["--tokens", tokens_arg, "--max-frame", "65536"]);
    let _ag = agent(&srv.ingest, &dir.path().join("agent"), "good", &["--token-file", token_file.to_str().unwrap()]);
    wait_for("the good agent", || stored_batches(&srv.http, "good") >= 2);

    assert!(hostile(&srv.ingest, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").contains("bad hello"));
    assert!(hostile(&srv.ingest, &[0xff; 64]).contains("bad hello"));
    assert_eq!(hostile(&srv.ingest, &hello("evil", "wrong-token-0123456789")), "unknown token");
    assert_eq!(hostile(&srv.ingest, &hello("evil", "good-token-0123456789")), "token not valid for this host");
    assert_eq!(
        hostile(&srv.ingest, &hello("", "any-host-token-0123456789")),
        "host name empty or longer than 253 bytes"
    );
    // Authenticated, then an oversized frame and then garbage.
    let mut big = hello("other", "any-host-token-0123456789");
    big.extend_from_slice(&(1u32 << 30).to_le_bytes());
    big.extend_from_slice(&[0; 4]);
    assert!(hostile(&srv.ingest, &big).contains("exceeds the limit"));
    let mut bad = hello("other", "any-host-token-0123456789");
    let mut rounds = Vec::new();
    Msg::Rounds { seq: 1, body: vec![2, 200, 1, 0xde, 0xad] }.encode(&mut rounds);
    bad.extend_from_slice(&rounds);
    assert!(hostile(&srv.ingest, &bad).contains("batch 1"));

    let st = json(&srv.http, "/api/v1/status");
    assert!(st["ingest"]["rejected_auth"].as_u64().unwrap() >= 2, "{st}");
    assert!(st["ingest"]["rejected_protocol"].as_u64().unwrap() >= 3, "{st}");
    assert!(st["ingest"]["rejected_limits"].as_u64().unwrap() >= 1, "{st}");
    // The good agent was not disturbed.
    let before = stored_batches(&srv.http, "good");
    wait_for("the good agent after the attacks", || stored_batches(&srv.http, "good") >= before + 2);
    assert_eq!(host_field(&srv.http, "good", "state").unwrap(), "live");
    // And nothing of the hostile hosts was stored.
    let series = json(&srv.http, &format!("/api/v1/series?match={}", enc("{host=~\"evil|other\"}")));
    assert_eq!(series["series"].as_array().map_or(0, Vec::len), 0, "{series}");
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").current_dir(dir).args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn tls_with_client_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").unwrap();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=kansoku test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    for name in ["server", "agent"] {
        openssl(
            d,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }
    let p = |f: &str| d.join(f).to_str().unwrap().to_owned();
    let srv = server(
        &d.join("server-data"),
        "127.0.0.1:0",
        &["--tls-cert", &p("server.pem"), "--tls-key", &p("server.key"), "--client-ca", &p("ca.pem")],
    );
    let port = srv.ingest.rsplit(':').next().unwrap();
    let url = format!("tls://localhost:{port}");
    let _good = agent(
        &url,
        &d.join("a1"),
        "tls-agent",
        &["--ca", &p("ca.pem"), "--cert", &p("agent.pem"), "--key", &p("agent.key")],
    );
    wait_for("the TLS agent", || stored_batches(&srv.http, "tls-agent") >= 2);
    // Without a client certificate the handshake fails and nothing is stored.
    let mut anon = agent(&url, &d.join("a2"), "anonymous", &["--ca", &p("ca.pem")]);
    anon.wait_line("retrying");
    wait_for("the refusal to be counted", || status_u64(&srv.http, &["ingest", "rejected_auth"]) >= 1);
    assert_eq!(stored_batches(&srv.http, "anonymous"), 0);
    // Plain TCP to a TLS port is refused too.
    let mut plain = agent(&srv.ingest, &d.join("a3"), "plain", &[]);
    plain.wait_line("retrying");
    assert_eq!(stored_batches(&srv.http, "plain"), 0);
}

#[test]
fn twenty_agents_on_one_server() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("server"), "127.0.0.1:0", &[]);
    let names: Vec<String> = (0..20).map(|i| format!("node-{i:02}")).collect();
    let _agents: Vec<Proc> = names.iter().map(|n| agent(&srv.ingest, &dir.path().join(n), n, &[])).collect();
    let live = || hosts(&srv.http).iter().filter(|h| h["state"] == "live").count();
    let deadline = Instant::now() + Duration::from_secs(60);
    while live() < 20 {
        assert!(Instant::now() < deadline, "not all 20 hosts live in 60 s: {:#?}", hosts(&srv.http));
        std::thread::sleep(Duration::from_millis(100));
    }
    for h in hosts(&srv.http) {
        assert!(h["clock_offset_ns"].is_i64() || h["batches"].as_u64() > Some(0), "{h}");
    }
    for n in &names {
        let series = json(&srv.http, &format!("/api/v1/series?match={}", enc(&format!("node_load1{{host=\"{n}\"}}"))));
        assert_eq!(series["series"].as_array().unwrap().len(), 1, "{n}: {series}");
    }
    assert_eq!(status_u64(&srv.http, &["ingest", "unknown_series"]), 0);
}

/// An HTTP/1.1 server that answers every request `ok` and counts them: the
/// oracle of the agents' load. Keep-alive; one thread per connection.
fn counting_http_server() -> (String, Arc<std::sync::atomic::AtomicU64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let counted = Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        counted.fetch_add(1, Ordering::SeqCst);
                        if conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").is_err() {
                            return;
                        }
                    }
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    (addr, count)
}

/// `kansoku lab load --agents`: the server hands two agents one start
/// instant; their reports come back whole and merge to exactly the requests
/// the target answered. An agent that did not opt in with `--jobs load` is
/// named, and then no agent runs anything.
#[test]
fn agents_load_one_target_from_one_instant() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let srv = server(&dir.path().join("server"), "127.0.0.1:0", &[]);
    let (target, answered) = counting_http_server();
    let allow = ["--jobs", "load", "--load-allow", &target];
    let _a = agent(&srv.ingest, &dir.path().join("a"), "load-a", &allow);
    let _b = agent(&srv.ingest, &dir.path().join("b"), "load-b", &allow);
    let _c = agent(&srv.ingest, &dir.path().join("c"), "plain-c", &[]);
    let json_path = dir.path().join("load.json");
    let base = format!("http://{}", srv.http);
    let url = format!("http://{target}/");
    let load = |agents: &str, json: &Path| {
        let args = ["lab", "load", &url, "-c", "2", "-t", "1", "-d", "1s", "--interval", "100ms"];
        let extra = ["--agents", agents, "--server", &base, "--start-in", "500ms", "--run", "agents"];
        Command::new(BIN).args(args).args(extra).arg("--json").arg(json).output().unwrap()
    };
    // The server waits for both agents to connect and offer.
    let out = load("load-a,load-b", &json_path);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}\n{}", srv.proc.dump());
    // Results on stdout, progress on stderr.
    let results = String::from_utf8_lossy(&out.stdout);
    assert!(results.contains("first requests of the agents within"), "{results}\n{log}");
    let doc = common::read_json(&json_path);
    let agents = doc["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2, "{doc}");
    let responses = doc["result"]["responses"].as_u64().unwrap();
    let each: Vec<u64> = agents.iter().map(|a| a["result"]["responses"].as_u64().unwrap()).collect();
    assert!(each.iter().all(|&n| n > 0), "both agents loaded the target: {each:?}");
    assert_eq!(each.iter().sum::<u64>(), responses, "the merged result is the agents' sum");
    assert_eq!(answered.load(Ordering::SeqCst), responses, "the target answered exactly what was counted");
    let intervals: u64 =
        doc["result"]["intervals"].as_array().unwrap().iter().map(|i| i["responses"].as_u64().unwrap()).sum();
    assert_eq!(intervals, responses);
    for a in agents {
        // Never early: an agent waits for the instant on its own clock
        // (offsets on one machine are within the probes' round trip).
        let late = a["began_late_ms"].as_f64().unwrap();
        let rtt_ms = a["rtt_ns"].as_f64().unwrap() / 1e6;
        assert!(late >= -rtt_ms, "{a}");
    }
    // The merged intervals were stored, as for a run from here.
    let q = format!("/prometheus/api/v1/query?query={}", enc("sum_over_time(load_responses{run=\"agents\"}[1h])"));
    let (status, body) = http_get(&srv.http, &q);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1].as_str().unwrap().parse::<f64>().unwrap() as u64, responses);

    // An agent that takes no jobs: named, and nothing runs anywhere.
    let before = answered.load(Ordering::SeqCst);
    let out = load("load-a,plain-c", &dir.path().join("refused.json"));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(log.contains("\"plain-c\" does not take load jobs") && log.contains("--jobs load"), "{log}");
    assert_eq!(answered.load(Ordering::SeqCst), before, "no agent started");
    // Issue 42: a target the agents' operator did not allow is refused by
    // each agent, before it connects anywhere.
    let out = Command::new(BIN)
        .args(["lab", "load", "http://127.0.0.1:9/", "-d", "1s", "--agents", "load-a", "--server", &base])
        .args(["--start-in", "200ms", "--json"])
        .arg(dir.path().join("other.json"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && log.contains("not a target this agent's operator allows"), "{log}");
    let none = dir.path().join("none.json");
    let out = Command::new(BIN)
        .args(["lab", "load", &url, "-d", "1s", "--agents", "nobody", "--server", &base, "--agents-wait", "300ms"])
        .arg("--json")
        .arg(&none)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && log.contains("\"nobody\" is not connected (waited 300ms"), "{log}");
    assert!(!none.exists());
}

/// An agent runs the producers `up` runs, from the same flags: SNMP targets
/// (a fake agent farm on loopback) and a fragmentation scan ship beside its
/// host's rounds, stored on the server under the agent's host.
#[test]
fn an_agent_runs_what_up_runs_snmp_and_fragmentation_included() {
    use snmp::farm;
    let dir = tempfile::tempdir().unwrap();
    let ips = farm::ips(std::net::Ipv4Addr::new(127, 3, 1, 1), 2);
    let farm = farm::Farm::start(0, ips.into_iter().map(|ip| (ip, farm::Fault::None)).collect(), 1).unwrap();
    let targets = dir.path().join("targets");
    std::fs::write(&targets, format!("{} v2c rack=r1\n{} v2c\n", farm.addrs[0], farm.addrs[1])).unwrap();
    let scanned = dir.path().join("scanned");
    std::fs::create_dir(&scanned).unwrap();
    std::fs::write(scanned.join("f"), vec![7u8; 1 << 20]).unwrap();
    let data = dir.path().join("server");
    let mut srv = server(&data, "127.0.0.1:0", &[]);
    let (t, s) = (targets.to_str().unwrap(), scanned.to_str().unwrap());
    let mut ag = agent(&srv.ingest, &dir.path().join("agent"), "both", &["--snmp-targets", t, "--fragmentation", s]);
    wait_for("batches", || stored_batches(&srv.http, "both") >= 4);
    ag.stop();
    srv.proc.stop();
    let out = Command::new(BIN).args(["series", "{host=\"both\"}"]).arg("--data").arg(&data).output().unwrap();
    let series = String::from_utf8(out.stdout).unwrap();
    assert!(series.contains("node_load1{host=\"both\"}"), "the host collector:\n{series}");
    assert!(series.contains("kansoku_fragmentation_"), "the fragmentation scan:\n{series}");
    let snmp = Command::new(BIN).args(["series", "{rack=\"r1\"}"]).arg("--data").arg(&data).output().unwrap();
    let snmp = String::from_utf8(snmp.stdout).unwrap();
    assert!(snmp.lines().any(|l| l.contains(&farm.addrs[0].to_string())), "the SNMP target's series:\n{snmp}");
}
