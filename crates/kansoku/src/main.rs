//! The `kansoku` binary: parses the command line and wires the library crates
//! together. No logic lives here that a library could hold.
//!
//! Its modules: `args` (shared value parsers, `PerfArgs`), `up` (`kansoku
//! up`, also `kansoku snmp`, `kansoku server` and `lab synth`), `cluster`
//! (`kansoku agent` and the ingest flags), `read` (the read commands),
//! `export` (CSV, line protocol, OpenMetrics, and Parquet behind the default
//! `parquet` feature), `import`.

mod args;
mod cluster;
mod export;
mod import;
mod read;
mod sample;
mod up;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "kansoku", version, about = "High-resolution performance observatory", propagate_version = true)]
struct Cli {
    /// The configuration file: its keys are the flags' names, for every
    /// command (docs/config.md); flags typed win over it. Default:
    /// /etc/kansoku/kansoku.toml if it exists. /dev/null: none.
    #[arg(long, global = true, value_name = "FILE", env = "KANSOKU_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    log: logs::LogArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Observe this host: collect, store under --data, serve the API on --listen.
    Up(up::UpArgs),
    /// Collect this host like `up` and ship everything to a `kansoku server`
    /// (spooled on disk until the server acknowledges it).
    Agent(cluster::AgentArgs),
    /// Store, API and dashboard for many hosts: agents connect to --ingest.
    Server(Box<up::ServerArgs>),
    /// Poll SNMP targets on interval boundaries (the glogger cycle), store
    /// every answer and every silence under --data, serve the API on --listen.
    Snmp(up::SnmpArgs),
    /// List series, one per line: name{label="value",...}.
    Series(read::SeriesArgs),
    /// Read samples of the series a selector matches (CSV: series,time_ns,value).
    Query(read::QueryArgs),
    /// Every raw sample (or event, with --events) a selector matches, as
    /// CSV, InfluxDB line protocol, OpenMetrics or Parquet.
    Export(export::ExportArgs),
    /// Recordings of `perf record` (perf.data, or `perf script` text) into
    /// the event columns.
    Import(import::ImportArgs),
    /// Reproducible experiments and benchmarks.
    #[command(subcommand)]
    Lab(LabCmd),
    /// The configuration file: check it, or show what a command would run with.
    #[command(subcommand)]
    Config(config::ConfigCmd),
}

#[derive(Subcommand, Debug)]
enum LabCmd {
    /// CPU cost of the host collector per interval and per sample, beside
    /// node_exporter scraped at the same interval in the same run.
    CollectorCost(lab::collector_cost::Args),
    /// What `top` sees: the whole `kansoku up` process (collector, store,
    /// fsyncs, tracer, API) beside PCP, collectd and node_exporter at the
    /// same interval in the same run; several up variants side by side.
    UpCost(lab::up_cost::Args),
    /// The floor of host collection here: wake on the interval's
    /// boundaries and read the files `kansoku up`'s collector reads, and
    /// nothing else (lab up-cost's `floor` side).
    ReadFloor(lab::up_cost::FloorArgs),
    /// The glogger experiment: K SNMP targets every interval, beside a
    /// snmpget shell loop and snmp_exporter in the same run.
    Snmp(lab::snmp_bench::Args),
    /// The store's budgets: series ingest, range query, event size, event
    /// ingest and top-N queries (peers: scripts/bench-store-peers.sh).
    Store(lab::store_bench::Args),
    /// PromQL's heavier range queries (long windows at 100 ms steps) in
    /// kansoku and a real Prometheus on the same data: times and answers.
    Promql(lab::promql_bench::Args),
    /// The store at scale beside the embedded store, same data, same run:
    /// CPU a sample (kansoku's writer and clickhouse-server), bytes a sample
    /// on disk, a range query (docs/scale.md).
    Clickhouse(lab::clickhouse_bench::Args),
    /// Agents to a server: wire bytes, server and agent CPU per sample at
    /// 100 ms and 10 ms; server capacity; InfluxDB line protocol beside it.
    /// With --cores: the paper's replay of per-CPU samples to n cores.
    Transfer(lab::transfer::Args),
    /// The paper's second experiment: CPU benchmarks alone and beside
    /// per-CPU sampling (the kernel's own cost, kansoku's agent, perf
    /// record) at each rate; degradation and the transfer's stretch.
    Interference(lab::interference::Args),
    /// The results of `lab transfer --cores` and `lab interference` (their
    /// --out files) as one HTML page with plots, beside the paper's figures.
    Report(lab::report::Args),
    /// A server under a hostile client mix (floods, bombs, idle sockets,
    /// bad tokens) beside a healthy agent: memory and descriptors bounded,
    /// nothing of the agent lost (`make soak`).
    Soak(lab::soak::Args),
    /// What tracing every system call costs: a getppid loop untraced, with
    /// kansoku's tracer, with libbpf-tools' `syscount -L` and with
    /// bpftrace, in one run.
    TraceCost(lab::trace_cost::Args),
    /// The bottleneck verdict's validation: workloads built for each
    /// verdict (CPU in user space and in the kernel, a throttled disk, one
    /// lock, too little memory, idle) in random order under `kansoku up`;
    /// the confusion matrix against the schedule.
    Diagnose(lab::diagnose::Args),
    /// Run an experiment file: set-up, the parameter sweep in randomised
    /// rounds, each run's output read into metrics, tear-down; the
    /// environment captured; the result as JSON (docs/experiments.md).
    Run(lab::experiment::RunArgs),
    /// Two results of `lab run`, metric by metric: the change, a bootstrap
    /// interval and the Mann-Whitney U test; the environment's differences.
    Compare(lab::experiment::CompareArgs),
    /// Seed 003's degradation curve: a delay injected into a workload's
    /// storage or network calls in calibrated steps; throughput at each,
    /// PD with intervals, the knee and the tier budget (docs/latency.md).
    Latency(lab::latency::Args),
    /// The latency injector's calibration probe (run by `lab latency`).
    #[command(hide = true)]
    LatencyProbe(lab::latency::ProbeArgs),
    /// The network injector around a command (run by `lab latency --workload redis`).
    #[command(hide = true)]
    LatencyRelay(lab::latency::RelayArgs),
    /// Each component's limit beside theory (seeds 004, 001): the disk by
    /// position, read size and queue depth (O_DIRECT), fsync against
    /// buffered and O_DSYNC writes, TCP payload through a tbf-shaped veth
    /// between two namespaces against the payload arithmetic, CPU and
    /// memory baselines (docs/limits.md).
    Limits(lab::limits::Args),
    /// One end of a `lab limits --network` run, inside its namespace.
    #[command(hide = true)]
    LimitsStream(lab::limits::StreamArgs),
    /// HTTP load that tells the truth (seed 004's wish for a better
    /// ApacheBench): closed or open loop with coordinated omission
    /// corrected, HDR latency, figures per 100 ms; `--peers wrk,ab` runs
    /// the same load from them in the same run.
    Load(lab::load::Args),
    /// Serve a fake SNMP agent farm on 127.0.0.0/8 until stdin closes.
    SnmpFarm(lab::snmp_bench::FarmArgs),
    /// Synthetic hosts (every core, network, disk, memory, load) written
    /// through the same store path as real data and served like `up`: for
    /// the dashboard's cluster-scale benchmark.
    Synth(up::SynthArgs),
}

/// Where read commands find data: a data directory (read-only; works while
/// `kansoku up` runs) or a running server.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadFrom {
    /// Data directory to read.
    #[arg(long, default_value = "kansoku-data", conflicts_with = "server")]
    pub data: PathBuf,
    /// URL of a running kansoku, e.g. http://127.0.0.1:7070.
    #[arg(long)]
    pub server: Option<String>,
}

fn main() -> ExitCode {
    let cli = match config::parse::<Cli>("config") {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    if let Err(e) = logs::init(&cli.log) {
        eprintln!("kansoku: {e}");
        return ExitCode::from(2);
    }
    // Every panic, on any thread, is logged and counted (`threads` in
    // /api/v1/status): none goes unseen.
    node::supervise::install();
    if matches!(
        cli.cmd,
        Cmd::Up(_) | Cmd::Agent(_) | Cmd::Server(_) | Cmd::Snmp(_) | Cmd::Import(_) | Cmd::Lab(LabCmd::Synth(_))
    ) {
        // What these write — the data directory, the spool, the build-id
        // cache — holds process names, device inventories and samples:
        // for the owner only (0700 directories, 0600 files).
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
        // Descriptors up to the hard limit: connections, agents, event
        // logs. Every connection count is bounded below it anyway.
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
            && soft < hard
        {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
    let result = match cli.cmd {
        Cmd::Up(args) => up::run(args),
        Cmd::Agent(args) => cluster::run_agent(args),
        Cmd::Server(args) => up::run_server(*args),
        Cmd::Snmp(args) => up::run_snmp(args),
        Cmd::Series(args) => read::series(args),
        Cmd::Query(args) => read::query(args),
        Cmd::Export(args) => export::run(args),
        Cmd::Import(args) => import::run(args),
        Cmd::Lab(LabCmd::CollectorCost(args)) => lab::collector_cost::run(&args),
        Cmd::Lab(LabCmd::UpCost(args)) => lab::up_cost::run(&args),
        Cmd::Lab(LabCmd::ReadFloor(args)) => lab::up_cost::read_floor(&args),
        Cmd::Lab(LabCmd::TraceCost(args)) => lab::trace_cost::run(&args),
        Cmd::Lab(LabCmd::Diagnose(args)) => lab::diagnose::run(&args),
        Cmd::Lab(LabCmd::Load(args)) => lab::load::run(&args),
        Cmd::Lab(LabCmd::Latency(args)) => lab::latency::run(&args),
        Cmd::Lab(LabCmd::LatencyProbe(args)) => lab::latency::probe(&args),
        Cmd::Lab(LabCmd::LatencyRelay(args)) => lab::latency::relay(&args),
        Cmd::Lab(LabCmd::Limits(args)) => lab::limits::run(&args),
        Cmd::Lab(LabCmd::LimitsStream(args)) => lab::limits::stream(&args),
        Cmd::Lab(LabCmd::Run(args)) => lab::experiment::run(&args),
        Cmd::Lab(LabCmd::Compare(args)) => lab::experiment::compare(&args),
        Cmd::Lab(LabCmd::Snmp(args)) => lab::snmp_bench::run(&args),
        Cmd::Lab(LabCmd::Store(args)) => lab::store_bench::run(&args),
        Cmd::Lab(LabCmd::Promql(args)) => lab::promql_bench::run(&args),
        Cmd::Lab(LabCmd::Clickhouse(args)) => lab::clickhouse_bench::run(&args),
        Cmd::Lab(LabCmd::Transfer(args)) => lab::transfer::run(&args),
        Cmd::Lab(LabCmd::Interference(args)) => lab::interference::run(&args),
        Cmd::Lab(LabCmd::Report(args)) => lab::report::run(&args),
        Cmd::Lab(LabCmd::SnmpFarm(args)) => lab::snmp_bench::run_farm(&args),
        Cmd::Lab(LabCmd::Soak(args)) => lab::soak::run(&args),
        Cmd::Lab(LabCmd::Synth(args)) => up::run_synth(args),
        Cmd::Config(c) => return c.run(&<Cli as clap::CommandFactory>::command(), cli.config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: what failed, then why, joined by ": ".
            eprintln!("kansoku: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Every command's flags are consistent (unique ids across flattened
/// groups, valid defaults): clap checks it in debug builds only.
#[test]
fn the_command_line_is_consistent() {
    <Cli as clap::CommandFactory>::command().debug_assert();
}
