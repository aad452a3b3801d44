//! The features of a host over windows, each one PromQL range query over
//! the stored series (so they read the same data the dashboard shows).

use promql::{Engine, Value};
use store::Store;

/// What the rules look at, for one window. `None`: the host has no such
/// data (no kernel tracing, no pressure stall information).
#[derive(Clone, Debug, Default, PartialEq)]
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
}

/// One value per step of a range query, summed over its series (None
/// where none had a value, or the query failed: a missing metric).
fn column(e: &Engine, q: &str, (start, end, step): (i64, i64, i64)) -> Vec<Option<f64>> {
    let n = ((end - start) / step + 1) as usize;
    let Ok(out) = e.range(q, start, end, step) else { return vec![None; n] };
    match out.value {
        Value::Vector(series) => (0..n)
            .map(|i| {
                let vals: Vec<f64> = series.iter().filter_map(|s| s.points.get(i).copied().flatten()).collect();
                (!vals.is_empty()).then(|| vals.iter().sum())
            })
            .collect(),
        Value::Scalar(v) => v.into_iter().map(|x| x.is_finite().then_some(x)).collect(),
        _ => vec![None; n],
    }
}

/// The features of `host` for each window of `window_ns` ending at
/// `start`, `start + window`, … up to `end`.
pub fn features(store: &Store, host: &str, start: i64, end: i64, window_ns: i64) -> Vec<Features> {
    let e = Engine::new(store);
    let h = host.replace('\\', "\\\\").replace('"', "\\\"");
    let w = format!("{}ms", (window_ns / 1_000_000).max(1));
    let span = (start, end, window_ns);
    let cpu = |modes: &str| {
        format!(
            "(sum(rate(node_cpu_seconds_total{{host=\"{h}\",mode=~\"{modes}\"}}[{w}])) or vector(0)) / sum(rate(node_cpu_seconds_total{{host=\"{h}\"}}[{w}]))"
        )
    };
    let rate = |metric: &str, extra: &str| format!("sum(rate({metric}{{host=\"{h}\"{extra}}}[{w}]))");
    let cols = [
        column(&e, &cpu("user|nice"), span),
        column(&e, &cpu("system|irq|softirq"), span),
        column(&e, &cpu("iowait"), span),
        column(&e, &cpu("idle"), span),
        column(&e, &rate("node_pressure_cpu_waiting_seconds_total", ""), span),
        column(&e, &rate("node_pressure_io_waiting_seconds_total", ""), span),
        column(&e, &rate("node_pressure_memory_waiting_seconds_total", ""), span),
        column(&e, &rate("kernel_offcpu_seconds_sum", ",state=\"D\""), span),
        column(&e, &rate("kernel_runqueue_seconds_sum", ""), span),
        column(&e, &rate("kernel_block_service_seconds_sum", ""), span),
        column(
            &e,
            &format!(
                "{} / {}",
                rate("kernel_block_service_seconds_sum", ""),
                rate("kernel_block_service_seconds_count", "")
            ),
            span,
        ),
        column(
            &e,
            &format!(
                "sum(rate(kernel_block_service_seconds_sum{{host=\"{h}\"}}[1h] offset {w})) / sum(rate(kernel_block_service_seconds_count{{host=\"{h}\"}}[1h] offset {w}))"
            ),
            span,
        ),
        column(&e, &rate("kernel_syscall_seconds_count", ",syscall=\"futex\""), span),
        column(&e, &format!("count(count by (cpu) (node_cpu_seconds_total{{host=\"{h}\"}}))"), span),
        column(&e, &rate("kernel_lock_wait_seconds_sum", ""), span),
    ];
    let n = cols[0].len();
    (0..n)
        .map(|i| {
            let c = |k: usize| cols[k][i].filter(|v| v.is_finite());
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
            }
        })
        .collect()
}
