//! `kansoku lab`: reproducible experiments. Each prints its machine setup and
//! its figures beside the peer measured in the same run. Experiments that
//! need a server or an agent run the kansoku binary itself
//! (`std::env::current_exe`): they are meant to be run as `kansoku lab …`.
//!
//! Grouped by what they measure: `cost`, `storage`, `cluster`, `robustness`,
//! `workloads`. What it measures: the collector's cost (`collector_cost`), whole processes
//! beside PCP, collectd, node_exporter and the floor of reading the same
//! files (`up_cost`, `kansoku lab read-floor`), SNMP beside its kernel floor
//! (`snmp_bench`, `Poller::floor_once`), the store (`store_bench`,
//! `clickhouse_bench`), the kernel tracer's cost (`trace_cost`), transfer and
//! the paper's replay (`transfer`, `replay`), interference, with their HTML
//! report (`report`); the hostile-client soak (`soak`) and issue 42's hostile
//! requests (`hostile`, also sent by `hostile_e2e`); the verdict's validation
//! campaign (`diagnose`: workloads in random order, the confusion matrix);
//! HTTP load beside wrk and ab (`load`); experiment files run and results
//! compared (`experiment`); the degradation curve (`latency`); component
//! limits beside theory (`limits`). `procs` reads other processes' CPU
//! clocks, ticks, resident sets and descendants; `machine` describes the
//! machine.
//!
//! Every lab prints its results on stdout (`out`: tables, ratios, the
//! verdict, the files it wrote) and its progress and warnings on stderr, so
//! `kansoku lab … > result.txt` keeps the results. Every duration argument
//! is a `Duration` parsed by `model::parse_duration` (`100ms`, `10s`, `1h`).

pub mod cluster;
pub mod cost;
mod out;
pub mod procs;
pub mod robustness;
pub mod storage;
pub mod workloads;

// Each experiment by its own name too (`lab::up_cost`), as the binary
// dispatches them.
pub use cluster::{interference, replay, report, transfer};
pub use cost::{collector_cost, snmp_bench, trace_cost, up_cost};
pub use robustness::{hostile, soak};
pub use storage::{clickhouse_bench, promql_bench, store_bench};
pub use workloads::{diagnose, experiment, latency, limits, load};

/// The machine an experiment ran on: CPU model, cores, kernel.
pub fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|c| {
        c.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
    });
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    serde_json::json!({ "cpu": cpu, "cores": cores, "kernel": kernel })
}

/// [`machine`] as one line: `2 x AMD EPYC …, Linux 6.18.44`.
pub fn machine_line() -> String {
    let m = machine();
    format!(
        "{} x {}, Linux {}",
        m["cores"],
        m["cpu"].as_str().unwrap_or("unknown cpu"),
        m["kernel"].as_str().unwrap_or_default()
    )
}
