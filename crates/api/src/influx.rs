//! InfluxDB 1.x compatibility (`/ping`, `/write`, `/query`) so InfluxDB
//! clients (the Python `influxdb` package, Telegraf's influxdb output) write
//! to and read from kansoku unchanged; and `/metrics`, kansoku's own health
//! in the Prometheus text format. Parsing and mapping: the `influx` crate.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use access::Access;
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use model::report::Figure;

use crate::{ApiState, auth};

/// Largest /write body, after decompression.
pub const WRITE_MAX: usize = 64 << 20;
/// Most series one /write may create.
pub const WRITE_NEW_SERIES_MAX: usize = 10_000;
/// Most series one writing token (or the host it is bound to) may create
/// through /write while the server runs.
pub const WRITER_NEW_SERIES_MAX: usize = 100_000;

#[derive(Debug, Default)]
pub struct InfluxStats {
    pub writes: AtomicU64,
    pub points: AtomicU64,
    pub bad_lines: AtomicU64,
    /// String values stored (each an id into the dictionary).
    pub string_values: AtomicU64,
    /// Writes refused whole for creating too many new series.
    pub series_limit_refused: AtomicU64,
    /// Points stored that were at or before their series' newest time (a
    /// backfill, a retry, a rewrite: the last write of a point wins).
    pub points_late: AtomicU64,
    pub queries: AtomicU64,
}

impl InfluxStats {
    /// `influx` in `/api/v1/status`, `kansoku_influx_*` in `/metrics`.
    pub fn report(&self) -> [Figure; 7] {
        let n = |a: &AtomicU64| a.load(Relaxed);
        [
            Figure::counter("writes", n(&self.writes)),
            Figure::counter("points", n(&self.points)),
            Figure::counter("bad_lines", n(&self.bad_lines)),
            Figure::counter("string_values", n(&self.string_values)),
            Figure::counter("series_limit_refused", n(&self.series_limit_refused)),
            Figure::counter("points_late", n(&self.points_late)),
            Figure::counter("queries", n(&self.queries)),
        ]
    }
}

/// State of the compatibility layer: counters and the databases created
/// with CREATE DATABASE (kept in `DATA/influx/databases`, one name a line;
/// a database with data exists anyway).
#[derive(Debug)]
pub struct Influx {
    pub stats: InfluxStats,
    /// Most series one writer may create through /write
    /// ([`WRITER_NEW_SERIES_MAX`] by default).
    pub writer_series_max: usize,
    /// New series created through /write, per writer (see `write`).
    writer_series: std::sync::Mutex<HashMap<String, usize>>,
    databases: std::sync::Mutex<Databases>,
    /// The string dictionary (`influx::strings`): read by queries, added
    /// to by writes once their new strings are durable in `strings_file`.
    strings: std::sync::RwLock<influx::strings::Dict>,
    /// The dictionary's file, open for appends (None: not read yet); its
    /// lock orders writers.
    strings_file: std::sync::Mutex<Option<std::fs::File>>,
    /// Whether the dictionary has been read (queries then skip the file's lock).
    strings_read: std::sync::atomic::AtomicBool,
}

/// The databases created by `CREATE DATABASE`, read from their file on
/// first use.
#[derive(Debug, Default)]
struct Databases {
    names: BTreeSet<String>,
    loaded: bool,
}

/// Where the created databases are kept, under the data directory.
fn databases_file(root: &std::path::Path) -> std::path::PathBuf {
    root.join("influx").join("databases")
}

impl Influx {
    /// The created databases, read from `root`'s file the first time.
    #[allow(clippy::disallowed_methods, reason = "called on blocking threads only: the write task, the guard")]
    fn databases(&self, root: &std::path::Path) -> std::sync::MutexGuard<'_, Databases> {
        let mut d = self.databases.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !d.loaded {
            d.loaded = true;
            match std::fs::read_to_string(databases_file(root)) {
                Ok(text) => d.names.extend(text.lines().filter(|l| !l.is_empty()).map(str::to_owned)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::error!(
                    "reading {}: {e}; databases created before are unknown",
                    databases_file(root).display()
                ),
            }
        }
        d
    }

    /// Writes the created databases to their file (whole, then renamed).
    #[allow(clippy::disallowed_methods, reason = "called on the guard's blocking thread")]
    fn save_databases(names: &BTreeSet<String>, root: &std::path::Path) -> std::io::Result<()> {
        let file = databases_file(root);
        std::fs::create_dir_all(file.parent().expect("under the data directory"))?;
        let tmp = file.with_extension("tmp");
        let text: String = names.iter().map(|n| format!("{n}\n")).collect();
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &file)
    }
}

impl Default for Influx {
    fn default() -> Influx {
        Influx::with_writer_limit(WRITER_NEW_SERIES_MAX)
    }
}

impl Influx {
    /// With a per-writer series limit other than the default.
    pub fn with_writer_limit(writer_series_max: usize) -> Influx {
        Influx {
            stats: InfluxStats::default(),
            writer_series_max,
            writer_series: std::sync::Mutex::default(),
            databases: std::sync::Mutex::default(),
            strings: std::sync::RwLock::default(),
            strings_file: std::sync::Mutex::default(),
            strings_read: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// `influx` in `/api/v1/status`, `kansoku_influx_*` in `/metrics`: the
    /// counters, and the distinct strings held and their bytes.
    pub fn report(&self) -> Vec<Figure> {
        let d = self.strings.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = self.stats.report().to_vec();
        out.push(Figure::gauge("strings", d.len() as u64));
        out.push(Figure::gauge("strings_bytes", d.bytes()));
        out
    }

    /// The dictionary's file open for appends, the dictionary read from it
    /// first (damage logged: the strings it held answer as absent, and a
    /// damaged tail's ids are never given again).
    #[allow(clippy::disallowed_methods, reason = "called on blocking threads only: the write task, the guard")]
    fn strings_file<'a>(
        &'a self,
        root: &std::path::Path,
    ) -> std::io::Result<std::sync::MutexGuard<'a, Option<std::fs::File>>> {
        use std::io::Write;
        let mut file = self.strings_file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if file.is_some() {
            return Ok(file);
        }
        let path = strings_path(root);
        std::fs::create_dir_all(path.parent().expect("under the data directory"))?;
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let (dict, loaded) = influx::strings::Dict::decode(&data);
        if loaded.damaged > 0 || loaded.bad_header && !data.is_empty() {
            tracing::error!(
                "{}: {} damaged frames skipped{}; the strings they held answer as absent",
                path.display(),
                loaded.damaged,
                if loaded.bad_header { ", its header not this format's" } else { "" }
            );
        }
        let mut f = std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&path)?;
        if data.len() < influx::strings::MAGIC.len() {
            // New (or torn before its header was whole).
            f.set_len(0)?;
            f.write_all(influx::strings::MAGIC)?;
            f.sync_all()?;
            std::fs::File::open(path.parent().expect("a directory"))?.sync_all()?;
        } else if loaded.valid < data.len() {
            // Kept, not cut: its length keeps its ids from being given
            // again (`Dict::decode`). It and any skipped damage are
            // overwritten with 0xFF (below): a frame begun in them could
            // run on into what is appended and swallow it (found by
            // fuzzing); a length of 0xFF bytes runs past any file.
            tracing::warn!(
                "{}: the last {} bytes do not verify (a torn or damaged tail); their strings are lost, their ids not reused",
                path.display(),
                data.len() - loaded.valid
            );
        }
        if !loaded.unverified.is_empty() && data.len() >= influx::strings::MAGIC.len() {
            use std::io::Seek;
            for r in &loaded.unverified {
                f.seek(std::io::SeekFrom::Start(r.start as u64))?;
                f.write_all(&vec![0xFF; r.len()])?;
            }
            f.sync_all()?;
        }
        use std::io::Seek;
        f.seek(std::io::SeekFrom::End(0))?;
        *self.strings.write().unwrap_or_else(std::sync::PoisonError::into_inner) = dict;
        *file = Some(f);
        Ok(file)
    }

    /// Makes `points`' string values the dictionary's ids, new strings
    /// appended to its file and fsynced first: `Ok(Ok(n))` with the string
    /// values, `Ok(Err(why))` when the dictionary is full.
    pub(crate) fn intern(
        &self,
        root: &std::path::Path,
        points: &mut influx::Points,
    ) -> std::io::Result<Result<u64, String>> {
        use std::io::Write;
        if points.strings.is_empty() {
            return Ok(Ok(0));
        }
        let mut file = self.strings_file(root)?;
        let planned = self.strings.read().unwrap_or_else(std::sync::PoisonError::into_inner).plan(&points.strings);
        let (ids, new) = match planned {
            Ok(p) => p,
            Err(why) => return Ok(Err(why)),
        };
        if let Some(new) = new {
            let f = file.as_mut().expect("opened above");
            if let Err(e) = f.write_all(&new.frame).and_then(|()| f.sync_data()) {
                // Read again (what was half written is a damaged tail
                // then, its ids never given) before the next append.
                *file = None;
                return Err(e);
            }
            self.strings.write().unwrap_or_else(std::sync::PoisonError::into_inner).commit(new);
        }
        Ok(Ok(points.set_string_ids(&ids)))
    }

    /// The string of a stored id, for queries: the dictionary is read the
    /// first time a query reads a string field (a query of numbers never
    /// waits for it, nor fails for it). Unreadable, its strings answer
    /// absent and the cause is logged.
    pub(crate) fn string_lookup<'a>(&'a self, root: &'a std::path::Path) -> impl Fn(u32) -> Option<Arc<str>> + 'a {
        move |id| {
            if !self.strings_read.load(Relaxed) {
                match self.strings_file(root) {
                    Ok(_) => self.strings_read.store(true, Relaxed),
                    Err(e) => {
                        tracing::error!("reading {}: {e}; string values answer absent", strings_path(root).display())
                    }
                }
            }
            self.strings.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
        }
    }
}

/// Where the string dictionary is kept, under the data directory.
fn strings_path(root: &std::path::Path) -> std::path::PathBuf {
    root.join("influx").join("strings")
}

fn version_headers() -> [(&'static str, &'static str); 2] {
    [("X-Influxdb-Version", "1.8.10-kansoku"), ("X-Influxdb-Build", "OSS")]
}

pub async fn ping() -> Response {
    (StatusCode::NO_CONTENT, version_headers()).into_response()
}

fn influx_error(status: StatusCode, msg: String) -> Response {
    (status, version_headers(), axum::Json(serde_json::json!({ "error": msg }))).into_response()
}

pub async fn write(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
    caller: Option<Extension<auth::Caller>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // Read here, not by an extractor, so an oversized body gets the JSON
    // error every other failure gets — at once when its length says so.
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > WRITE_MAX as u64) {
        // Read and dropped as it comes (the client gets its answer, not a
        // reset mid-send), never held.
        use tokio_stream::StreamExt;
        let mut stream = body.into_data_stream();
        let mut seen = 0usize;
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > WRITE_MAX {
                break;
            }
        }
        return influx_error(StatusCode::PAYLOAD_TOO_LARGE, format!("request body over {WRITE_MAX} bytes"));
    }
    let body = match crate::serve::read_body(body, WRITE_MAX).await {
        Ok(b) => b,
        Err((status, e)) => return influx_error(status, e),
    };
    // With tokens (`kansoku server --tokens`) the token was checked before
    // the body was read (`auth`); one bound to a host writes as that host.
    let caller = caller.map(|c| c.0);
    let forced_host = match caller.as_ref().map(|c| &c.access) {
        Some(Access::Write(Some(h))) => Some(h.clone()),
        _ => None,
    };
    // Whose new series these are, for the per-writer limit; none without
    // tokens (then the store's total limit alone applies).
    let writer = caller.map(|c| c.writer);
    let Some(db) = params.get("db").filter(|d| !d.is_empty()).cloned() else {
        return influx_error(StatusCode::NOT_FOUND, "database not found: \"\" (give ?db=NAME)".into());
    };
    let precision = match influx::precision_ns(params.get("precision").map(String::as_str)) {
        Ok(p) => p,
        Err(e) => return influx_error(StatusCode::BAD_REQUEST, e),
    };
    let gzip = headers.get(header::CONTENT_ENCODING).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let text = if gzip {
        let mut out = Vec::new();
        let limited = flate2::read::GzDecoder::new(&body[..]).take(WRITE_MAX as u64 + 1).read_to_end(&mut out);
        match limited {
            Ok(_) if out.len() > WRITE_MAX => {
                return influx_error(StatusCode::PAYLOAD_TOO_LARGE, format!("body over {WRITE_MAX} bytes"));
            }
            Ok(_) => out,
            Err(e) => return influx_error(StatusCode::BAD_REQUEST, format!("gzip body: {e}")),
        }
    } else {
        body.to_vec()
    };
    let Ok(text) = String::from_utf8(text) else {
        return influx_error(StatusCode::BAD_REQUEST, "body is not UTF-8".into());
    };
    let rp = params.get("rp").filter(|r| !r.is_empty()).cloned();
    let store = Arc::clone(&st.store);
    let reader = Arc::clone(&st.reader);
    let live = st.live.clone();
    let influx = Arc::clone(&st.influx);
    let result = tokio::task::spawn_blocking(move || {
        // As influxd: a database must exist (CREATE DATABASE, as Telegraf
        // and the clients do on a 404) before it is written to (issue 49).
        // A database known to exist is remembered (in memory): the check
        // through the store's index is made once, not at every write.
        {
            let mut dbs = influx.databases(store.root());
            if !dbs.names.contains(&db) {
                if !influx::database_exists(&*reader, &db, &dbs.names) {
                    return Ok(Err((StatusCode::NOT_FOUND, format!("database not found: {db:?}"))));
                }
                dbs.names.insert(db.clone());
            }
        }
        let mut parsed = influx::parse_lines(&text, precision, st.now().as_nanos(), &db, rp.as_deref());
        if let Some(host) = forced_host {
            for k in &mut parsed.points.keys {
                let mut labels = k.labels().to_vec();
                labels.push(("host".into(), host.clone()));
                *k = model::SeriesKey::new(k.name(), labels);
            }
        }
        let s = &influx.stats;
        s.writes.fetch_add(1, Relaxed);
        s.bad_lines.fetch_add(parsed.n_errors as u64, Relaxed);
        // New strings are durable in the dictionary before the points that
        // name them reach the WAL.
        let string_values = match influx.intern(store.root(), &mut parsed.points) {
            Ok(Ok(n)) => n,
            Ok(Err(full)) => return Ok(Err((StatusCode::BAD_REQUEST, full))),
            Err(e) => {
                let why = format!("cannot keep string values: {}: {e}", strings_path(store.root()).display());
                return Ok(Err((StatusCode::SERVICE_UNAVAILABLE, why)));
            }
        };
        match store_points(&store, &influx, &live, &parsed.points, writer.as_deref())? {
            Ok(late) => {
                s.points.fetch_add(parsed.points.points.len() as u64, Relaxed);
                s.points_late.fetch_add(late, Relaxed);
                s.string_values.fetch_add(string_values, Relaxed);
            }
            Err(refused) => {
                s.series_limit_refused.fetch_add(1, Relaxed);
                return Ok(Err((StatusCode::BAD_REQUEST, refused)));
            }
        };
        Ok::<_, store::StoreError>(Ok((parsed.errors, parsed.n_errors)))
    })
    .await;
    match result {
        Ok(Ok(Err((status, why)))) => influx_error(status, why),
        Ok(Ok(Ok((errors, _)))) if errors.is_empty() => (StatusCode::NO_CONTENT, version_headers()).into_response(),
        Ok(Ok(Ok((errors, n_errors)))) => {
            // As influxd answers a write it kept only in part: 400, what
            // was dropped and how many (`dropped=N`), never 204 for a point
            // not kept (issue 49).
            let first = &errors[0];
            let more = if n_errors > 1 { format!(" (and {} more bad lines)", n_errors - 1) } else { String::new() };
            influx_error(StatusCode::BAD_REQUEST, format!("partial write: {first}{more} dropped={n_errors}"))
        }
        Ok(Err(e)) => influx_error(StatusCode::SERVICE_UNAVAILABLE, format!("cannot store now: {e}")),
        Err(e) => influx_error(StatusCode::INTERNAL_SERVER_ERROR, format!("write task: {e}")),
    }
}

/// Stores points on behalf of `writer` (none without tokens), each
/// acknowledged append sent to the live tail: `Ok(Ok(n))` with the points
/// that were late (at or before their series' newest time, another value:
/// kept, merged on read); `Ok(Err(why))` when the write is
/// refused whole for creating too many series — more than
/// [`WRITE_NEW_SERIES_MAX`] in one request, or past the writer's limit.
/// Shared by `/write` and Prometheus remote write.
pub(crate) fn store_points(
    store: &store::Store,
    influx: &Influx,
    live: &tokio::sync::broadcast::Sender<Arc<store::Appended>>,
    points: &influx::Points,
    writer: Option<&str>,
) -> Result<Result<u64, String>, store::StoreError> {
    // One request may not invent more than so many series: a flood of new
    // series costs memory for as long as the data is kept.
    let distinct: BTreeSet<&model::SeriesKey> = points.keys.iter().collect();
    let new = store.count_new(distinct);
    if new > WRITE_NEW_SERIES_MAX {
        return Ok(Err(format!(
            "this write would create more than {WRITE_NEW_SERIES_MAX} new series ({new}; the limit per request); nothing was stored: split it, or check for a label whose value changes every sample"
        )));
    }
    if let Some(writer) = writer {
        let mut counts = influx.writer_series.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = counts.entry(writer.to_owned()).or_insert(0);
        if *n + new > influx.writer_series_max {
            return Ok(Err(format!(
                "{writer} has created {n} series; {new} more would pass its limit of {}; nothing was stored",
                influx.writer_series_max
            )));
        }
        *n += new;
    }
    let mut late = 0u64;
    for a in influx::write(store, points)? {
        late += u64::from(a.late);
        if !a.points.is_empty() {
            let _ = live.send(Arc::new(a));
        }
    }
    Ok(Ok(late))
}

pub async fn query(
    State(st): State<ApiState>,
    Query(mut params): Query<HashMap<String, String>>,
    caller: Option<Extension<auth::Caller>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // POST may carry the parameters as a form.
    let form = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/x-www-form-urlencoded"));
    // Parsed as a form, not as a URI (a URI past 64 KiB is refused).
    if form && let Ok(more) = serde_urlencoded::from_bytes::<Vec<(String, String)>>(&body) {
        params.extend(more);
    }
    let Some(q) = params.get("q").cloned() else {
        return influx_error(StatusCode::BAD_REQUEST, "missing required parameter \"q\"".into());
    };
    let epoch = match params.get("epoch").map(String::as_str) {
        None | Some("") => None,
        Some("ns" | "n") => Some(1),
        Some("u" | "µ" | "us") => Some(1_000),
        Some("ms") => Some(1_000_000),
        Some("s") => Some(1_000_000_000),
        Some("m") => Some(60_000_000_000),
        Some("h") => Some(3_600_000_000_000),
        Some(e) => return influx_error(StatusCode::BAD_REQUEST, format!("invalid epoch {e:?}")),
    };
    let read_only = caller.is_some_and(|c| c.0.access == Access::Read);
    // `chunked=true`: a JSON document per line, SELECT answers cut into
    // `chunk_size` rows (InfluxDB's default 10,000).
    let chunk = match (params.get("chunked").map(String::as_str), params.get("chunk_size")) {
        (None | Some("false" | ""), _) => None,
        (Some(_), None) => Some(10_000),
        (Some(_), Some(n)) => match n.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => return influx_error(StatusCode::BAD_REQUEST, format!("invalid chunk_size {n:?}")),
        },
    };
    let db = params.get("db").filter(|d| !d.is_empty()).cloned();
    let store = Arc::clone(&st.reader);
    let influx = Arc::clone(&st.influx);
    let root = st.store.root().to_owned();
    let now = st.now().as_nanos();
    let results = st
        .guard
        .run(move || {
            // Parsed here, not on an async worker: its regexes compile.
            // A syntax error fails the request (400); a statement kansoku
            // does not support is that statement's error, the others run.
            let statements = influx::parse_statements(&q, now)
                .map_err(|e| (StatusCode::BAD_REQUEST, format!("error parsing query: {e}")))?;
            let creates = statements.iter().flatten().any(|s| matches!(s, influx::Statement::CreateDatabase(_)));
            if read_only && creates {
                return Err((StatusCode::FORBIDDEN, "a read-only token cannot CREATE DATABASE".into()));
            }
            influx.stats.queries.fetch_add(1, Relaxed);
            let strings = influx.string_lookup(&root);
            let mut dbs = influx.databases(&root);
            let before = dbs.names.len();
            let results = statements
                .iter()
                .map(|s| match s {
                    Ok(s) => match influx::execute(&store, s, db.as_deref(), epoch, &mut dbs.names, &strings) {
                        Ok(v) => (v, matches!(s, influx::Statement::Select(_))),
                        Err(e) => (serde_json::json!({ "error": e }), false),
                    },
                    Err(e) => (serde_json::json!({ "error": e }), false),
                })
                .collect::<Vec<_>>();
            if dbs.names.len() != before
                && let Err(e) = Influx::save_databases(&dbs.names, &root)
            {
                return Err((StatusCode::SERVICE_UNAVAILABLE, format!("cannot keep the new database: {e}")));
            }
            Ok(results)
        })
        .await;
    let results = match results {
        Ok(Ok(r)) => Ok(r),
        Ok(Err((status, e))) => return influx_error(status, e),
        Err(e) => Err(e),
    };
    match (results, chunk) {
        (Ok(results), Some(size)) => {
            let mut body = String::new();
            for (i, (r, select)) in results.iter().enumerate() {
                influx::chunk_lines(i, r, *select, size, &mut body);
            }
            (version_headers(), [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        (Ok(results), None) => {
            let results: Vec<serde_json::Value> = results
                .into_iter()
                .enumerate()
                .map(|(i, (mut r, _))| {
                    r["statement_id"] = serde_json::json!(i);
                    r
                })
                .collect();
            (version_headers(), axum::Json(serde_json::json!({ "results": results }))).into_response()
        }
        (Err(e), _) => influx_error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
