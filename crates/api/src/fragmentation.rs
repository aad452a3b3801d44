//! The fragmentation maps (`kansoku up --fragmentation PATH`, crate
//! `extents`):
//! - `GET /api/v1/fragmentation`: the paths scanned and the times of the
//!   maps kept, oldest first (nanoseconds as strings: a JavaScript number
//!   cannot hold them exactly);
//! - `GET /api/v1/fragmentation/map?path=P[&time=NS][&cells=N]`: one map
//!   (the newest by default, else the one kept at or before `time`): the
//!   device's address space in `cells` cells (default 4096): a cell with
//!   any byte of a scanned file holds the index into `owners` (file paths
//!   relative to the scanned path) of the file with most bytes there; else
//!   -1 if free space is most of it, -2 otherwise (metadata, other files); the
//!   figures; the most fragmented files. `zoom=files` maps only the bytes
//!   from the scanned files' first run to their last (`from`, `to` in the
//!   answer say which): on a large device a few files are invisible
//!   otherwise.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use serde_json::{Value, json};

use crate::{ApiError, ApiState};

/// Most cells a map may be asked in.
const MAX_CELLS: usize = 1 << 20;
/// Files listed as the most fragmented.
const TOP_FILES: usize = 20;

fn kept(st: &ApiState) -> Result<&(extents::Snapshots, Vec<std::path::PathBuf>), ApiError> {
    st.fragmentation.as_ref().ok_or_else(|| {
        ApiError::Unavailable("no fragmentation maps here: start kansoku up with --fragmentation PATH".into())
    })
}

pub async fn list(State(st): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let (snaps, paths) = kept(&st)?;
    let times = snaps.times().map_err(|e| ApiError::Internal(format!("{}: {e}", snaps.dir().display())))?;
    let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let times: Vec<String> = times.iter().map(i64::to_string).collect();
    Ok(Json(json!({ "paths": paths, "times": times })))
}

pub async fn map(
    State(st): State<ApiState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let (snaps, _) = kept(&st)?;
    let get = |k: &str| params.get(k).map(String::as_str);
    let path = get("path").ok_or_else(|| ApiError::BadRequest("missing parameter `path`".into()))?.to_owned();
    let cells = match get("cells") {
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_CELLS).contains(&n) => n,
            _ => return Err(ApiError::BadRequest(format!("`cells`: a number from 1 to {MAX_CELLS}"))),
        },
        None => 4096,
    };
    let at = match get("time") {
        Some(v) => {
            Some(v.parse::<i64>().map_err(|_| ApiError::BadRequest("`time`: nanoseconds since the epoch".into()))?)
        }
        None => None,
    };
    let zoom = match get("zoom") {
        None | Some("device") => false,
        Some("files") => true,
        Some(z) => return Err(ApiError::BadRequest(format!("`zoom={z}`: device (default) or files"))),
    };
    let snaps = snaps.clone();
    st.guard.run(move || answer(&snaps, &path, at, cells, zoom)).await?
}

fn answer(
    snaps: &extents::Snapshots,
    path: &str,
    at: Option<i64>,
    n: usize,
    zoom: bool,
) -> Result<Json<Value>, ApiError> {
    let times = snaps.times().map_err(|e| ApiError::Internal(e.to_string()))?;
    let time = times
        .iter()
        .rev()
        .find(|&&t| at.is_none_or(|a| t <= a))
        .copied()
        .ok_or_else(|| ApiError::BadRequest("no map kept at or before that time".into()))?;
    let round = snaps.read(time).map_err(|e| ApiError::Internal(format!("the map of {time}: {e}")))?;
    let snap = round.into_iter().find(|s| s.path == path).ok_or_else(|| {
        ApiError::BadRequest(format!("{path:?} was not scanned at {time} (see /api/v1/fragmentation for the paths)"))
    })?;
    let whole = (0, snap.device_bytes);
    let range = if zoom { extents::files_span(&snap).unwrap_or(whole) } else { whole };
    let raw = extents::cells(&snap, n, range);
    // Owners renumbered to those shown, in order of first appearance.
    let mut index: HashMap<i32, i32> = HashMap::new();
    let mut owners: Vec<&str> = Vec::new();
    let cells: Vec<i32> = raw
        .iter()
        .map(|&c| {
            if c < 0 {
                return c;
            }
            *index.entry(c).or_insert_with(|| {
                owners.push(&snap.files[c as usize].path);
                owners.len() as i32 - 1
            })
        })
        .collect();
    let mut worst: Vec<&extents::FileMap> = snap.files.iter().filter(|f| f.extra_runs() > 0).collect();
    worst.sort_by(|a, b| b.runs.len().cmp(&a.runs.len()).then_with(|| a.path.cmp(&b.path)));
    let top: Vec<Value> = worst
        .iter()
        .take(TOP_FILES)
        .map(|f| json!({ "path": f.path, "size": f.size, "runs": f.runs.len(), "extra_runs": f.extra_runs() }))
        .collect();
    Ok(Json(json!({
        "time": time.to_string(),
        "path": snap.path,
        "device_bytes": snap.device_bytes,
        "block_size": snap.block_size,
        "figures": snap.figures,
        "truncated": snap.truncated,
        "from": range.0,
        "to": range.1,
        "cells": cells,
        "owners": owners,
        "most_fragmented": top,
    })))
}
