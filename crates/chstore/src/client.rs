//! ClickHouse's HTTP interface, with nothing in between: a statement is the
//! body of a POST (or its `query` parameter, when the body carries rows in
//! RowBinary), the answer is text, and an error is the server's own
//! exception text with its code. Several addresses may be given: a request
//! that cannot reach one goes to the next, and the one that answered is
//! tried first next time.
//!
//! Why not a client crate: the maintained `clickhouse` crate describes rows
//! with `RowBinaryWithNamesAndTypes` and sends settings ClickHouse 18.16 does
//! not know; what kansoku sends is a handful of fixed statements and three
//! row layouts, which plain RowBinary over `ureq` carries exactly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Where the store lives: `clickhouse://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…]/DB`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// `host:port` of each HTTP interface to try, in order.
    pub hosts: Vec<String>,
    pub db: String,
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Target {
    /// Parses a `clickhouse://` URL; the error says what is wrong with it.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url.strip_prefix("clickhouse://").ok_or_else(|| {
            format!("{url:?}: expected clickhouse://HOST:PORT/DB (ClickHouse's HTTP port, 8123 by default)")
        })?;
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a), r),
            None => (None, rest),
        };
        let (hosts, db) = rest.split_once('/').ok_or_else(|| format!("{url:?}: no database: add /DB"))?;
        if db.is_empty() || !db.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("{url:?}: database {db:?}: letters, digits and _ only"));
        }
        let hosts: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        for h in &hosts {
            let port = h.rsplit_once(':').map(|(_, p)| p);
            if port.is_none_or(|p| p.parse::<u16>().is_err()) || h.starts_with(':') {
                return Err(format!("{url:?}: {h:?} is not HOST:PORT"));
            }
        }
        let (user, password) = match auth {
            Some(a) => match a.split_once(':') {
                Some((u, p)) => (Some(u.to_owned()), Some(p.to_owned())),
                None => (Some(a.to_owned()), None),
            },
            None => (None, None),
        };
        Ok(Target { hosts, db: db.to_owned(), user, password })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No address answered; the last one's reason.
    #[error("ClickHouse unreachable at {hosts}: {reason}")]
    Unreachable { hosts: String, reason: String },
    /// ClickHouse answered with an exception (its text names the cause).
    #[error("ClickHouse at {host} refused {what}: {message}")]
    Refused { host: String, what: String, message: String },
    #[error("ClickHouse at {host}: {what}: unexpected answer: {message}")]
    Answer { host: String, what: String, message: String },
}

impl Error {
    /// ClickHouse's own error code, when it answered with one.
    pub fn code(&self) -> Option<u32> {
        let Error::Refused { message, .. } = self else { return None };
        let rest = message.strip_prefix("Code: ")?;
        rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }
}

#[derive(Debug)]
pub struct Client {
    target: Target,
    agent: ureq::Agent,
    /// The address that answered last.
    current: AtomicUsize,
    /// Numbers queries: `query_id` is `kansoku-PID-N`, to find this
    /// process's queries in `system.processes` and the query log.
    queries: std::sync::atomic::AtomicU64,
}

impl Client {
    pub fn new(target: Target, timeout: Duration) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(2)))
            .timeout_global(Some(timeout))
            .build()
            .into();
        Client { target, agent, current: AtomicUsize::new(0), queries: Default::default() }
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Runs `sql` and returns its answer as text (TabSeparated unless the
    /// statement says FORMAT).
    pub fn query(&self, sql: &str) -> Result<String, Error> {
        let bytes = self.post(&[], sql.as_bytes(), sql)?;
        String::from_utf8(bytes).map_err(|e| Error::Answer {
            host: self.target.hosts.join(","),
            what: short(sql),
            message: format!("not UTF-8: {e}"),
        })
    }

    /// Runs `sql` with ClickHouse settings as parameters; its answer as text.
    pub fn query_with(&self, sql: &str, settings: &[(&str, &str)]) -> Result<String, Error> {
        let bytes = self.post(settings, sql.as_bytes(), sql)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Runs `sql` and returns its answer as bytes (`FORMAT RowBinary`).
    pub fn query_bytes(&self, sql: &str) -> Result<Vec<u8>, Error> {
        self.post(&[], sql.as_bytes(), sql)
    }

    /// `INSERT INTO table FORMAT RowBinary` with `rows` as the body, and
    /// ClickHouse settings as parameters.
    pub fn insert(&self, table: &str, rows: &[u8], settings: &[(&str, &str)]) -> Result<(), Error> {
        let sql = format!("INSERT INTO {}.{table} FORMAT RowBinary", self.target.db);
        let mut params: Vec<(&str, &str)> = vec![("query", sql.as_str())];
        params.extend_from_slice(settings);
        self.post(&params, rows, &sql).map(drop)
    }

    fn post(&self, params: &[(&str, &str)], body: &[u8], what: &str) -> Result<Vec<u8>, Error> {
        let n = self.target.hosts.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut reason = String::new();
        let id = format!("kansoku-{}-{}", std::process::id(), self.queries.fetch_add(1, Ordering::Relaxed));
        for k in 0..n {
            let i = (first + k) % n;
            let host = &self.target.hosts[i];
            let mut req = self.agent.post(format!("http://{host}/")).query("query_id", &id);
            for (k, v) in params {
                req = req.query(*k, *v);
            }
            if let Some(u) = &self.target.user {
                req = req.header("X-ClickHouse-User", u.as_str());
            }
            if let Some(p) = &self.target.password {
                req = req.header("X-ClickHouse-Key", p.as_str());
            }
            let mut resp = match req.send(body) {
                Ok(r) => r,
                Err(e) => {
                    reason = format!("{host}: {e}");
                    continue;
                }
            };
            let status = resp.status();
            let bytes = match resp.body_mut().with_config().limit(1 << 30).read_to_vec() {
                Ok(t) => t,
                Err(e) => {
                    reason = format!("{host}: reading the answer: {e}");
                    continue;
                }
            };
            self.current.store(i, Ordering::Relaxed);
            if !status.is_success() {
                let what = short(what);
                let message = String::from_utf8_lossy(&bytes).trim().to_owned();
                return Err(Error::Refused { host: host.clone(), what, message });
            }
            return Ok(bytes);
        }
        Err(Error::Unreachable { hosts: self.target.hosts.join(","), reason })
    }
}

/// A statement as an error names it: its first line, cut at 80 characters.
fn short(sql: &str) -> String {
    let line = sql.lines().next().unwrap_or_default().trim();
    match line.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_or_say_why_not() {
        let t = Target::parse("clickhouse://u:p@a:8123,b:8124/kansoku").unwrap();
        assert_eq!(t.hosts, ["a:8123", "b:8124"]);
        assert_eq!((t.db.as_str(), t.user.as_deref(), t.password.as_deref()), ("kansoku", Some("u"), Some("p")));
        let t = Target::parse("clickhouse://127.0.0.1:8123/k").unwrap();
        assert_eq!((t.user, t.password), (None, None));
        for (bad, says) in [
            ("http://a:1/k", "expected clickhouse://"),
            ("clickhouse://a:1", "no database"),
            ("clickhouse://a/k", "not HOST:PORT"),
            ("clickhouse://a:x/k", "not HOST:PORT"),
            ("clickhouse://a:1/k-1", "letters, digits"),
            ("clickhouse://a:1/", "letters, digits"),
        ] {
            let e = Target::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn error_codes_are_read_from_the_exception() {
        let e = Error::Refused {
            host: "h".into(),
            what: "x".into(),
            message: "Code: 252, e.displayText() = DB::Exception: Too many parts".into(),
        };
        assert_eq!(e.code(), Some(252));
        assert_eq!(Error::Unreachable { hosts: "h".into(), reason: "r".into() }.code(), None);
    }
}
