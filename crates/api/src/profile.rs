//! Per-CPU samples over a range (host, optional CPU and pid), symbolised
//! here (`perf::symbols`):
//! - `GET /api/v1/profile/top`: the top symbols (rank, symbol, module,
//!   samples, share);
//! - `GET /api/v1/profile/flame`: the flame graph of the call chains, its
//!   frames in preorder as [name, samples, depth] (flat: deep stacks meet
//!   no client's nesting limit); samples without a chain are their process
//!   and symbol;
//! - `GET /api/v1/profile/folded`: the same stacks as folded-stacks text
//!   for flamegraph.pl, inferno or speedscope;
//! - `GET /api/v1/profile/pprof`: the same as a gzipped pprof profile
//!   (`go tool pprof`, Parca, Pyroscope);
//! - `GET /api/v1/profile/timeline`: per CPU and time bucket, the process
//!   that ran most, for the dashboard's timeline strip.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::IntoResponse;
use model::{Selector, Timestamp};
use perf::symbols::Procs;
use source::EventQuery;
use source::{EventCounts, EventsError, Shape};

use crate::{ApiError, ApiState};

/// Most events one request may scan (a minute of 64 CPUs at 10 kHz is 38 M).
const SCAN_MAX: u64 = 50_000_000;

/// The range, stream and filters of a profile request.
struct Request {
    query: EventQuery,
    pid: Option<u32>,
    n: usize,
    buckets: usize,
    /// `within`: name parts not yet kept only until this long after the
    /// request arrived (time spent queued counts), newest first, and answer
    /// for the newest stretch named (the flame graph and top table: a
    /// page's first look at a long range, asked again until complete).
    deadline: Option<std::time::Instant>,
}

fn request(params: &HashMap<String, String>, now: Timestamp) -> Result<Request, ApiError> {
    let arrived = std::time::Instant::now();
    let get = |k: &str| params.get(k).map(String::as_str);
    let host = get("host").ok_or_else(|| ApiError::BadRequest("missing parameter `host`".into()))?;
    // Without a stream: the samples of whichever event the host sampled.
    let stream = match get("stream") {
        Some(s) => format!("{{__name__={},", model::quoted(s)),
        None => "{__name__=~\"perf_cpu_clock|perf_cycles\",".to_owned(),
    };
    let sel = Selector::parse(&format!("{stream}host={}}}", model::quoted(host)))
        .map_err(|e| ApiError::BadRequest(format!("stream or host: {e}")))?;
    let (from, to) = model::resolve_range(get("from"), get("to"), get("since"), now)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let num = |k: &str| -> Result<Option<u64>, ApiError> {
        get(k).map(|v| v.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("`{k}`: a number")))).transpose()
    };
    let num32 = |k: &str| -> Result<Option<u32>, ApiError> {
        num(k)?
            .map(|v| u32::try_from(v).map_err(|_| ApiError::BadRequest(format!("`{k}`: {v} is past 4294967295"))))
            .transpose()
    };
    let cpus: Vec<u32> = num32("cpu")?.map(|c| vec![c]).unwrap_or_default();
    let within = get("within")
        .map(|w| {
            model::parse_duration(w).ok().filter(|d| *d <= std::time::Duration::from_secs(60)).ok_or_else(|| {
                ApiError::BadRequest(format!("`within`: a duration up to 60s (such as 800ms), not {w:?}"))
            })
        })
        .transpose()?;
    Ok(Request {
        query: EventQuery { streams: sel, cpus, from: from.as_nanos(), to: to.as_nanos() },
        pid: num32("pid")?,
        n: num("n")?.unwrap_or(20).clamp(1, 1000) as usize,
        buckets: num("buckets")?.unwrap_or(200).clamp(1, 2000) as usize,
        deadline: within.map(|d| arrived + d),
    })
}

/// What names the addresses of `counts`: its processes (in time order:
/// the latest description of a process wins), the store's build-id cache,
/// the kernel table of a foreign boot, the binaries other servers received.
fn namer(counts: &mut EventCounts, root: &std::path::Path, symbols: Option<&symstore::SymStore>) -> Procs {
    let mut procs = Procs::new(Some(root.join(perf::procs::CACHE_DIR)));
    // Streams sampled on another boot (or machine) say so in their
    // `boot` label; streams without one (imports) are taken as this one's.
    let here = perf::boot_id();
    // The newest foreign boot's kernel table names kernel frames (a range
    // spanning a reboot of the host names the older boot's kernel frames
    // from the newer table: rarely right).
    let foreign = counts.boots.iter().filter(|(_, boot)| Some(boot) != here.as_ref()).max().map(|(_, b)| b.clone());
    procs.set_foreign(foreign.is_some());
    let table = foreign.as_deref().and_then(symstore::Key::kallsyms);
    if let (Some(symbols), Some(key)) = (symbols, &table)
        && symbols.ensure(key)
        && let Some(path) = symbols.path(key)
    {
        symbols.touch(key);
        procs.set_kallsyms(path);
    }
    procs.add(&std::mem::take(&mut counts.procs));
    if let Some(symbols) = symbols {
        // Binaries another server received come from the shared store (on
        // a server in front of ClickHouse).
        for id in procs.build_ids() {
            if let Some(key) = symstore::Key::binary(id) {
                symbols.ensure(&key);
            }
        }
        let lacking: Vec<(Vec<u8>, String)> = procs
            .build_ids()
            .into_iter()
            .filter_map(|id| Some((id.to_vec(), symbols.why_lacking(&symstore::Key::binary(id)?)?)))
            .collect();
        for (id, why) in lacking {
            procs.set_lacking(id, why);
        }
    }
    procs
}

/// Marks the binaries `procs` named with as still in use (the symbol
/// store's order of eviction).
fn touch_used(procs: &Procs, symbols: Option<&symstore::SymStore>) {
    if let Some(symbols) = symbols {
        for id in procs.used() {
            if let Some(key) = symstore::Key::binary(&id) {
                symbols.touch(&key);
            }
        }
    }
}

fn events_error(e: EventsError) -> ApiError {
    match e {
        EventsError::TooLarge(..) => ApiError::TooLarge(e.to_string()),
        EventsError::Unavailable(m) => ApiError::Unavailable(format!("reading the events: {m}")),
    }
}

/// Counts the request's events by `shape` where they are kept (on a
/// blocking thread), gathers what names them, and hands both to `f`.
async fn count<T: Send + 'static>(
    st: &ApiState,
    req: Request,
    shape: Shape,
    f: impl FnOnce(&Request, EventCounts, &Procs) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let (events, root, counted) = (Arc::clone(&st.events), st.store.root().to_path_buf(), Arc::clone(&st.counted));
    let symbols = st.symbols.clone();
    st.guard
        .run(move || {
            let now = clock::realtime_ns();
            let mut counts =
                counted.count(&*events, &req.query, req.pid, shape, SCAN_MAX, now).map_err(events_error)?;
            let procs = namer(&mut counts, &root, symbols.as_deref());
            let out = f(&req, counts, &procs);
            touch_used(&procs, symbols.as_deref());
            Ok(out)
        })
        .await?
}

/// A settled part of a range, named once and kept for 10 s parts
/// (`ApiState::named`), so a 15-minute flame graph or top table asked again
/// names only the last seconds: the graph's tree, or the table's samples
/// by symbol.
#[derive(Debug)]
pub struct NamedPart {
    named: Content,
    /// Samples counted, those with call chains, corrupt batches skipped.
    events: u64,
    with_chains: u64,
    corrupt: u64,
}

/// What a part keeps of its samples, named.
#[derive(Debug)]
enum Content {
    Flame(perf::symbols::Frame),
    Top(HashMap<perf::symbols::Named, u64>),
}

impl NamedPart {
    /// About how many bytes it holds (the cache's budget).
    fn bytes(&self) -> usize {
        64 + match &self.named {
            Content::Flame(root) => root.bytes(),
            // Two shared names and a count an entry, and the table's slack.
            Content::Top(by_symbol) => by_symbol.capacity() * 48,
        }
    }
}

/// What `source::cache::Key` calls the named parts of each kind.
const NAMED_STACKS: u8 = 2;
const NAMED_TOP: u8 = 3;

/// The kept part: 10 s, so that what is named afresh on each refresh is at
/// most the last 45 s (the settling time and one part).
const NAMED_PART_NS: i64 = 10_000_000_000;

/// Most kept parts a request is made of: a day.
const NAMED_PARTS_MAX: i64 = 8_640;

/// Where named parts come from and are kept: the events, the cache, the
/// data directory (its build-id cache) and the shared symbol store.
struct Naming<'a> {
    events: &'a dyn source::EventSource,
    kept: &'a source::cache::Kept<Arc<NamedPart>>,
    root: &'a std::path::Path,
    symbols: Option<&'a symstore::SymStore>,
}

/// What a request named: its parts, and where the oldest begins when
/// `within` ran out before the range's start (`None`: the whole range).
struct Named {
    parts: Vec<Arc<NamedPart>>,
    from: Option<i64>,
}

/// The request's range as named parts of `shape` (`what` keys them in the
/// cache): each settled part's made by `make` once and kept, the rest made
/// afresh. One budget of events scanned for the whole request. Newest
/// first: with `within`, once it has passed, the parts not kept are left
/// for the next request and the answer covers the newest stretch named (the
/// part still filling is always named).
fn named_parts(
    at: &Naming<'_>,
    req: &Request,
    (shape, what): (Shape, u8),
    now: i64,
    make: impl Fn(&EventCounts, &Procs) -> Content,
) -> Result<Named, ApiError> {
    let Naming { events, kept, root, symbols } = *at;
    use source::cache::{Key, Part};
    let generation = events.generation();
    // At most a day of kept parts: what lies before them is one raw part.
    let parts = match generation {
        Some(_) => source::cache::parts(&req.query, now, NAMED_PART_NS, NAMED_PARTS_MAX),
        None => vec![Part::Raw(req.query.from, req.query.to)],
    };
    let mut left = SCAN_MAX;
    let mut name = |from: i64, to: i64| -> Result<NamedPart, ApiError> {
        let q = EventQuery { from, to, ..req.query.clone() };
        let mut c = events.count(&q, req.pid, shape, left).map_err(events_error)?;
        left = left.saturating_sub(c.events);
        let procs = namer(&mut c, root, symbols);
        let named = make(&c, &procs);
        touch_used(&procs, symbols);
        Ok(NamedPart { named, events: c.events, with_chains: c.with_chains, corrupt: c.corrupt })
    };
    let mut named = Vec::with_capacity(parts.len());
    let mut named_from = None;
    // Settled parts this request named: at least one is, whatever the
    // deadline, so a request that waited its `within` away in a queue
    // still moves the range on (else the page's asks again could each
    // leave the same part, for ever).
    let mut made = 0;
    for (i, part) in parts.iter().enumerate().rev() {
        // Past `within`, the parts not kept are left for the next request
        // (the newest, still filling, is always named).
        let stop = i + 1 < parts.len() && made > 0 && req.deadline.is_some_and(|d| std::time::Instant::now() >= d);
        named.push(match (*part, generation) {
            (Part::Settled(start), Some(generation)) => {
                let key = Key::new(&req.query, req.pid, what, start);
                match kept.get(&key, generation) {
                    Some(kept) => kept,
                    None if stop => {
                        named_from = Some(start_of(parts[i + 1]));
                        break;
                    }
                    None => {
                        made += 1;
                        let part = Arc::new(name(start, start + NAMED_PART_NS - 1)?);
                        kept.put(key, Arc::clone(&part), part.bytes(), generation);
                        part
                    }
                }
            }
            _ if stop => {
                named_from = Some(start_of(parts[i + 1]));
                break;
            }
            (Part::Settled(start), None) => {
                made += 1;
                Arc::new(name(start, start + NAMED_PART_NS - 1)?)
            }
            (Part::Raw(from, to), _) => {
                made += usize::from(i + 1 < parts.len());
                Arc::new(name(from, to)?)
            }
        });
    }
    named.reverse();
    Ok(Named { parts: named, from: named_from })
}

/// Where a part begins (ns).
fn start_of(part: source::cache::Part) -> i64 {
    match part {
        source::cache::Part::Raw(from, _) | source::cache::Part::Settled(from) => from,
    }
}

/// A flame graph: the tree with frames narrower than a pixel merged (how
/// many), the samples with call chains, the corrupt batches skipped, and
/// from when it holds the range (`None`: all of it; see [`Named`]).
#[derive(Debug)]
struct Flame {
    tree: perf::symbols::Frame,
    merged: usize,
    with_chains: u64,
    corrupt: u64,
    named_from: Option<i64>,
}

/// The flame graph of the request's range: the sum of its parts' trees
/// (`named_parts`), with frames narrower than `width` pixels merged
/// (`perf::symbols::sum`).
fn flame_tree(at: &Naming<'_>, req: &Request, width: Option<u64>, now: i64) -> Result<Flame, ApiError> {
    let named = named_parts(at, req, (Shape::Stacks, NAMED_STACKS), now, |c, procs| {
        Content::Flame(perf::symbols::flame(&c.stacks, procs))
    })?;
    let parts = &named.parts;
    let trees: Vec<&perf::symbols::Frame> =
        parts.iter().filter_map(|p| if let Content::Flame(t) = &p.named { Some(t) } else { None }).collect();
    let (with_chains, corrupt) = (parts.iter().map(|p| p.with_chains).sum(), parts.iter().map(|p| p.corrupt).sum());
    let samples: u64 = trees.iter().map(|t| t.value).sum();
    let min = width.map_or(0, |w| samples.div_ceil(w));
    let (tree, merged) = perf::symbols::sum(&trees, min);
    Ok(Flame { tree, merged, with_chains, corrupt, named_from: named.from })
}

/// A top table: its rows, the samples, the corrupt batches skipped, and
/// from when it holds the range (`None`: all of it).
#[derive(Debug, PartialEq)]
struct Top {
    rows: Vec<perf::symbols::TopRow>,
    samples: u64,
    corrupt: u64,
    named_from: Option<i64>,
}

/// The top table of the request's range from its named parts: the sum of
/// their samples by symbol.
fn top_table(at: &Naming<'_>, req: &Request, now: i64) -> Result<Top, ApiError> {
    let named = named_parts(at, req, (Shape::Ips, NAMED_TOP), now, |c, procs| {
        Content::Top(perf::symbols::by_symbol(&c.ips, procs))
    })?;
    let parts = &named.parts;
    let maps: Vec<&HashMap<perf::symbols::Named, u64>> =
        parts.iter().filter_map(|p| if let Content::Top(m) = &p.named { Some(m) } else { None }).collect();
    let (samples, corrupt) = (parts.iter().map(|p| p.events).sum(), parts.iter().map(|p| p.corrupt).sum());
    Ok(Top { rows: perf::symbols::top_of(&maps, req.n), samples, corrupt, named_from: named.from })
}

/// The answer's fields saying what it covers: `complete`, and when not the
/// time (s) from which it holds the range.
fn covers(named_from: Option<i64>) -> (bool, Option<f64>) {
    (named_from.is_none(), named_from.map(|t| t as f64 / 1e9))
}

pub async fn top(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let req = request(&params, st.now())?;
    let (events, kept, root) = (Arc::clone(&st.events), Arc::clone(&st.named), st.store.root().to_path_buf());
    let symbols = st.symbols.clone();
    let v = st
        .guard
        .run(move || -> Result<serde_json::Value, ApiError> {
            let top = top_table(
                &Naming { events: &*events, kept: &kept, root: &root, symbols: symbols.as_deref() },
                &req,
                clock::realtime_ns(),
            )?;
            let rows: Vec<_> = top.rows.iter().map(crate::views::top_row).collect();
            let (complete, named_from) = covers(top.named_from);
            Ok(serde_json::json!({
                "samples": top.samples, "corrupt_batches": top.corrupt, "rows": rows,
                "complete": complete, "named_from": named_from,
            }))
        })
        .await??;
    Ok(Json(v))
}

pub async fn flame(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    // The client's width in pixels: frames narrower than one are merged.
    let width = match params.get("width") {
        Some(w) => Some(
            w.parse::<u64>()
                .ok()
                .filter(|&w| w > 0)
                .ok_or_else(|| ApiError::BadRequest(format!("`width`: a positive number of pixels, not {w:?}")))?,
        ),
        None => None,
    };
    let req = request(&params, st.now())?;
    let (events, kept, root) = (Arc::clone(&st.events), Arc::clone(&st.named), st.store.root().to_path_buf());
    let symbols = st.symbols.clone();
    let v = st
        .guard
        .run(move || -> Result<serde_json::Value, ApiError> {
            let now = clock::realtime_ns();
            let f = flame_tree(
                &Naming { events: &*events, kept: &kept, root: &root, symbols: symbols.as_deref() },
                &req,
                width,
                now,
            )?;
            let (complete, named_from) = covers(f.named_from);
            Ok(serde_json::json!({
                "samples": f.tree.value, "with_call_chains": f.with_chains, "corrupt_batches": f.corrupt,
                "merged_frames": f.merged, "frames": f.tree.flatten(),
                "complete": complete, "named_from": named_from,
            }))
        })
        .await??;
    Ok(Json(v))
}

pub async fn folded(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    let text =
        count(&st, request(&params, st.now())?, Shape::Stacks, |_, c, procs| perf::symbols::folded(&c.stacks, procs))
            .await?;
    Ok(([(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")], text))
}

pub async fn pprof(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<impl IntoResponse, ApiError> {
    use std::io::Write;
    let bytes = count(&st, request(&params, st.now())?, Shape::Stacks, |req, c, procs| {
        let p = perf::pprof::profile(&c.stacks, procs, req.query.from, req.query.to);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&perf::pprof::encode(&p)).and_then(|()| gz.finish())
    })
    .await?
    .map_err(|e| ApiError::Internal(format!("pprof: {e}")))?;
    let headers = [
        (axum::http::header::CONTENT_TYPE, "application/octet-stream"),
        (axum::http::header::CONTENT_DISPOSITION, "attachment; filename=\"profile.pb.gz\""),
    ];
    Ok((headers, bytes))
}

pub async fn timeline(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let req = request(&params, st.now())?;
    let shape = Shape::Timeline { buckets: req.buckets };
    let v = count(&st, req, shape, |req, c, procs| {
        let (from, to) = (req.query.from, req.query.to);
        let width = source::bucket_width(&req.query, req.buckets);
        let mut names: HashMap<u32, String> = HashMap::new();
        let cpus: Vec<serde_json::Value> = c
            .cells
            .into_iter()
            .map(|(cpu, row)| {
                let cells: Vec<serde_json::Value> = row
                    .iter()
                    .map(|m| match m.iter().max_by_key(|(p, c)| (**c, std::cmp::Reverse(**p))) {
                        Some((&pid, &c)) => {
                            let total: u32 = m.values().sum();
                            names.entry(pid).or_insert_with(|| process_name(pid, procs));
                            serde_json::json!([pid, c, total])
                        }
                        None => serde_json::Value::Null,
                    })
                    .collect();
                serde_json::json!({ "cpu": cpu, "cells": cells })
            })
            .collect();
        serde_json::json!({
            "from": from, "to": to, "bucket_ns": width, "corrupt_batches": c.corrupt,
            "cpus": cpus, "processes": names,
        })
    })
    .await?;
    Ok(Json(v))
}

fn process_name(pid: u32, procs: &Procs) -> String {
    if pid == 0 {
        return "idle".into();
    }
    procs.comm(pid).unwrap_or_else(|| format!("pid {pid}"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    use super::*;

    const S: i64 = 1_000_000_000;

    /// An event a second, of one of three processes (none alive: named
    /// `pid N`) by its second; counts how many it read. Without a generation it is
    /// never cached.
    #[derive(Debug, Default)]
    struct Seconds {
        read: AtomicU64,
        generation: Option<u64>,
    }

    impl source::EventSource for Seconds {
        fn count(&self, q: &EventQuery, _: Option<u32>, shape: Shape, _: u64) -> Result<EventCounts, EventsError> {
            let mut out = EventCounts::default();
            let first = q.from.div_euclid(S) + i64::from(q.from.rem_euclid(S) != 0);
            for s in first..=q.to.div_euclid(S) {
                self.read.fetch_add(1, Relaxed);
                out.events += 1;
                out.with_chains += 1;
                let pid = 4_000_000 + (s % 3) as u32;
                match shape {
                    Shape::Ips => *out.ips.entry((pid, 0x1000 + s as u64 % 5)).or_default() += 1,
                    _ => *out.stacks.entry((pid, vec![0x1000 + s as u64 % 5, 0x2000])).or_default() += 1,
                }
            }
            Ok(out)
        }

        fn generation(&self) -> Option<u64> {
            self.generation
        }
    }

    /// The samples of `from`..=`to` seconds, the `n` most.
    fn req(from: i64, to: i64, n: usize) -> Request {
        Request {
            query: EventQuery {
                streams: model::Selector::parse("perf_cpu_clock").unwrap(),
                cpus: Vec::new(),
                from: from * S,
                to: to * S,
            },
            pid: None,
            n,
            buckets: 200,
            deadline: None,
        }
    }

    /// A top table summed from kept parts is the table of the whole range
    /// at once (processes gone: every address `[unknown] (pid N)`, one row
    /// per pid); asked again, only the part still filling is read.
    #[test]
    fn kept_parts_make_the_same_top_table() {
        let dir = tempfile::tempdir().unwrap();
        let (cached, direct) = (Seconds { generation: Some(1), ..Seconds::default() }, Seconds::default());
        let kept = source::cache::Kept::new(1 << 20);
        let kept_at = Naming { events: &cached, kept: &kept, root: dir.path(), symbols: None };
        let direct_at = Naming { events: &direct, kept: &kept, root: dir.path(), symbols: None };
        let now = 1_000 * S;
        for (from, to) in [(0, 900), (15, 615), (61, 61)] {
            let got = top_table(&kept_at, &req(from, to, 2), now).unwrap();
            let want = top_table(&direct_at, &req(from, to, 2), now).unwrap();
            assert_eq!(got, want, "{from}..{to}");
            assert_eq!(got.samples, (to - from + 1) as u64);
            assert_eq!(got.rows.len(), 2.min((to - from + 1) as usize), "the n asked");
        }
        cached.read.store(0, Relaxed);
        let again = top_table(&kept_at, &req(0, 900, 2), now).unwrap();
        assert_eq!(again.samples, 901);
        assert_eq!(cached.read.load(Relaxed), 1, "only 900 s itself read again");
    }

    /// A flame graph summed from kept minutes is the graph of the whole
    /// range at once; asked again, only the minutes still filling are read.
    #[test]
    fn kept_minutes_make_the_same_flame_graph() {
        let dir = tempfile::tempdir().unwrap();
        let (cached, direct) = (Seconds { generation: Some(1), ..Seconds::default() }, Seconds::default());
        let flames = source::cache::Kept::new(1 << 20);
        let kept_at = Naming { events: &cached, kept: &flames, root: dir.path(), symbols: None };
        let direct_at = Naming { events: &direct, kept: &flames, root: dir.path(), symbols: None };
        let now = 1_000 * S;
        for (from, to) in [(0, 900), (15, 615), (61, 61), (100, 1_000)] {
            let req = req(from, to, 20);
            for width in [None, Some(4)] {
                let got = flame_tree(&kept_at, &req, width, now).unwrap();
                let want = flame_tree(&direct_at, &req, width, now).unwrap();
                assert_eq!(got.tree.flatten(), want.tree.flatten(), "{from}..{to} {width:?}");
                assert_eq!((got.merged, got.with_chains), (want.merged, want.with_chains));
                assert_eq!((got.tree.value, got.with_chains), ((to - from + 1) as u64, (to - from + 1) as u64));
                assert_eq!(got.named_from, None);
                if width.is_none() {
                    assert_eq!(got.tree.children.len(), 3.min((to - from + 1) as usize), "a frame per process");
                }
            }
        }
        let upto = |to: i64| req(0, to, 20);
        cached.read.store(0, Relaxed);
        let again = flame_tree(&kept_at, &upto(900), None, now).unwrap();
        assert_eq!(again.tree.value, 901);
        assert_eq!(cached.read.load(Relaxed), 1, "only 900 s itself read again");
        // Settled 10 s parts reach up to 35 s before now: 960 s.
        flame_tree(&kept_at, &upto(960), None, now).unwrap();
        cached.read.store(0, Relaxed);
        flame_tree(&kept_at, &upto(960), None, now).unwrap();
        assert_eq!(cached.read.load(Relaxed), 1, "only 960 s itself read again");
    }

    /// With `within` passed (zero here), a request names only the part
    /// still filling, the kept parts right before it and one part not kept
    /// (so each request moves on), and says from when it holds the range;
    /// what it left is named by later requests.
    #[test]
    fn within_answers_for_the_newest_stretch_named() {
        let dir = tempfile::tempdir().unwrap();
        let cached = Seconds { generation: Some(1), ..Seconds::default() };
        let kept = source::cache::Kept::new(1 << 20);
        let at = Naming { events: &cached, kept: &kept, root: dir.path(), symbols: None };
        let now = 1_000 * S;
        let hurried = |from, to| Request { deadline: Some(std::time::Instant::now()), ..req(from, to, 20) };
        // 0..=905: settled parts 0..900 and the last 5 s, raw.
        let f = flame_tree(&at, &hurried(0, 905), None, now).unwrap();
        assert_eq!((f.tree.value, f.named_from), (16, Some(890 * S)), "the newest part, and one settled");
        assert_eq!(top_table(&at, &hurried(0, 905), now).unwrap().named_from, Some(890 * S));
        // Parts named in full by another request are kept: the hurried one
        // then holds them, up to the first part not kept.
        flame_tree(&at, &req(600, 905, 20), None, now).unwrap();
        let f = flame_tree(&at, &hurried(0, 905), None, now).unwrap();
        assert_eq!((f.tree.value, f.named_from), (316, Some(590 * S)), "and one more");
        flame_tree(&at, &req(0, 905, 20), None, now).unwrap();
        let f = flame_tree(&at, &hurried(0, 905), None, now).unwrap();
        assert_eq!((f.tree.value, f.named_from), (906, None), "complete once every part is kept");
        // A range not on a part's edge: its first stretch is raw, the one
        // part this request names.
        let f = flame_tree(&at, &hurried(3, 905), None, now).unwrap();
        assert_eq!((f.tree.value, f.named_from), (905 - 3 + 1, None));
        let f = flame_tree(&at, &hurried(2, 905), None, now).unwrap();
        assert_eq!((f.tree.value, f.named_from), (905 - 2 + 1, None), "a raw stretch is never kept");
    }

    /// `within` counts from the request's arrival: a request that waited
    /// (queued behind others) past it names only the newest part and the
    /// one settled part each request names.
    #[test]
    fn within_counts_from_the_request_s_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let cached = Seconds { generation: Some(1), ..Seconds::default() };
        let kept = source::cache::Kept::new(1 << 20);
        let at = Naming { events: &cached, kept: &kept, root: dir.path(), symbols: None };
        let params: HashMap<String, String> =
            [("host", "h"), ("from", "0"), ("to", "905"), ("within", "20ms")].map(|(k, v)| (k.into(), v.into())).into();
        let waited = Request { query: req(0, 905, 20).query, ..request(&params, Timestamp(1_000 * S)).unwrap() };
        let deadline = waited.deadline.expect("a deadline");
        while std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let f = flame_tree(&at, &waited, None, 1_000 * S).unwrap();
        assert_eq!(f.named_from, Some(890 * S), "its time was spent waiting");
    }

    #[test]
    fn within_is_a_duration_up_to_a_minute() {
        let ask = |w: &str| {
            let params: HashMap<String, String> =
                [("host", "h"), ("since", "15m"), ("within", w)].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
            let before = std::time::Instant::now();
            request(&params, Timestamp(1_000 * S)).map(|r| (before, r.deadline, std::time::Instant::now()))
        };
        let (before, deadline, after) = ask("800ms").unwrap();
        let d = std::time::Duration::from_millis(800);
        assert!(deadline.is_some_and(|t| before + d <= t && t <= after + d), "800 ms from arrival");
        for bad in ["2m", "soon", "-1s"] {
            let e = ask(bad).unwrap_err().to_string();
            assert!(e.contains("`within`") && e.contains(bad), "{bad}: {e}");
        }
    }
}
