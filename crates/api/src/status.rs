//! `GET /api/v1/status`: what the collector, SNMP poller and store are doing, including
//! every drop they counted.

use std::sync::atomic::Ordering::Relaxed;

use axum::Json;
use axum::extract::State;

use crate::ApiState;

pub async fn status(State(st): State<ApiState>) -> Json<serde_json::Value> {
    let s = st.store.stats();
    let du = st.store.disk_usage();
    let per_sample = |bytes: u64| (du.block_samples > 0).then(|| bytes as f64 / du.block_samples as f64);
    let (ev_stats, (events, event_bytes)) = (st.store.events().stats(), st.store.events().usage());
    let (wal_fsyncs, event_fsyncs) = st.store.fsyncs();
    let store = serde_json::json!({
        "series": st.store.n_series(),
        "samples_appended": s.samples_appended.load(Relaxed),
        "batches_appended": s.batches_appended.load(Relaxed),
        "out_of_order_dropped": s.out_of_order_dropped.load(Relaxed),
        "out_of_range_dropped": s.out_of_range_dropped.load(Relaxed),
        "series_refused": s.series_refused.load(Relaxed),
        "series_limit_dropped": s.series_limit_dropped.load(Relaxed),
        "unknown_series_dropped": s.unknown_series_dropped.load(Relaxed),
        "write_errors": s.write_errors.load(Relaxed),
        "flushes": s.flushes.load(Relaxed),
        "flush_errors": s.flush_errors.load(Relaxed),
        "compactions": s.compactions.load(Relaxed),
        "compaction_errors": s.compaction_errors.load(Relaxed),
        "corrupt_blocks": s.corrupt_blocks.load(Relaxed),
        "corrupt_chunks": s.corrupt_chunks.load(Relaxed),
        "wal_damaged_segments": s.wal_damaged_segments.load(Relaxed),
        "wal_replayed_samples": s.wal_replayed_samples.load(Relaxed),
        "wal_skipped_bytes": s.wal_skipped_bytes.load(Relaxed),
        "blocks": du.blocks,
        "block_files_open": st.store.open_block_files(),
        "block_bytes": du.block_bytes,
        "block_samples": du.block_samples,
        "block_bytes_per_sample": per_sample(du.block_bytes),
        "tier_bytes": du.tier_bytes,
        "raw_bytes_per_sample": per_sample(du.block_bytes - du.tier_bytes),
        "wal_bytes": du.wal_bytes,
        "wal_fsyncs": wal_fsyncs,
        "head_samples": du.head_samples,
        "retention_removed_samples": s.retention_removed_samples.load(Relaxed),
        "retention_removed_events": s.retention_removed_events.load(Relaxed),
        "retention_removed_bytes": s.retention_removed_bytes.load(Relaxed),
        "events": events,
        "event_bytes": event_bytes,
        "events_appended": ev_stats.events_appended.load(Relaxed),
        "event_batches_rejected": ev_stats.batches_rejected.load(Relaxed),
        "event_write_errors": ev_stats.write_errors.load(Relaxed),
        "event_corrupt_batches": ev_stats.corrupt_batches.load(Relaxed),
        "event_damaged_files": ev_stats.damaged_files.load(Relaxed),
        "event_skipped_bytes": ev_stats.skipped_bytes.load(Relaxed),
        "event_fsyncs": event_fsyncs,
    });
    let collector = st.collector.as_ref().map(|c| {
        serde_json::json!({
            "interval_seconds": st.interval.map(|d| d.as_secs_f64()),
            "rounds": c.rounds.load(Relaxed),
            "missed_rounds": c.missed_rounds.load(Relaxed),
            "dropped_batches": c.dropped_batches.load(Relaxed),
            "clock_steps": c.clock_steps.load(Relaxed),
            "source_errors": c.source_errors.load(Relaxed),
            "last_lateness_seconds": c.last_lateness_ns.load(Relaxed) as f64 / 1e9,
            "last_round_cpu_seconds": c.last_round_cpu_ns.load(Relaxed) as f64 / 1e9,
            "series": c.series.load(Relaxed),
        })
    });
    let snmp = st.snmp.as_ref().map(|p| {
        serde_json::json!({
            "targets": p.targets.load(Relaxed),
            "intervals": p.intervals.load(Relaxed),
            "last_answered": p.last_answered.load(Relaxed),
            "last_send_seconds": p.last_send_ns.load(Relaxed) as f64 / 1e9,
            "last_complete_seconds": p.last_complete_ns.load(Relaxed) as f64 / 1e9,
            "last_round_cpu_seconds": p.last_cpu_ns.load(Relaxed) as f64 / 1e9,
            "answers": p.answers.load(Relaxed),
            "silences": p.silences.load(Relaxed),
            "late": p.late.load(Relaxed),
            "duplicates": p.duplicates.load(Relaxed),
            "wrong_request_id": p.wrong_request_id.load(Relaxed),
            "unknown_source": p.unknown_source.load(Relaxed),
            "malformed": p.malformed.load(Relaxed),
            "pdu_errors": p.pdu_errors.load(Relaxed),
            "kernel_drops": p.kernel_drops.load(Relaxed),
            "send_errors": p.send_errors.load(Relaxed),
            "restarts": p.restarts.load(Relaxed),
            "stale_values": p.stale_values.load(Relaxed),
            "missed_intervals": p.missed_intervals.load(Relaxed),
            "dropped_batches": p.dropped_batches.load(Relaxed),
        })
    });
    let ingest = st.cluster.as_ref().map(|c| {
        let hosts = c.hosts.snapshot();
        let count = |s: &str| hosts.iter().filter(|h| h.state == s).count();
        serde_json::json!({
            "stats": crate::views::ingest(&c.ingest),
            "hosts_live": count("live"),
            "hosts_late": count("late"),
            "hosts_gone": count("gone"),
            "hosts_clock_off": hosts.iter().filter(|h| h.clock_off).count(),
        })
    });
    let http = serde_json::json!({
        "connections": st.http.connections.load(Relaxed),
        "connections_open": st.http.open.load(Relaxed),
        "accept_errors": st.http.accept_errors.load(Relaxed),
        "auth_refused": st.auth_refused.load(Relaxed),
        "heavy_requests": st.guard.stats.heavy.load(Relaxed),
        "busy_refused": st.guard.stats.busy_refused.load(Relaxed),
        "timed_out": st.guard.stats.timed_out.load(Relaxed),
    });
    Json(serde_json::json!({
        "http": http,
        "ingest": ingest,
        "influx": &st.influx.stats,
        "snmp": snmp,
        "version": env!("CARGO_PKG_VERSION"),
        "data_dir": st.store.root().display().to_string(),
        "interval_seconds": st.interval.map(|d| d.as_secs_f64()),
        "store": store,
        "collector": collector,
        "live_subscribers": st.live.receiver_count(),
    }))
}
