//! The JSON shapes of what other crates report — agents, SNMP targets,
//! profile rows — made here, at the API's edge, so those crates carry no
//! serialisation of their own and each shape is documented once
//! (`docs/api.md`).

use serde_json::{Value, json};

/// One agent of `GET /api/v1/hosts`.
pub fn host(h: &ingest::hosts::HostInfo) -> Value {
    json!({
        "host": h.host,
        "state": h.state,
        "agent_version": h.agent_version,
        "addr": h.addr,
        "connections": h.connections,
        "connected_since_ns": h.connected_since_ns,
        "last_seen_ns": h.last_seen_ns,
        "last_batch_ns": h.last_batch_ns,
        "interval_ns": h.interval_ns,
        "batch_ns": h.batch_ns,
        "batches": h.batches,
        "samples": h.samples,
        "events": h.events,
        "wire_bytes": h.wire_bytes,
        "duplicate_batches": h.duplicate_batches,
        "clock_offset_ns": h.clock_offset_ns,
        "rtt_ns": h.rtt_ns,
        "clock_off": h.clock_off,
        "agent_cpu": h.agent_cpu,
        "backlog_batches": h.backlog_batches,
        "spool_dropped_samples": h.spool_dropped_samples,
        "spool_bytes": h.spool_bytes,
    })
}

/// One row of `GET /api/v1/profile/top`.
pub fn top_row(r: &perf::symbols::TopRow) -> Value {
    json!({ "rank": r.rank, "symbol": r.symbol, "module": r.module, "samples": r.samples, "share": r.share })
}

/// One target of `GET /api/v1/snmp/targets`.
pub fn snmp_target(t: &model::snmp::TargetView) -> Value {
    let oids: Vec<Value> = t
        .oids
        .iter()
        .map(|o| {
            json!({
                "oid": o.oid,
                "series": o.series,
                "value": o.value,
                "error": o.error,
                "update_period_seconds": o.update_period_seconds,
                "stale": o.stale,
            })
        })
        .collect();
    json!({
        "target": t.target,
        "address": t.address,
        "labels": t.labels.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "up": t.up,
        "rtt_seconds": t.rtt_seconds,
        "oids": oids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_the_documented_ones() {
        let mut h = ingest::hosts::HostInfo::default();
        (h.host, h.state, h.clock_offset_ns) = ("n1".into(), "live", Some(-5));
        let v = host(&h);
        assert_eq!(
            (v["host"].as_str(), v["state"].as_str(), v["clock_offset_ns"].as_i64()),
            (Some("n1"), Some("live"), Some(-5))
        );
        assert!(v["rtt_ns"].is_null());
        assert_eq!(v.as_object().unwrap().len(), 22, "every documented field, nothing private");
        let row = perf::symbols::TopRow { rank: 1, symbol: "f".into(), module: "m".into(), samples: 3, share: 50.0 };
        let v = top_row(&row);
        assert_eq!((v["rank"].as_u64(), v["symbol"].as_str(), v["share"].as_f64()), (Some(1), Some("f"), Some(50.0)));
        assert_eq!(v.as_object().unwrap().len(), 5);
    }
}
