//! HTTP load that tells the truth — the load generator seed 004
//! (`seeds/004_54fe8b3ff29a2f4d.txt`) wished ApacheBench were: closed loop
//! (N connections, each sending its next request when the last is answered)
//! or open loop at a constant rate with coordinated omission corrected (a
//! request's latency counts from when it was meant to leave, as wrk2 does,
//! so a stalled server cannot hide behind the requests it delayed);
//! keep-alive on or off; latencies in HDR histograms, and per 100 ms the
//! responses, failures, bytes and percentiles, so peaks show instead of
//! averages; bodies of any size streamed and counted, never held; 64-bit
//! counters throughout. Worker threads each run a single-threaded tokio
//! runtime with their share of the connections, as wrk runs an event loop
//! per thread.
//!
//! HTTP/2 is h2c, through the `h2` crate. Responses are read by our own
//! HTTP/1.1 reader (`http::ResponseReader`: the head by `httparse`, the
//! body's framing followed and counted, never buffered; fuzzed) into HDR
//! histograms from the intended and the actual send, and per-interval figures
//! (`record::{Recorder, Summary}`). A run's whole measurements travel as
//! bytes, for an agent's job to send back and merge exactly
//! (`report::Report`, docs/format/load.md; fuzzed); an agent's load job is
//! typed `key=value` fields, run only at targets its operator allows and
//! within bounds (`job::Spec`, `JobPolicy`).

pub mod http;
pub mod job;
pub mod record;
pub mod report;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use record::{Failure, Failures, Recorder, Summary};
pub use report::{Report, ReportError};

/// Where the load goes: `http://host[:port][/path]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The `Host` header.
    pub host: String,
    pub addr: SocketAddr,
    pub path: String,
}

/// A header line given as `Name: value`: checked, so a request is never
/// malformed by it.
pub fn parse_header(s: &str) -> Result<String, String> {
    let (name, value) = s.split_once(':').ok_or_else(|| format!("{s:?}: a header is Name: value"))?;
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(format!("{s:?}: {name:?} is not a header name"));
    }
    if value.chars().any(|c| c == '\r' || c == '\n') {
        return Err(format!("{s:?}: a header value is one line"));
    }
    Ok(format!("{name}: {}", value.trim()))
}

impl Target {
    /// Parses and resolves a URL; `https` and other schemes are refused.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url:?}: give an http:// URL (https is not supported by this load generator yet)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("{url:?}: no host"));
        }
        let with_port = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("{url:?}: cannot resolve {authority}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url:?}: {authority} has no address"))?;
        Ok(Target { host: authority.to_owned(), addr, path: path.to_owned() })
    }
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct Config {
    pub target: Target,
    /// Extra request headers (`Name: value`, checked by [`parse_header`]).
    pub headers: Vec<String>,
    /// Connections open at once (each one request at a time).
    pub connections: usize,
    /// Worker threads the connections are spread over.
    pub threads: usize,
    pub duration: Duration,
    /// Open loop: requests per second in total, each connection taking its
    /// share of the schedule. None: closed loop.
    pub rate: Option<f64>,
    /// Keep connections open between requests (else one connection per
    /// request, `Connection: close`, its connect counted in the latency).
    pub keep_alive: bool,
    /// HTTP/2 over cleartext TCP, prior knowledge (h2c): each connection
    /// one stream at a time, by the `h2` crate.
    pub http2: bool,
    /// HTTP/2: requests in flight on each connection at once (streams),
    /// each its own closed or open loop. 1 for HTTP/1.1.
    pub streams: usize,
    /// A request without its whole response after this long fails.
    pub timeout: Duration,
    /// The resolution of the per-interval figures.
    pub interval: Duration,
}

/// Intervals of per-interval figures one run may keep (`--interval 1ns`
/// over 10 s asked for ten billion).
pub const INTERVALS_MAX: u128 = 1_000_000;

impl Config {
    /// Refuses settings no run can hold: more per-interval figures than
    /// [`INTERVALS_MAX`], a zero interval or connection count.
    pub fn check(&self) -> Result<(), String> {
        if self.interval.is_zero() || self.connections == 0 || self.threads == 0 {
            return Err("the interval, connections and threads must be above zero".into());
        }
        let n = self.duration.as_nanos() / self.interval.as_nanos();
        if n > INTERVALS_MAX {
            return Err(format!(
                "--interval {:?} over -d {:?} makes {n} intervals; at most {INTERVALS_MAX}: lengthen the interval",
                self.interval, self.duration
            ));
        }
        Ok(())
    }
}

/// What a load job an agent takes from the server may ask: the agent's
/// operator names the targets (`kansoku agent --jobs load --load-allow
/// 10.0.0.5:8080`), and the settings are bounded, so a server (or anyone
/// holding a writing token) cannot aim an agent anywhere or make it
/// exhaust itself.
#[derive(Clone, Debug, Default)]
pub struct JobPolicy {
    /// Addresses a job may load: an IP with a port, or with `*` for any.
    pub allow: Vec<(std::net::IpAddr, Option<u16>)>,
}

/// Bounds of a load job's settings.
pub const JOB_CONNECTIONS_MAX: usize = 10_000;
pub const JOB_THREADS_MAX: usize = 64;
pub const JOB_STREAMS_MAX: usize = 128;
pub const JOB_DURATION_MAX: Duration = Duration::from_secs(3600);
pub const JOB_TIMEOUT_MAX: Duration = Duration::from_secs(120);
pub const JOB_INTERVAL_MIN: Duration = Duration::from_millis(1);
pub const JOB_RATE_MAX: f64 = 10_000_000.0;

impl JobPolicy {
    /// Parses `IP:PORT` or `IP:*` (IPv6 in brackets: `[::1]:80`).
    pub fn parse_allow(s: &str) -> Result<(std::net::IpAddr, Option<u16>), String> {
        let (ip, port) = s.rsplit_once(':').ok_or_else(|| format!("{s:?}: give IP:PORT or IP:*"))?;
        let ip = ip.trim_start_matches('[').trim_end_matches(']');
        let ip: std::net::IpAddr = ip.parse().map_err(|_| format!("{s:?}: {ip:?} is not an IP address"))?;
        let port = match port {
            "*" => None,
            p => Some(p.parse::<u16>().map_err(|_| format!("{s:?}: {p:?} is not a port"))?),
        };
        Ok((ip, port))
    }

    /// Whether a job of `cfg` may run here; the error says what is not allowed.
    pub fn check(&self, cfg: &Config) -> Result<(), String> {
        cfg.check()?;
        let a = cfg.target.addr;
        if !self.allow.iter().any(|&(ip, port)| ip == a.ip() && port.is_none_or(|p| p == a.port())) {
            return Err(format!("{a} is not a target this agent's operator allows (kansoku agent --load-allow)"));
        }
        let over = |what: &str, max: String| Err(format!("{what} past this agent's bound for load jobs ({max})"));
        if cfg.connections > JOB_CONNECTIONS_MAX {
            return over("connections", JOB_CONNECTIONS_MAX.to_string());
        }
        if cfg.threads > JOB_THREADS_MAX {
            return over("threads", JOB_THREADS_MAX.to_string());
        }
        if cfg.streams > JOB_STREAMS_MAX {
            return over("streams", JOB_STREAMS_MAX.to_string());
        }
        if cfg.duration > JOB_DURATION_MAX {
            return over("duration", format!("{JOB_DURATION_MAX:?}"));
        }
        if cfg.timeout > JOB_TIMEOUT_MAX {
            return over("timeout", format!("{JOB_TIMEOUT_MAX:?}"));
        }
        if cfg.interval < JOB_INTERVAL_MIN {
            return over("an interval this short", format!("at least {JOB_INTERVAL_MIN:?}"));
        }
        if cfg.rate.is_some_and(|r| !(r > 0.0 && r <= JOB_RATE_MAX)) {
            return over("rate", format!("{JOB_RATE_MAX} a second"));
        }
        Ok(())
    }
}

/// Counts shared with whoever shows progress: a slot per worker thread
/// (each on its own cache line, written only by its thread), summed when
/// read, so progress costs the workers no contended writes.
#[derive(Debug)]
pub struct Progress {
    slots: [Slot; 64],
}

impl Default for Progress {
    fn default() -> Progress {
        Progress { slots: std::array::from_fn(|_| Slot::default()) }
    }
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Slot {
    responses: AtomicU64,
    failures: AtomicU64,
}

impl Progress {
    /// Responses so far.
    pub fn responses(&self) -> u64 {
        self.slots.iter().map(|s| s.responses.load(Relaxed)).sum()
    }

    /// Failed requests so far.
    pub fn failures(&self) -> u64 {
        self.slots.iter().map(|s| s.failures.load(Relaxed)).sum()
    }

    /// Thread `t`'s totals.
    fn publish(&self, t: usize, r: &Recorder) {
        let slot = &self.slots[t % self.slots.len()];
        slot.responses.store(r.responses, Relaxed);
        slot.failures.store(r.failures.total(), Relaxed);
    }
}

/// What a run measured.
#[derive(Debug)]
pub struct Outcome {
    /// The instant the load began (requests' times count from it).
    pub start: Instant,
    pub recorder: Recorder,
    /// From the start to the last response.
    pub elapsed: Duration,
}

impl Outcome {
    pub fn responses_per_second(&self) -> f64 {
        self.recorder.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs the load; `progress` is updated as responses arrive.
pub fn run(cfg: &Config, progress: &Arc<Progress>) -> std::io::Result<Outcome> {
    run_at(cfg, progress, Instant::now() + Duration::from_millis(20))
}

/// Runs the load with its first requests at `start` (the workers and their
/// connections are set up before it): several hosts given one instant
/// begin together.
pub fn run_at(cfg: &Config, progress: &Arc<Progress>, start: Instant) -> std::io::Result<Outcome> {
    if cfg.connections == 0 || cfg.threads == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "connections and threads must be at least 1",
        ));
    }
    if cfg.streams == 0 || (cfg.streams > 1 && !cfg.http2) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "streams: at least 1, and more than 1 only over HTTP/2",
        ));
    }
    if cfg.rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "the rate must be a positive number"));
    }
    let threads = cfg.threads.min(cfg.connections);
    let mut workers = Vec::with_capacity(threads);
    for t in 0..threads {
        // Connection k of `connections` goes to thread k % threads.
        let mine: Vec<usize> = (t..cfg.connections).step_by(threads).collect();
        let cfg = cfg.clone();
        let progress = Arc::clone(progress);
        workers.push(std::thread::Builder::new().name(format!("load-{t}")).spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let local = tokio::task::LocalSet::new();
            let rec = std::rc::Rc::new(std::cell::RefCell::new(Recorder::new(start, cfg.interval)));
            let cfg = std::rc::Rc::new(cfg);
            let last = std::rc::Rc::new(std::cell::Cell::new(start));
            for k in mine {
                // The connection's streams share its HTTP/2 session.
                let shared: H2Shared = std::rc::Rc::default();
                for s in 0..cfg.streams {
                    local.spawn_local(connection(
                        k * cfg.streams + s,
                        std::rc::Rc::clone(&cfg),
                        start,
                        std::rc::Rc::clone(&rec),
                        (t, Arc::clone(&progress)),
                        (std::rc::Rc::clone(&last), std::rc::Rc::clone(&shared)),
                    ));
                }
            }
            rt.block_on(local);
            let rec = rec.borrow().clone();
            Ok::<_, std::io::Error>((rec, last.get()))
        })?);
    }
    let mut total = Recorder::new(start, cfg.interval);
    let mut last = start;
    for w in workers {
        let (rec, l) = w.join().map_err(|_| std::io::Error::other("a load worker panicked"))??;
        total.merge(&rec);
        last = last.max(l);
    }
    let elapsed = last.saturating_duration_since(start).max(Duration::from_nanos(1));
    Ok(Outcome { start, recorder: total, elapsed })
}

/// A precise one-shot timer: a timerfd (the kernel's high-resolution
/// timer, microseconds late at most) polled by the runtime. tokio's own
/// timer ticks in milliseconds: in open loop its lateness would count as
/// the server's latency.
struct Precise(tokio::io::unix::AsyncFd<Tfd>);

struct Tfd(nix::sys::timerfd::TimerFd);

impl std::os::fd::AsRawFd for Tfd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsFd;
        self.0.as_fd().as_raw_fd()
    }
}

impl Precise {
    fn new() -> std::io::Result<Precise> {
        use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)?;
        // `register` is the undeprecated way, but `unsafe`; the hazard it
        // guards against (the fd closed while registered) cannot happen
        // here: the AsyncFd owns the TimerFd and drops it last.
        #[allow(deprecated, reason = "AsyncFd owns the fd it registers; see above")]
        let fd = tokio::io::unix::AsyncFd::new(Tfd(fd))?;
        Ok(Precise(fd))
    }

    async fn sleep_until(&self, at: Instant) -> std::io::Result<()> {
        use nix::sys::time::TimeSpec;
        use nix::sys::timerfd::{Expiration, TimerSetTimeFlags};
        let now = Instant::now();
        if at <= now {
            return Ok(());
        }
        let left = TimeSpec::from_duration(at - now);
        self.0.get_ref().0.set(Expiration::OneShot(left), TimerSetTimeFlags::empty())?;
        loop {
            let mut ready = self.0.readable().await?;
            match ready.get_inner().0.wait() {
                Ok(()) => return Ok(()),
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A connection's read buffer: bytes `lo..hi` are read and not yet used.
struct Buf {
    bytes: Vec<u8>,
    lo: usize,
    hi: usize,
}

/// One connection's requests until the run ends.
async fn connection(
    k: usize,
    cfg: std::rc::Rc<Config>,
    start: Instant,
    rec: std::rc::Rc<std::cell::RefCell<Recorder>>,
    (thread, progress): (usize, Arc<Progress>),
    (last, h2conn): (std::rc::Rc<std::cell::Cell<Instant>>, H2Shared),
) {
    let end = start + cfg.duration;
    let request = http::request(&cfg.target.host, &cfg.target.path, &cfg.headers, cfg.keep_alive);
    // The HTTP/2 request's URI and headers, made once: each request clones them.
    let h2head = if cfg.http2 { h2_head(&cfg) } else { None };
    let mut stream: Option<TcpStream> = None;
    let mut buf = Buf { bytes: vec![0; http::HEAD_MAX], lo: 0, hi: 0 };
    // The start to the microsecond: hosts given one instant begin together
    // (tokio's timer, to the millisecond, where no timerfd can be had).
    let timer = Precise::new().ok();
    match &timer {
        Some(t) if t.sleep_until(start).await.is_ok() => {}
        _ => tokio::time::sleep_until(start.into()).await,
    }
    // Open loop: sends on time to the microsecond, by the same timer.
    let timer = if cfg.rate.is_some() { timer } else { None };
    let deadline = tokio::time::sleep_until((start + cfg.timeout).into());
    // Request loops in the run: each connection's streams.
    let loops = (cfg.connections * cfg.streams) as u64;
    tokio::pin!(deadline);
    for i in 0u64.. {
        // Open loop: request k + i·C of the run's schedule, one every 1/rate.
        let scheduled = cfg.rate.map(|rate| start + Duration::from_secs_f64((k as u64 + i * loops) as f64 / rate));
        if let Some(at) = scheduled {
            if at >= end {
                break;
            }
            if at > Instant::now() {
                match &timer {
                    Some(t) if t.sleep_until(at).await.is_ok() => {}
                    _ => tokio::time::sleep_until(at.into()).await,
                }
            }
        }
        let sent = Instant::now();
        if scheduled.is_none() && sent >= end {
            break;
        }
        // Closed loop: a request is meant to leave when it leaves.
        let intended = scheduled.unwrap_or(sent);
        // One timer per connection, moved for each request (a new timeout
        // future per request would register and drop a timer every time).
        deadline.as_mut().reset((sent + cfg.timeout).into());
        let outcome = tokio::select! {
            biased;
            r = async {
                if cfg.http2 {
                    exchange_h2(&h2conn, h2head.as_ref().ok_or(Failure::Protocol)?, &cfg, &rec).await
                } else {
                    exchange(&mut stream, &mut buf, &request, &cfg, &rec).await.map(|r| (r.status, r.body_bytes, r.wire_bytes))
                }
            } => r,
            () = &mut deadline => Err(Failure::Timeout),
        };
        let done = Instant::now();
        last.set(last.get().max(done));
        let failed = {
            let mut r = rec.borrow_mut();
            let failed = match outcome {
                Ok((status, body, wire)) => {
                    r.response(intended, sent, done, status, body, wire);
                    false
                }
                Err(kind) => {
                    r.failure(kind, done);
                    (stream, buf.lo, buf.hi) = (None, 0, 0);
                    true
                }
            };
            progress.publish(thread, &r);
            failed
        };
        if failed && cfg.http2 {
            // A new session for the next request (of any of its streams).
            *h2conn.lock().await = None;
        }
        if failed && cfg.rate.is_none() && stream.is_none() {
            // Closed loop: a refused or broken connection is retried after
            // a pause, not in a spin that floods the server (and the count).
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// An HTTP/2 request's URI and headers.
type H2Head = (::http::Uri, ::http::HeaderMap);

/// The URI and headers every HTTP/2 request of the run carries (None if
/// they do not make a valid request: each request then fails as protocol).
fn h2_head(cfg: &Config) -> Option<H2Head> {
    let uri: ::http::Uri = format!("http://{}{}", cfg.target.host, cfg.target.path).parse().ok()?;
    let mut headers = ::http::HeaderMap::new();
    for h in &cfg.headers {
        let (name, value) = h.split_once(':')?;
        headers.append(
            ::http::header::HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            ::http::HeaderValue::from_str(value.trim()).ok()?,
        );
    }
    headers.insert(::http::header::USER_AGENT, ::http::HeaderValue::from_static("kansoku-load"));
    Some((uri, headers))
}

/// How long a closed-loop request loop waits after a failure before it
/// tries again.
pub const RETRY_PAUSE: Duration = Duration::from_millis(10);

/// A connection's HTTP/2 session, shared by its streams (None until made,
/// and after it failed).
type H2Shared = std::rc::Rc<tokio::sync::Mutex<Option<h2::client::SendRequest<bytes::Bytes>>>>;

/// One HTTP/2 request and its whole response on the connection `conn`
/// (made first when there is none; its driver runs as a task of its own):
/// (status, body bytes, 0 — frames are not counted on the wire).
async fn exchange_h2(
    conn: &H2Shared,
    head: &H2Head,
    cfg: &Config,
    rec: &std::cell::RefCell<Recorder>,
) -> Result<(u16, u64, u64), Failure> {
    let mut session = conn.lock().await;
    if session.is_none() {
        let tcp = TcpStream::connect(cfg.target.addr).await.map_err(|_| Failure::Connect)?;
        let _ = tcp.set_nodelay(true);
        let (send, driver) = h2::client::handshake(tcp).await.map_err(|_| Failure::Protocol)?;
        tokio::task::spawn_local(async move {
            let _ = driver.await;
        });
        rec.borrow_mut().connects += 1;
        *session = Some(send);
    }
    let send = session.as_ref().expect("connected above").clone();
    drop(session);
    let mut send = send.ready().await.map_err(|_| Failure::Io)?;
    let mut req = ::http::Request::new(());
    *req.uri_mut() = head.0.clone();
    *req.headers_mut() = head.1.clone();
    let (resp, _) = send.send_request(req, true).map_err(|_| Failure::Io)?;
    let resp = resp.await.map_err(|_| Failure::Io)?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut bytes = 0u64;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|_| Failure::Io)?;
        bytes += chunk.len() as u64;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok((status, bytes, 0))
}

/// One request and its whole response, on `stream` (connected first when
/// there is none).
async fn exchange(
    stream: &mut Option<TcpStream>,
    buf: &mut Buf,
    request: &[u8],
    cfg: &Config,
    rec: &std::cell::RefCell<Recorder>,
) -> Result<http::ResponseReader, Failure> {
    if stream.is_none() {
        let s = TcpStream::connect(cfg.target.addr).await.map_err(|_| Failure::Connect)?;
        let _ = s.set_nodelay(true);
        rec.borrow_mut().connects += 1;
        *stream = Some(s);
        (buf.lo, buf.hi) = (0, 0);
    }
    let s = stream.as_mut().expect("connected above");
    s.write_all(request).await.map_err(|_| Failure::Io)?;
    let mut resp = http::ResponseReader::new();
    loop {
        let used = resp.feed(&buf.bytes[buf.lo..buf.hi]).map_err(|_| Failure::Protocol)?;
        buf.lo += used;
        if resp.done() {
            break;
        }
        if buf.lo == buf.hi {
            (buf.lo, buf.hi) = (0, 0);
        } else if buf.hi == buf.bytes.len() {
            // A head split across reads: keep it at the front.
            buf.bytes.copy_within(buf.lo..buf.hi, 0);
            (buf.lo, buf.hi) = (0, buf.hi - buf.lo);
        }
        let n = s.read(&mut buf.bytes[buf.hi..]).await.map_err(|_| Failure::Io)?;
        if n == 0 {
            resp.eof().map_err(|_| Failure::Io)?;
            break;
        }
        buf.hi += n;
    }
    if !resp.keep_alive || !cfg.keep_alive {
        *stream = None;
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_or_say_why_not() {
        let t = Target::parse("http://127.0.0.1:8080/a/b?c=1").unwrap();
        assert_eq!((t.host.as_str(), t.addr.port(), t.path.as_str()), ("127.0.0.1:8080", 8080, "/a/b?c=1"));
        let t = Target::parse("http://127.0.0.1").unwrap();
        assert_eq!((t.addr.port(), t.path.as_str()), (80, "/"));
        assert!(Target::parse("https://127.0.0.1/").unwrap_err().contains("https is not supported"));
        assert!(Target::parse("http:///x").unwrap_err().contains("no host"));
        assert!(Target::parse("http://no.such.host.invalid/").unwrap_err().contains("cannot resolve"));
        assert_eq!(parse_header("Accept-Encoding:  gzip ").unwrap(), "Accept-Encoding: gzip");
        assert!(parse_header("no colon").unwrap_err().contains("Name: value"));
        assert!(parse_header("a b: c").unwrap_err().contains("not a header name"));
        assert!(parse_header("X: a\r\nY: b").unwrap_err().contains("one line"));
    }

    fn job(url: &str) -> Config {
        Config {
            target: Target::parse(url).unwrap(),
            headers: Vec::new(),
            connections: 10,
            threads: 1,
            duration: Duration::from_secs(10),
            rate: None,
            keep_alive: true,
            http2: false,
            streams: 1,
            timeout: Duration::from_secs(5),
            interval: Duration::from_millis(100),
        }
    }

    /// Issue 42: a job with `--interval 1ns` ended the agent (2.8 GB), and
    /// any writing token could aim agents at any address. An agent loads
    /// only what its operator allows, within bounds.
    #[test]
    fn a_load_job_runs_only_on_allowed_targets_within_bounds() {
        let policy = JobPolicy {
            allow: vec![JobPolicy::parse_allow("127.0.0.1:8080").unwrap(), JobPolicy::parse_allow("[::1]:*").unwrap()],
        };
        assert_eq!(policy.check(&job("http://127.0.0.1:8080/x")), Ok(()));
        assert_eq!(policy.check(&job("http://[::1]:9/")), Ok(()));
        assert!(policy.check(&job("http://127.0.0.1:8081/")).unwrap_err().contains("not a target"));
        assert!(policy.check(&job("http://127.0.0.2:8080/")).unwrap_err().contains("--load-allow"));
        assert!(JobPolicy::default().check(&job("http://127.0.0.1:8080/")).is_err(), "nothing allowed by default");
        type Change = fn(&mut Config);
        let bad: [(Change, &str); 6] = [
            (|c| c.interval = Duration::from_nanos(1), "intervals"),
            (|c| c.connections = JOB_CONNECTIONS_MAX + 1, "connections"),
            (|c| c.threads = 1000, "threads"),
            (|c| c.duration = Duration::from_secs(86_400), "duration"),
            (|c| c.rate = Some(f64::INFINITY), "rate"),
            (|c| c.timeout = Duration::from_secs(3600), "timeout"),
        ];
        for (change, want) in bad {
            let mut c = job("http://127.0.0.1:8080/");
            change(&mut c);
            let e = policy.check(&c).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert!(JobPolicy::parse_allow("localhost:80").is_err());
        assert!(JobPolicy::parse_allow("127.0.0.1").is_err());
    }
}
