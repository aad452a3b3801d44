//! The process table of a batch: each process's name and executable
//! mappings as its samples saw them, uncompressed (a few hundred bytes).

use super::{BatchError, MAX_BUILD_ID, MAX_COMM, MAX_MAPS, MAX_PATH, MapInfo, ProcInfo};
use crate::varint::{Reader, put_str, put_u64};

/// The process table, uncompressed (a few hundred bytes a batch):
/// `n, (pid, comm, n_maps, (start, end - start, pgoff, build id, path)*)*`.
pub(super) fn put_procs(out: &mut Vec<u8>, procs: &[ProcInfo]) {
    put_u64(out, procs.len() as u64);
    for p in procs {
        put_u64(out, u64::from(p.pid));
        put_str(out, &p.comm);
        put_u64(out, p.maps.len() as u64);
        for m in &p.maps {
            put_u64(out, m.start);
            put_u64(out, m.end - m.start);
            put_u64(out, m.pgoff);
            put_u64(out, m.build_id.len() as u64);
            out.extend_from_slice(&m.build_id);
            put_str(out, &m.path);
        }
    }
}

pub(super) fn get_procs(r: &mut Reader<'_>, n: usize) -> Result<Vec<ProcInfo>, BatchError> {
    let bad = BatchError::Malformed;
    let count = |r: &mut Reader<'_>, max: usize, what: &'static str| {
        r.u64().and_then(|v| usize::try_from(v).ok()).filter(|&v| v <= max).ok_or(bad(what))
    };
    let n_procs = count(r, n, "process count")?;
    let mut procs = Vec::with_capacity(n_procs.min(r.remaining()));
    for _ in 0..n_procs {
        let pid = r.u32().ok_or(bad("process id"))?;
        let comm = r.str().filter(|c| c.len() <= MAX_COMM).ok_or(bad("process name"))?.to_owned();
        let n_maps = count(r, MAX_MAPS, "mapping count")?;
        let mut maps = Vec::with_capacity(n_maps.min(r.remaining()));
        for _ in 0..n_maps {
            let start = r.u64().ok_or(bad("mapping start"))?;
            let len = r.u64().filter(|&l| l > 0).ok_or(bad("mapping length"))?;
            let end = start.checked_add(len).ok_or(bad("mapping end"))?;
            let pgoff = r.u64().ok_or(bad("mapping offset"))?;
            let id_len = count(r, MAX_BUILD_ID, "build id length")?;
            let build_id = r.bytes(id_len).ok_or(bad("build id"))?.to_vec();
            let path = r.str().filter(|p| p.len() <= MAX_PATH).ok_or(bad("mapping path"))?.to_owned();
            maps.push(MapInfo { start, end, pgoff, build_id, path });
        }
        procs.push(ProcInfo { pid, comm, maps });
    }
    Ok(procs)
}
