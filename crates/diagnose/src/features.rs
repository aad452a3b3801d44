//! The features of a host over windows, each one PromQL range query over
//! the stored series (so they read the same data the dashboard shows).

use std::collections::BTreeMap;

use promql::{Engine, Value};

/// What the rules look at, for one window. `None`: the host has no such
/// data (no kernel tracing, no pressure stall information).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Features {
    /// Window end (ns).
    pub t: i64,
    /// Shares of all CPU time: user (and nice), kernel (system, irq,
    /// softirq), waiting on I/O, idle.
    pub user: Option<f64>,
    pub system: Option<f64>,
    pub iowait: Option<f64>,
    pub idle: Option<f64>,
    /// Share of time some task waited for the CPU, for I/O, for memory
    /// (pressure stall information).
    pub psi_cpu: Option<f64>,
    pub psi_io: Option<f64>,
    pub psi_memory: Option<f64>,
    /// Average tasks off the CPU in uninterruptible sleep (D: disk I/O).
    pub tasks_d: Option<f64>,
    /// Average tasks waiting in a run queue.
    pub runqueue: Option<f64>,
    /// Average block requests in service, and their mean service time (s)
    /// now and over the hour before (the device's own baseline).
    pub io_in_service: Option<f64>,
    pub io_service: Option<f64>,
    pub io_service_baseline: Option<f64>,
    /// futex calls per second (lock handoffs, contended ones among them).
    pub futex_per_s: Option<f64>,
    /// CPUs of the host.
    pub cpus: Option<f64>,
    /// Average tasks waiting for contended kernel locks.
    pub lock_wait: Option<f64>,
    /// Average tasks waiting on futexes (user-space locks and condition
    /// variables; idle thread pools wait here too).
    #[serde(default)]
    pub futex_wait: Option<f64>,
    /// Average tasks stalled reclaiming memory to allocate (direct and
    /// cgroup reclaim).
    #[serde(default)]
    pub reclaim_stall: Option<f64>,
    /// Average packets waiting in network queueing disciplines, and their
    /// mean wait (s).
    #[serde(default)]
    pub net_waiting: Option<f64>,
    #[serde(default)]
    pub net_wait: Option<f64>,
}

impl Features {
    /// The sources that gave this window nothing, by name: a verdict made
    /// without them says so ("no data"), not a confident "healthy" — as
    /// when the kernel tracer's thread died and its series stopped.
    pub fn no_data(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.user.is_none() || self.system.is_none() {
            out.push("CPU counters");
        }
        if self.psi_cpu.is_none() && self.psi_io.is_none() && self.psi_memory.is_none() {
            out.push("pressure stalls (PSI)");
        }
        let kernel = [self.lock_wait, self.futex_per_s, self.futex_wait, self.reclaim_stall, self.net_waiting];
        if kernel.iter().all(Option::is_none) {
            out.push("kernel tracer (locks, futexes, reclaim, qdisc waits)");
        }
        if self.io_in_service.is_none() && self.tasks_d.is_none() {
            out.push("block I/O and task states");
        }
        out
    }
}

/// One value per step of a range query per host (its series' `host`
/// label; None where it had no value, or the query failed: a missing
/// metric).
fn columns(e: &Engine, q: &str, (start, end, step): (i64, i64, i64)) -> BTreeMap<String, Vec<Option<f64>>> {
    let Ok(out) = e.range(q, start, end, step) else { return BTreeMap::new() };
    let Value::Vector(series) = out.value else { return BTreeMap::new() };
    series.into_iter().map(|s| (promql::value::get(&s.labels, "host").to_owned(), s.points)).collect()
}

/// The features of every host `matcher` selects (`host="a"`,
/// `host=~".+"`), for each window of `window_ns` ending at `start`,
/// `start + window`, … up to `end`: one PromQL range query per feature,
/// grouped by host, however many hosts there are.
pub fn features_by_host(
    store: &dyn source::Source,
    matcher: &str,
    start: i64,
    end: i64,
    window_ns: i64,
) -> BTreeMap<String, Vec<Features>> {
    let e = Engine::new(store);
    let m = matcher;
    let w = format!("{}ms", (window_ns / 1_000_000).max(1));
    let span = (start, end, window_ns);
    let all_cpu = format!("sum by (host) (rate(node_cpu_seconds_total{{{m}}}[{w}]))");
    // A mode a host never reports counts as 0 of its CPU time.
    let cpu = |modes: &str| {
        format!(
            "(sum by (host) (rate(node_cpu_seconds_total{{{m},mode=~\"{modes}\"}}[{w}])) or {all_cpu} * 0) / {all_cpu}"
        )
    };
    let rate = |metric: &str, extra: &str| format!("sum by (host) (rate({metric}{{{m}{extra}}}[{w}]))");
    let ratio =
        |metric: &str| format!("{} / {}", rate(&format!("{metric}_sum"), ""), rate(&format!("{metric}_count"), ""));
    let queries = [
        cpu("user|nice"),
        cpu("system|irq|softirq"),
        cpu("iowait"),
        cpu("idle"),
        rate("node_pressure_cpu_waiting_seconds_total", ""),
        rate("node_pressure_io_waiting_seconds_total", ""),
        rate("node_pressure_memory_waiting_seconds_total", ""),
        rate("kernel_offcpu_seconds_sum", ",state=\"D\""),
        rate("kernel_runqueue_seconds_sum", ""),
        rate("kernel_block_service_seconds_sum", ""),
        ratio("kernel_block_service_seconds"),
        format!(
            "sum by (host) (rate(kernel_block_service_seconds_sum{{{m}}}[1h] offset {w})) / sum by (host) (rate(kernel_block_service_seconds_count{{{m}}}[1h] offset {w}))"
        ),
        rate("kernel_syscall_seconds_count", ",syscall=\"futex\""),
        format!("count by (host) (count by (host, cpu) (node_cpu_seconds_total{{{m}}}))"),
        rate("kernel_lock_wait_seconds_sum", ""),
        rate("kernel_futex_wait_seconds_sum", ""),
        rate("kernel_reclaim_stall_seconds_sum", ""),
        rate("kernel_net_qdisc_seconds_sum", ""),
        ratio("kernel_net_qdisc_seconds"),
    ];
    let cols: Vec<BTreeMap<String, Vec<Option<f64>>>> = queries.iter().map(|q| columns(&e, q, span)).collect();
    let n = ((end - start) / window_ns + 1) as usize;
    // Every host with CPU counters (the rules' first need) or any feature.
    let hosts: std::collections::BTreeSet<&String> = cols.iter().flat_map(BTreeMap::keys).collect();
    hosts
        .into_iter()
        .map(|host| {
            let windows = (0..n)
                .map(|i| {
                    let c = |k: usize| {
                        cols[k].get(host).and_then(|v| v.get(i).copied().flatten()).filter(|v| v.is_finite())
                    };
                    Features {
                        t: start + i as i64 * window_ns,
                        user: c(0),
                        system: c(1),
                        iowait: c(2),
                        idle: c(3),
                        psi_cpu: c(4),
                        psi_io: c(5),
                        psi_memory: c(6),
                        tasks_d: c(7),
                        runqueue: c(8),
                        io_in_service: c(9),
                        io_service: c(10),
                        io_service_baseline: c(11),
                        futex_per_s: c(12),
                        cpus: c(13),
                        lock_wait: c(14),
                        futex_wait: c(15),
                        reclaim_stall: c(16),
                        net_waiting: c(17),
                        net_wait: c(18),
                    }
                })
                .collect();
            (host.clone(), windows)
        })
        .collect()
}

/// The features of `host` for each window of `window_ns` ending at
/// `start`, `start + window`, … up to `end` (windows without data have
/// every feature None).
pub fn features(store: &dyn source::Source, host: &str, start: i64, end: i64, window_ns: i64) -> Vec<Features> {
    features_by_host(store, &format!("host={}", model::quoted(host)), start, end, window_ns)
        .remove(host)
        .unwrap_or_else(|| {
            let n = ((end - start) / window_ns + 1) as usize;
            (0..n).map(|i| Features { t: start + i as i64 * window_ns, ..Features::default() }).collect()
        })
}
