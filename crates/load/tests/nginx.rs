//! The load generator against a real nginx (Debian's, started here on a
//! port of its own): every response it counts is a line of nginx's access
//! log, and every body byte it counts is a byte nginx says it sent — with
//! keep-alive, without it, in open loop, for 512 B pages, chunked (gzip)
//! pages and a 1 GiB file streamed without holding it in memory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use load::{Config, Progress, Target};

struct Nginx {
    child: Child,
    port: u16,
    /// HTTP/2 over cleartext (prior knowledge).
    h2port: u16,
    log: std::path::PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port no other test takes meanwhile: below the ephemeral range.
fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = std::process::id().wrapping_mul(7919);
    loop {
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let port = 10_000 + (base.wrapping_add(k.wrapping_mul(104_729)) % 22_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn nginx(dir: &Path) -> Nginx {
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("small.html"), vec![b'k'; 512]).unwrap();
    std::fs::write(root.join("page.html"), "kansoku ".repeat(20_000)).unwrap();
    // A sparse 1 GiB file: nginx sends it with sendfile, we read it all.
    std::fs::File::create(root.join("huge.bin")).unwrap().set_len(1 << 30).unwrap();
    let port = free_port();
    let h2port = free_port();
    let log = dir.join("access.log");
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "user root;\nmaster_process off;\ndaemon off;\npid {d}/nginx.pid;\nerror_log stderr notice;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  log_format counted '$request_uri $status $body_bytes_sent $bytes_sent $server_protocol';\n  access_log {log} counted;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;\n\
               uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n  keepalive_requests 100000;\n\
               server {{\n    listen 127.0.0.1:{port};\n    listen 127.0.0.1:{h2port} http2;\n    root {root};\n\
                 location /gz/ {{ alias {root}/; gzip on; gzip_types *; gzip_min_length 0; }}\n  }}\n}}\n",
            d = dir.display(),
            log = log.display(),
            root = root.display(),
        ),
    )
    .unwrap();
    let child = Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nginx (Debian's nginx; scripts/deps.sh test installs it)");
    let mut n = Nginx { child, port, h2port, log };
    // Ready once it names its version: nginx logs that (a notice) after it
    // has opened its listening sockets. Its log is read to the end meanwhile.
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let stderr = n.child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = ready_tx.send(line.contains(": nginx/").then_some(()).ok_or(line));
        }
    });
    loop {
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => return n,
            Ok(Err(line)) if line.contains("[emerg]") => panic!("nginx did not start: {line}"),
            Ok(Err(_)) => {}
            Err(e) => panic!("nginx said nothing of starting on {port}: {e}"),
        }
    }
}

/// nginx's own count of the requests for `uri`, the body bytes it sent
/// (chunk framing included) and all bytes it sent (head too).
fn logged(n: &Nginx, uri: &str) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(&n.log).unwrap();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let protocol = if uri.contains("?h2") { "HTTP/2.0" } else { "HTTP/1.1" };
            (f.len() == 5 && f[0] == uri && f[1] == "200" && f[4] == protocol)
                .then(|| Some((f[2].parse::<u64>().ok()?, f[3].parse::<u64>().ok()?)))?
        })
        .fold((0, 0, 0), |(c, b, w), (body, all)| (c + 1, b + body, w + all))
}

/// What every request asks for: gzip, so nginx chunks `/gz/`.
const HEADERS: &[&str] = &["Accept-Encoding: gzip"];

fn run(n: &Nginx, uri: &str, connections: usize, rate: Option<f64>, keep_alive: bool, ms: u64) -> load::Outcome {
    let chunked = uri.starts_with("/gz/");
    let http2 = uri.contains("?h2");
    let cfg = Config {
        headers: HEADERS.iter().map(|h| (*h).to_owned()).collect(),
        target: Target::parse(&format!("http://127.0.0.1:{}{uri}", if http2 { n.h2port } else { n.port })).unwrap(),
        connections,
        threads: 2,
        duration: Duration::from_millis(ms),
        rate,
        http2,
        // `?h2m`: four streams on each connection at once.
        streams: if uri.ends_with("?h2m") { 4 } else { 1 },
        keep_alive,
        timeout: Duration::from_secs(30),
        interval: Duration::from_millis(100),
    };
    let out = load::run(&cfg, &Arc::new(Progress::default())).unwrap();
    let r = &out.recorder;
    assert_eq!(r.failures.total(), 0, "{uri}: {:?}", r.failures);
    assert_eq!(r.status[1], r.responses, "{uri}: all 200");
    let (count, body, all) = logged(n, uri);
    // Every byte on the wire; the body's own bytes where no chunk framing
    // is among them (nginx counts framing as body).
    // HTTP/2: frames are not counted on the wire (ours is 0), the bodies are.
    let ours = (r.responses, if chunked { body } else { r.body_bytes }, if http2 { all } else { r.wire_bytes });
    assert_eq!(
        ours,
        (count, body, all),
        "{uri}: ours, then nginx's access log:\n{}",
        std::fs::read_to_string(&n.log).unwrap().lines().rev().take(3).collect::<Vec<_>>().join("\n")
    );
    let per_interval: u64 = r.intervals.iter().map(|i| i.responses).sum();
    assert_eq!(per_interval, r.responses, "{uri}: the intervals add up");
    eprintln!(
        "{uri}: {} responses, {} body bytes, {:.0}/s, {} connections opened",
        r.responses,
        r.body_bytes,
        out.responses_per_second(),
        r.connects
    );
    out
}

#[test]
fn every_response_and_byte_as_nginx_logged_them() {
    let dir = tempfile::tempdir().unwrap();
    let n = nginx(dir.path());
    let out = run(&n, "/small.html?keepalive", 8, None, true, 1000);
    assert!(out.recorder.responses > 100 && out.recorder.connects == 8, "{:?}", out.recorder.connects);
    let out = run(&n, "/small.html?close", 4, None, false, 500);
    assert_eq!(out.recorder.connects, out.recorder.responses, "a connection per request");
    let out = run(&n, "/small.html?open", 4, Some(400.0), true, 1000);
    assert!((380..=400).contains(&out.recorder.responses), "{} of 400 scheduled", out.recorder.responses);
    // gzip: chunked bodies (their length unknown up front); nginx logs the
    // compressed bytes it sent, we count the chunks' data: equal.
    let out = run(&n, "/gz/page.html", 2, None, true, 500);
    let per = out.recorder.body_bytes / out.recorder.responses;
    assert!(per < 20_000, "{per} bytes a response: not compressed");
    // HTTP/2 (h2c): every response a line of HTTP/2.0 in nginx's log.
    let out = run(&n, "/small.html?h2", 4, None, true, 500);
    assert!(out.recorder.responses > 100 && out.recorder.connects == 4, "{:?}", out.recorder.connects);
    // Four streams at once on each of two connections: still two connections.
    let out = run(&n, "/small.html?h2m", 2, None, true, 500);
    assert!(out.recorder.responses > 100 && out.recorder.connects == 2, "{:?}", out.recorder.connects);
    // 1 GiB responses, streamed: our memory stays what it was.
    let before = high_water_kib();
    let out = run(&n, "/huge.bin", 1, None, true, 300);
    assert!(out.recorder.responses >= 1 && out.recorder.body_bytes == out.recorder.responses << 30);
    let grown = high_water_kib() - before;
    assert!(grown < 64 * 1024, "the process's peak memory grew {grown} KiB reading 1 GiB responses");
}

/// The process's peak resident memory (KiB).
fn high_water_kib() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
