//! A load job as a server hands it to an agent (`kansoku lab load
//! --agents`): a typed [`Spec`], carried as `key=value` fields (the strings
//! of `wire::Msg::Job`), read back here with no command-line parser, and
//! run ([`run`]) only within the agent operator's [`JobPolicy`]. What
//! comes back is the encoded [`Report`]; the coordinator merges them.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::{Config, JobPolicy, Progress, Report, Target, parse_header};

/// What one agent is asked to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub url: String,
    /// Extra request headers, `Name: value` (checked by [`parse_header`]).
    pub headers: Vec<String>,
    pub connections: usize,
    /// Worker threads; `None`: one per core of the agent.
    pub threads: Option<usize>,
    pub duration: Duration,
    /// Open loop at this many requests per second in all; `None`: closed.
    pub rate: Option<f64>,
    pub keep_alive: bool,
    pub http2: bool,
    pub streams: usize,
    pub timeout: Duration,
    pub interval: Duration,
}

impl Spec {
    /// The fields as `key=value` strings, in a fixed order.
    pub fn to_fields(&self) -> Vec<String> {
        let mut out = vec![
            format!("url={}", self.url),
            format!("connections={}", self.connections),
            format!("duration_ns={}", self.duration.as_nanos()),
            format!("keep_alive={}", u8::from(self.keep_alive)),
            format!("http2={}", u8::from(self.http2)),
            format!("streams={}", self.streams),
            format!("timeout_ns={}", self.timeout.as_nanos()),
            format!("interval_ns={}", self.interval.as_nanos()),
        ];
        if let Some(t) = self.threads {
            out.push(format!("threads={t}"));
        }
        if let Some(r) = self.rate {
            out.push(format!("rate={r}"));
        }
        out.extend(self.headers.iter().map(|h| format!("header={h}")));
        out
    }

    /// Reads [`Spec::to_fields`]'s strings back; an unknown key, a missing
    /// one or a value that does not parse is an error naming it.
    pub fn from_fields(fields: &[String]) -> Result<Spec, String> {
        let mut spec = Spec {
            url: String::new(),
            headers: Vec::new(),
            connections: 0,
            threads: None,
            duration: Duration::ZERO,
            rate: None,
            keep_alive: true,
            http2: false,
            streams: 1,
            timeout: Duration::from_secs(10),
            interval: Duration::from_millis(100),
        };
        let mut seen = Vec::new();
        for f in fields {
            let (k, v) = f.split_once('=').ok_or_else(|| format!("job field {f:?}: give key=value"))?;
            let bad = |what: &str| format!("job field {k}={v:?}: {what}");
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad("not a whole number"));
            let ns = |v: &str| num(v).map(Duration::from_nanos);
            let flag = |v: &str| match v {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(bad("0 or 1")),
            };
            match k {
                "url" => spec.url = v.to_owned(),
                "connections" => spec.connections = num(v)? as usize,
                "threads" => spec.threads = Some(num(v)? as usize),
                "duration_ns" => spec.duration = ns(v)?,
                "rate" => spec.rate = Some(v.parse::<f64>().map_err(|_| bad("not a number"))?),
                "keep_alive" => spec.keep_alive = flag(v)?,
                "http2" => spec.http2 = flag(v)?,
                "streams" => spec.streams = num(v)? as usize,
                "timeout_ns" => spec.timeout = ns(v)?,
                "interval_ns" => spec.interval = ns(v)?,
                "header" => spec.headers.push(parse_header(v)?),
                _ => return Err(format!("job field {k:?} is not one a load job has")),
            }
            seen.push(k);
        }
        for needed in ["url", "connections", "duration_ns"] {
            if !seen.contains(&needed) {
                return Err(format!("the job has no {needed}"));
            }
        }
        Ok(spec)
    }

    /// The run's settings: the URL resolved here, threads one per core
    /// unless given.
    pub fn config(&self) -> Result<Config, String> {
        let threads = self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Ok(Config {
            target: Target::parse(&self.url)?,
            headers: self.headers.clone(),
            connections: self.connections,
            threads,
            duration: self.duration,
            rate: self.rate,
            keep_alive: self.keep_alive,
            http2: self.http2,
            streams: self.streams,
            timeout: self.timeout,
            interval: self.interval,
        })
    }
}

/// An agent's load job: the load of `fields` ([`Spec::to_fields`]) from
/// this host, if `policy` allows it, its first requests at `start_ns` on
/// this host's wall clock; the encoded [`Report`], or why it could not run,
/// in words.
pub fn run(policy: &JobPolicy, start_ns: i64, fields: &[String]) -> Result<Vec<u8>, String> {
    let spec = Spec::from_fields(fields)?;
    let cfg = spec.config()?;
    // The operator's allow-list and the bounds, before anything connects.
    policy.check(&cfg)?;
    std::net::TcpStream::connect_timeout(&cfg.target.addr, cfg.timeout)
        .map_err(|e| format!("{}: cannot connect to {}: {e}", spec.url, cfg.target.addr))?;
    // The start on this process's monotonic clock; at least 5 ms ahead for
    // the workers to set up. A job that arrived late starts late, and its
    // report says so (`began_ns`).
    let now_wall = clock::realtime_ns();
    let ahead = Duration::from_nanos(start_ns.saturating_sub(now_wall).max(5_000_000) as u64);
    let (wall0, t0) = (SystemTime::now(), Instant::now());
    let cpu0 = clock::process_cpu_ns();
    let out = crate::run_at(&cfg, &Arc::new(Progress::default()), t0 + ahead).map_err(|e| format!("the load: {e}"))?;
    let cpu_ns = clock::process_cpu_ns() - cpu0;
    let began = wall0 + out.start.saturating_duration_since(t0);
    let began_ns = began.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    Ok(Report { began_ns, elapsed: out.elapsed, cpu_ns, recorder: out.recorder }.encode())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            url: "http://127.0.0.1:8080/a?b=1".into(),
            headers: vec!["X-Run: 7".into()],
            connections: 20,
            threads: Some(2),
            duration: Duration::from_millis(1500),
            rate: Some(2500.5),
            keep_alive: false,
            http2: false,
            streams: 1,
            timeout: Duration::from_secs(3),
            interval: Duration::from_millis(50),
        }
    }

    /// A job's fields read back to the spec they were written from; what
    /// is not a load job's field is named, never parsed as a flag.
    #[test]
    fn fields_round_trip_and_anything_else_is_named() {
        assert_eq!(Spec::from_fields(&spec().to_fields()).unwrap(), spec());
        let closed = Spec { threads: None, rate: None, headers: Vec::new(), ..spec() };
        assert_eq!(Spec::from_fields(&closed.to_fields()).unwrap(), closed);
        let with = |extra: &str| {
            let mut f = spec().to_fields();
            f.push(extra.into());
            Spec::from_fields(&f)
        };
        assert!(with("--json=/tmp/x").unwrap_err().contains("not one a load job has"));
        assert!(with("connections=many").unwrap_err().contains("whole number"));
        assert!(with("header=X: a\r\nY: b").unwrap_err().contains("one line"));
        assert!(with("http2").unwrap_err().contains("key=value"));
        assert!(Spec::from_fields(&["url=http://x/".into()]).unwrap_err().contains("no connections"));
    }

    /// The policy is held before anything connects: a target the operator
    /// did not allow, or settings past the bounds, are refused by name.
    #[test]
    fn a_job_outside_the_policy_is_refused_before_it_connects() {
        let policy = JobPolicy { allow: vec![JobPolicy::parse_allow("127.0.0.1:9").unwrap()] };
        let refused = run(&policy, 0, &spec().to_fields()).unwrap_err();
        assert!(refused.contains("not a target this agent's operator allows"), "{refused}");
        let tight = Spec { url: "http://127.0.0.1:9/".into(), interval: Duration::from_nanos(1), ..spec() };
        assert!(run(&policy, 0, &tight.to_fields()).unwrap_err().contains("intervals"));
    }
}
