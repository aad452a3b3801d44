//! Profiles over ClickHouse's `events` table: counted there, by one GROUP
//! BY per request (per pid and ip for the top table, per pid and call chain
//! for flame graphs and pprof, per CPU, bucket and pid for the timeline), so
//! only the counts travel — a minute of 64 CPUs at 10 kHz is 38 M events
//! and typically a few thousand rows of counts. The chains those counts
//! name, the process tables (the newest description of each process) and
//! each stream's newest event follow in three small queries.
//!
//! On one server without replication a batch stored just before its server
//! died is stored twice, and its events count twice (docs/scale.md).

use std::collections::HashMap;

use codec::events::{MapInfo, ProcInfo};
use source::EventQuery;
use source::{EventCounts, EventSource, EventsError, Shape, bucket_width};

use crate::reader::{Reader, Rows};

/// Process tables are read from this long before the range: a batch that
/// began before the range may hold events inside it.
const PROCS_BEFORE_NS: i64 = 60_000_000_000;

impl EventSource for Reader {
    fn count(&self, q: &EventQuery, pid: Option<u32>, shape: Shape, _max: u64) -> Result<EventCounts, EventsError> {
        let streams = self.matching(&q.streams);
        let mut out = EventCounts::default();
        let (from, to) = (q.from.max(0), q.to.max(0));
        if streams.is_empty() || q.from > q.to {
            return Ok(out);
        }
        let db = self.db();
        let list = streams.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(",");
        let mut filter = format!("stream IN ({list}) AND t >= {from} AND t <= {to}");
        if !q.cpus.is_empty() {
            let cpus = q.cpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            filter.push_str(&format!(" AND cpu IN ({cpus})"));
        }
        // Each stream's newest event, of any process: which boot's kernel
        // names kernel frames.
        let newest = format!("SELECT stream, max(t) FROM {db}.events WHERE {filter} GROUP BY stream FORMAT RowBinary");
        if let Some(p) = pid {
            filter.push_str(&format!(" AND pid = {p}"));
        }
        let get = |what: &str, sql: &str| {
            self.query_bytes(sql).map_err(|e| {
                self.failed(what, &e);
                EventsError::Unavailable(e.to_string())
            })
        };
        let bad = |what: &str| {
            self.read_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            EventsError::Unavailable(format!("ClickHouse's answer for {what} does not decode"))
        };
        match shape {
            Shape::Ips => {
                let sql = format!(
                    "SELECT pid, ip, count() FROM {db}.events WHERE {filter} GROUP BY pid, ip FORMAT RowBinary"
                );
                let bytes = get("counting events by ip", &sql)?;
                let mut r = Rows(&bytes);
                while !r.is_empty() {
                    let (Some(p), Some(ip), Some(n)) = (r.u32(), r.u64(), r.u64()) else { return Err(bad("the ips")) };
                    *out.ips.entry((p, ip)).or_default() += n;
                    out.events += n;
                }
            }
            Shape::Stacks => {
                let sql = format!(
                    "SELECT pid, stack, if(stack = 0, ip, 0) AS leaf, count() FROM {db}.events WHERE {filter} \
                     GROUP BY pid, stack, leaf FORMAT RowBinary"
                );
                let bytes = get("counting events by call chain", &sql)?;
                let mut counted = Vec::new();
                let mut r = Rows(&bytes);
                while !r.is_empty() {
                    let (Some(p), Some(stack), Some(leaf), Some(n)) = (r.u32(), r.u64(), r.u64(), r.u64()) else {
                        return Err(bad("the call chains"));
                    };
                    counted.push((p, stack, leaf, n));
                }
                // The chains counted, each once (a replacing table may still
                // hold a chain twice before it merges).
                let sql = format!(
                    "SELECT hash, any(frames) FROM {db}.stacks WHERE stream IN ({list}) AND hash GLOBAL IN \
                     (SELECT DISTINCT stack FROM {db}.events WHERE {filter} AND stack != 0) GROUP BY hash FORMAT RowBinary"
                );
                let bytes = get("reading call chains", &sql)?;
                let mut chains: HashMap<u64, Vec<u64>> = HashMap::new();
                let mut r = Rows(&bytes);
                while !r.is_empty() {
                    let (Some(hash), Some(frames)) = (r.u64(), r.u64s()) else { return Err(bad("the chains")) };
                    chains.insert(hash, frames);
                }
                for (p, stack, leaf, n) in counted {
                    let frames = if stack == 0 {
                        vec![leaf]
                    } else {
                        out.with_chains += n;
                        // A chain its table lacks (never, unless rows were
                        // removed by hand): its events still count, unnamed.
                        chains.get(&stack).cloned().unwrap_or_else(|| vec![0])
                    };
                    *out.stacks.entry((p, frames)).or_default() += n;
                    out.events += n;
                }
            }
            Shape::Timeline { buckets } => {
                let width = bucket_width(q, buckets);
                let sql = format!(
                    "SELECT cpu, toUInt64(intDiv(t - {from}, {width})) AS b, pid, count() FROM {db}.events \
                     WHERE {filter} GROUP BY cpu, b, pid FORMAT RowBinary"
                );
                let bytes = get("counting events per bucket", &sql)?;
                let mut r = Rows(&bytes);
                while !r.is_empty() {
                    let (Some(cpu), Some(b), Some(p), Some(n)) = (r.u16(), r.u64(), r.u32(), r.u64()) else {
                        return Err(bad("the timeline"));
                    };
                    let row = out.cells.entry(u32::from(cpu)).or_insert_with(|| vec![HashMap::new(); buckets]);
                    *row[(b as usize).min(buckets - 1)].entry(p).or_default() += n as u32;
                    out.events += n;
                }
            }
        }
        let bytes = get("the streams' newest events", &newest)?;
        let boots: HashMap<u64, &str> = streams.iter().filter_map(|(id, k)| Some((*id, k.get("boot")?))).collect();
        let mut r = Rows(&bytes);
        while !r.is_empty() {
            let (Some(stream), Some(t)) = (r.u64(), r.u64()) else { return Err(bad("the streams")) };
            if let Some(boot) = boots.get(&stream) {
                out.boots.push((t as i64, (*boot).to_owned()));
            }
        }
        // The newest description of each process the range may name.
        let lo = from.saturating_sub(PROCS_BEFORE_NS).max(0);
        let pid_filter = pid.map(|p| format!(" AND pid = {p}")).unwrap_or_default();
        let sql = format!(
            "SELECT pid, argMax(comm, t), argMax(map_start, t), argMax(map_end, t), argMax(map_pgoff, t), \
             argMax(map_build_id, t), argMax(map_path, t) FROM {db}.procs \
             WHERE stream IN ({list}) AND t >= {lo} AND t <= {to}{pid_filter} GROUP BY pid FORMAT RowBinary"
        );
        let bytes = get("reading process tables", &sql)?;
        out.procs = decode_procs(&bytes).ok_or_else(|| bad("the process tables"))?;
        Ok(out)
    }
}

/// Decodes process-table rows (pid, comm, map starts, ends, offsets, build
/// ids, paths): None where they do not decode.
pub fn decode_procs(bytes: &[u8]) -> Option<Vec<ProcInfo>> {
    let mut r = Rows(bytes);
    let mut out = Vec::new();
    while !r.is_empty() {
        let pid = r.u32()?;
        let comm = r.string()?;
        let (start, end, pgoff) = (r.u64s()?, r.u64s()?, r.u64s()?);
        let (ids, paths) = (r.byte_strings()?, r.strings()?);
        let n = start.len();
        if [end.len(), pgoff.len(), ids.len(), paths.len()].iter().any(|&l| l != n) {
            return None;
        }
        let maps = (0..n)
            .map(|i| MapInfo {
                start: start[i],
                end: end[i],
                pgoff: pgoff[i],
                build_id: ids[i].clone(),
                path: paths[i].clone(),
            })
            .collect();
        out.push(ProcInfo { pid, comm, maps });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_rows_decode_as_written() {
        let procs = vec![
            ProcInfo {
                pid: 7,
                comm: "sh".into(),
                maps: vec![MapInfo { start: 1, end: 9, pgoff: 2, build_id: vec![0xff, 0], path: "/bin/sh".into() }],
            },
            ProcInfo { pid: 8, comm: String::new(), maps: vec![] },
        ];
        let mut bytes = Vec::new();
        for p in &procs {
            crate::writer::put_proc(&mut bytes, p);
        }
        assert_eq!(decode_procs(&bytes).unwrap(), procs);
        for n in 0..bytes.len() {
            assert!(decode_procs(&bytes[..n]).is_none_or(|p| p.len() < 2), "{n}");
        }
    }
}
