//! `GET /api/v1/live?match=SELECTOR`: server-sent events, one per collection
//! interval, carrying only the new samples (clients never re-fetch history).
//!
//! Events: `series` (the full list of matched series; sent first and again
//! whenever a new series appears — values arrays index into it), `points`
//! (`{"t": seconds, "t_ns": ns, "values": [...]}`, `null` where a series had
//! no sample), and `lagged` (`{"missed": n}`: this client fell behind by n
//! intervals, which it must show as a gap).
//!
//! On a server in front of ClickHouse (`live_delay` set) the samples of
//! every server's agents are in ClickHouse, not in this server's appends:
//! the tail polls the reader every [`POLL`] for the samples up to
//! `live_delay` behind now — a watermark, so that points still go out in
//! time order although agents' batches land late and at different times.
//! A sample that lands later than the delay is in range queries (a chart
//! shows it when it reloads its range), not in the tail.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use model::Selector;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::query::SeriesJson;
use crate::{ApiError, ApiState};

/// Events buffered per client before it counts as slow (then the broadcast
/// channel lags and the client receives a `lagged` event).
const CLIENT_BUFFER: usize = 16;

/// How often a ClickHouse-backed tail asks for new samples.
pub const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Most samples one poll reads (beyond: the poll is skipped and the client
/// told it lagged).
const POLL_MAX: usize = 2_000_000;

pub async fn live(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let text = params.get("match").map_or("", String::as_str);
    let sel = Selector::parse(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let (tx, out) = mpsc::channel::<Event>(CLIENT_BUFFER);
    if let Some(delay) = st.live_delay {
        tokio::spawn(poll(st, sel, delay, tx));
        return Ok(Sse::new(ReceiverStream::new(out).map(Ok)).keep_alive(KeepAlive::default()));
    }
    // Subscribe before listing so no append falls between list and stream.
    let mut rx = st.live.subscribe();
    let store = st.store.clone();
    let mut closing = st.closing.subscribe();
    tokio::spawn(async move {
        let mut ids: Vec<u32> = store.series(&sel).into_iter().map(|(id, _)| id).collect();
        let mut pos: HashMap<u32, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut rejected: HashSet<u32> = HashSet::new();
        let keys_of = |ids: &[u32]| -> Vec<model::SeriesKey> { ids.iter().filter_map(|&id| store.key(id)).collect() };
        if tx.send(series_event(&keys_of(&ids))).await.is_err() {
            return;
        }
        loop {
            let received = tokio::select! {
                r = rx.recv() => r,
                _ = closing.wait_for(|&c| c) => return,
            };
            let appended = match received {
                Ok(a) => a,
                Err(RecvError::Lagged(n)) => {
                    let ev = Event::default().event("lagged").data(format!("{{\"missed\":{n}}}"));
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let mut grew = false;
            for &(id, _) in &appended.points {
                if pos.contains_key(&id) || rejected.contains(&id) {
                    continue;
                }
                if store.key(id).is_some_and(|k| sel.matches(&k)) {
                    pos.insert(id, ids.len());
                    ids.push(id);
                    grew = true;
                } else {
                    rejected.insert(id);
                }
            }
            if grew && tx.send(series_event(&keys_of(&ids))).await.is_err() {
                return;
            }
            let mut values: Vec<Option<f64>> = vec![None; ids.len()];
            let mut any = false;
            for &(id, v) in &appended.points {
                if let Some(&i) = pos.get(&id) {
                    values[i] = Some(v);
                    any = true;
                }
            }
            if !any {
                continue;
            }
            if tx.send(points_event(appended.time.as_nanos(), &values)).await.is_err() {
                return;
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(out).map(Ok)).keep_alive(KeepAlive::default()))
}

fn series_event(keys: &[model::SeriesKey]) -> Event {
    let list: Vec<SeriesJson<'_>> = keys.iter().map(SeriesJson::new).collect();
    Event::default().event("series").data(serde_json::json!({ "series": list }).to_string())
}

fn points_event(t: i64, values: &[Option<f64>]) -> Event {
    let data = serde_json::json!({ "t": t as f64 / 1e9, "t_ns": t, "values": values });
    Event::default().event("points").data(data.to_string())
}

/// The tail of a ClickHouse-backed server: every [`POLL`], the samples of
/// the matched series in (last watermark, now - delay], as one `points`
/// event per distinct time, in time order.
async fn poll(st: ApiState, sel: Selector, delay: std::time::Duration, tx: mpsc::Sender<Event>) {
    let reader = st.reader.clone();
    let mut closing = st.closing.subscribe();
    let delay = delay.as_nanos() as i64;
    let mut ids: Vec<u32> = Vec::new();
    let mut keys: Vec<model::SeriesKey> = Vec::new();
    let mut done = st.now().as_nanos() - delay;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = closing.wait_for(|&c| c) => return,
        }
        let watermark = st.now().as_nanos() - delay;
        let known = ids.clone();
        let (reader, sel2) = (reader.clone(), sel.clone());
        let from = done;
        // Listing and reading block (ClickHouse answers over HTTP).
        let read = tokio::task::spawn_blocking(move || {
            let found = reader.series(&sel2);
            let seen: HashSet<u32> = known.iter().copied().collect();
            let new: Vec<(u32, model::SeriesKey)> = found.into_iter().filter(|(id, _)| !seen.contains(id)).collect();
            let mut all = known;
            all.extend(new.iter().map(|s| s.0));
            let reads = if watermark > from {
                reader.read_many(&all, model::Timestamp(from + 1), model::Timestamp(watermark), POLL_MAX)
            } else {
                Vec::new()
            };
            (new, reads)
        })
        .await;
        let Ok((new, reads)) = read else { return };
        if first || !new.is_empty() {
            first = false;
            for (id, key) in new {
                ids.push(id);
                keys.push(key);
            }
            if tx.send(series_event(&keys)).await.is_err() {
                return;
            }
        }
        if watermark <= from {
            continue;
        }
        done = watermark;
        let read: usize = reads.iter().map(|r| r.0.len()).sum();
        if read > POLL_MAX || reads.len() < ids.len() {
            let ev = Event::default().event("lagged").data("{\"missed\":1}");
            if tx.send(ev).await.is_err() {
                return;
            }
            continue;
        }
        // time -> values, in time order.
        let mut at: std::collections::BTreeMap<i64, Vec<Option<f64>>> = Default::default();
        for (i, (ts, vs)) in reads.iter().enumerate() {
            for (&t, &v) in ts.iter().zip(vs) {
                at.entry(t).or_insert_with(|| vec![None; ids.len()])[i] = Some(v);
            }
        }
        for (t, values) in at {
            if tx.send(points_event(t, &values)).await.is_err() {
                return;
            }
        }
    }
}
