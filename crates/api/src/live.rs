//! `GET /api/v1/live?match=SELECTOR`: server-sent events, one per collection
//! interval, carrying only the new samples (clients never re-fetch history).
//!
//! Events: `series` (the full list of matched series; sent first and again
//! whenever a new series appears — values arrays index into it), `points`
//! (`{"t": seconds, "t_ns": ns, "values": [...]}`, `null` where a series had
//! no sample), and `lagged` (`{"missed": n}`: this client fell behind by n
//! intervals, which it must show as a gap).

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

pub async fn live(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let text = params.get("match").map_or("", String::as_str);
    let sel = Selector::parse(text).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    // Subscribe before listing so no append falls between list and stream.
    let mut rx = st.live.subscribe();
    let (tx, out) = mpsc::channel::<Event>(CLIENT_BUFFER);
    let store = st.store.clone();
    let mut closing = st.closing.subscribe();
    tokio::spawn(async move {
        let mut ids: Vec<u32> = store.series(&sel).into_iter().map(|(id, _)| id).collect();
        let mut pos: HashMap<u32, usize> = ids.iter().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut rejected: HashSet<u32> = HashSet::new();
        let series_event = |ids: &[u32]| {
            let keys: Vec<_> = ids.iter().filter_map(|&id| store.key(id)).collect();
            let list: Vec<SeriesJson<'_>> = keys.iter().map(SeriesJson::new).collect();
            Event::default().event("series").data(serde_json::json!({ "series": list }).to_string())
        };
        if tx.send(series_event(&ids)).await.is_err() {
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
            if grew && tx.send(series_event(&ids)).await.is_err() {
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
            let t = appended.time.as_nanos();
            let data = serde_json::json!({ "t": t as f64 / 1e9, "t_ns": t, "values": values });
            if tx.send(Event::default().event("points").data(data.to_string())).await.is_err() {
                return;
            }
        }
    });
    Ok(Sse::new(ReceiverStream::new(out).map(Ok)).keep_alive(KeepAlive::default()))
}
