//! `kansoku lab limits`: each component's limit measured and set beside
//! theory (crate `limits`; seeds 004 and 001) — the disk by position, read
//! size and queue depth with O_DIRECT, fsync against buffered and O_DSYNC
//! writes, TCP payload through a veth pair shaped by tc tbf between two
//! network namespaces against the payload arithmetic, and the CPU and
//! memory baselines. Tables on stdout; `--out` writes the result and its
//! HTML report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use limits::disk::{self, Sync};
use limits::net::{self, Pair};
use limits::theory::{self, DataSheet};
use serde_json::{Value, json};

use crate::out::result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A block device or file to read (never written), with O_DIRECT; a
    /// path that does not exist is created as a file of --disk-size and
    /// removed after.
    #[arg(long, value_name = "FILE-OR-DEVICE")]
    disk: Option<PathBuf>,
    /// Size of the file created for --disk: bytes with K/M/G (powers of 1024).
    #[arg(long, default_value = "1G", value_parser = model::parse_bytes)]
    disk_size: u64,
    /// Positions across the disk read sequentially.
    #[arg(long, default_value_t = 16)]
    positions: usize,
    /// Bytes read at each position.
    #[arg(long, default_value = "64M", value_parser = model::parse_bytes)]
    position_span: u64,
    /// Read sizes (sequential, O_DIRECT).
    #[arg(long, value_delimiter = ',', default_value = "512,1K,2K,4K,8K,16K,64K,256K,1M,4M", value_parser = model::parse_bytes)]
    sizes: Vec<u64>,
    /// How long each read size reads.
    #[arg(long, default_value = "1s", value_parser = model::parse_duration)]
    size_time: Duration,
    /// Queue depths of random 4 KiB reads (a thread each in flight).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32")]
    depths: Vec<usize>,
    #[arg(long, default_value = "2s", value_parser = model::parse_duration)]
    depth_time: Duration,
    /// Where the write test's scratch file goes (default: beside --disk's
    /// file, or the current directory for a device).
    #[arg(long)]
    write_dir: Option<PathBuf>,
    #[arg(long, default_value = "4K", value_parser = model::parse_bytes)]
    write_size: u64,
    /// Writes per sync policy.
    #[arg(long, default_value_t = 1000)]
    writes: usize,
    /// The disk's data sheet (TOML: rpm, bytes_per_sector, zones, or
    /// read_bytes_per_second/read_iops; docs/limits.md).
    #[arg(long, value_name = "FILE")]
    datasheet: Option<PathBuf>,
    /// Measure TCP payload throughput through a shaped veth pair between
    /// two network namespaces (root).
    #[arg(long)]
    network: bool,
    /// The line rate tc tbf shapes to (tc's units: 1gbit, 100mbit).
    #[arg(long, default_value = "1gbit")]
    rate: String,
    #[arg(long, default_value_t = 1500)]
    mtu: u64,
    /// Parallel TCP streams, one measurement each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    streams: Vec<usize>,
    /// The measured window of each network run.
    #[arg(long, default_value = "5s", value_parser = model::parse_duration)]
    seconds: Duration,
    #[arg(long, default_value = "1s", value_parser = model::parse_duration)]
    warmup: Duration,
    /// Leave out the CPU and memory baselines.
    #[arg(long)]
    no_baselines: bool,
    #[arg(long, default_value = "1s", value_parser = model::parse_duration)]
    cpu_time: Duration,
    #[arg(long, default_value = "256M", value_parser = model::parse_bytes)]
    memory: u64,
    /// Write the result as JSON here, and its report beside it (.html).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct StreamArgs {
    /// serve or send.
    role: String,
    #[arg(long)]
    addr: String,
    #[arg(long)]
    streams: usize,
    #[arg(long, value_parser = model::parse_duration)]
    warmup: Duration,
    #[arg(long, value_parser = model::parse_duration)]
    seconds: Duration,
}

/// `kansoku lab limits-stream`: one end of a network run, inside its namespace.
pub fn stream(args: &StreamArgs) -> anyhow::Result<()> {
    match args.role.as_str() {
        "serve" => {
            let r = net::serve(&args.addr, args.streams, args.warmup, args.seconds)?;
            // The receiver's answer to its parent, on stdout.
            result!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
        "send" => net::send(&args.addr, args.streams, args.warmup + args.seconds + Duration::from_secs(5)),
        r => bail!("{r}: serve or send"),
    }
}

fn mib(v: f64) -> String {
    format!("{:.1} MiB/s", v / 1048576.0)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.disk.is_none() && !args.network && args.no_baselines {
        bail!("nothing to measure: give --disk, --network, or leave the baselines on");
    }
    let sheet = match &args.datasheet {
        Some(p) => Some(
            DataSheet::load(&std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?)
                .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let rate = theory::parse_rate(&args.rate).map_err(anyhow::Error::msg)?;
    result!("limits on {}", crate::machine_line());
    let mut doc = json!({"experiment": "limits", "machine": crate::machine(),
        "environment": experiment::environment::capture(&["iproute2".into()], env!("CARGO_PKG_VERSION"))});
    if !args.no_baselines {
        doc["baselines"] = baselines(args)?;
    }
    if let Some(path) = &args.disk {
        doc["disk"] = disk_part(args, path, sheet.as_ref())?;
    }
    if args.network {
        doc["network"] = network_part(args, rate)?;
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_vec_pretty(&doc)?).with_context(|| format!("write {}", out.display()))?;
        let page = out.with_extension("html");
        std::fs::write(&page, crate::report::render(&[(out.display().to_string(), doc.clone())])?)
            .with_context(|| format!("write {}", page.display()))?;
        result!("result: {} and {}", out.display(), page.display());
    }
    Ok(())
}

fn baselines(args: &Args) -> anyhow::Result<Value> {
    result!("\nbaselines: an integer kernel on each core alone, then all at once ({:?} each)", args.cpu_time);
    let cpus = clock::online_cpus().context("the online CPUs")?;
    let c = limits::cpu::integer(&cpus, args.cpu_time);
    for (cpu, m) in cpus.iter().zip(&c.per_core_mips) {
        result!("  cpu {cpu}: {m:.0} M iterations/s");
    }
    result!(
        "  all {} at once: {:.0} M iterations/s ({:.2} x one core)",
        cpus.len(),
        c.all_cores_mips,
        c.all_cores_mips / c.per_core_mips.first().copied().unwrap_or(f64::NAN)
    );
    let m = limits::cpu::memory(args.memory as usize, 3);
    result!(
        "  memory ({} MiB buffer, one thread, best of 3): read {}, write {}, copy {}",
        args.memory >> 20,
        mib(m.read),
        mib(m.write),
        mib(m.copy)
    );
    Ok(
        json!({"cpu": c, "memory": m, "theory": "none: no data sheet for a virtual CPU; these are the reference other results are scaled by"}),
    )
}

fn disk_part(args: &Args, path: &Path, sheet: Option<&DataSheet>) -> anyhow::Result<Value> {
    let t = disk::target(path, args.disk_size)?;
    let _remove = t.created.then(|| disk::Remove(t.path.clone()));
    let info = disk::device_info(&t.path);
    result!(
        "\ndisk: {} ({}, {} MiB{}; on {}{}, rotational {}, logical block {} B)",
        t.path.display(),
        if t.device { "block device" } else { "file" },
        t.bytes >> 20,
        if t.created { ", created for this run" } else { "" },
        info["disk"].as_str().unwrap_or("?"),
        info["model"].as_str().map(|m| format!(" ({m})")).unwrap_or_default(),
        info["rotational"],
        info["logical_block_size"]
    );
    let theory_note = match sheet {
        Some(s) => format!("from the data sheet{}", s.model.as_deref().map(|m| format!(" of {m}")).unwrap_or_default()),
        None => {
            "unknown: no --datasheet (a virtual disk advertises no limits; its host's disk and cache decide)".into()
        }
    };
    result!("theory: {theory_note}");

    result!(
        "\nsequential read by position ({} positions, {} MiB each, 1 MiB O_DIRECT reads):",
        args.positions,
        args.position_span >> 20
    );
    result!("{:>10} {:>14} {:>14} {:>8}", "position", "measured", "theory", "ratio");
    let pos = disk::by_position(&t, args.positions, args.position_span)?;
    let mut pos_json = Vec::new();
    for p in &pos {
        let th = sheet.and_then(|s| s.read_at(p.fraction));
        result!(
            "{:>9.1}% {:>14} {:>14} {:>8}",
            p.fraction * 100.0,
            mib(p.bytes_per_second),
            th.as_ref().map_or("unknown".into(), |l| mib(l.value)),
            th.as_ref().map_or("-".into(), |l| format!("{:.2}", p.bytes_per_second / l.value))
        );
        pos_json.push(json!({"offset": p.offset, "fraction": p.fraction, "bytes_per_second": p.bytes_per_second,
            "theory": th.as_ref().map(|l| l.value), "working": th.map(|l| l.working)}));
    }

    let sizes: Vec<usize> = args.sizes.iter().map(|&s| s as usize).collect();
    result!("\nsequential read by read size (O_DIRECT, {:?} each):", args.size_time);
    result!("{:>10} {:>14} {:>14}", "read", "throughput", "reads/s");
    let by_size = disk::by_size(&t, &sizes, args.size_time)?;
    for s in &by_size {
        match &s.refused {
            Some(why) => result!("{:>10} {why}", s.read_bytes),
            None => result!("{:>10} {:>14} {:>14.0}", s.read_bytes, mib(s.bytes_per_second), s.reads_per_second),
        }
    }

    result!("\nrandom 4 KiB reads by queue depth (a thread per read in flight, {:?} each):", args.depth_time);
    result!("{:>6} {:>10} {:>10} {:>10} {:>10}", "depth", "IOPS", "p50 us", "p99 us", "theory");
    let depths = disk::by_depth(&t, &args.depths, args.depth_time)?;
    let iops_theory = sheet.and_then(|s| s.read_iops);
    for d in &depths {
        result!(
            "{:>6} {:>10.0} {:>10.1} {:>10.1} {:>10}",
            d.depth,
            d.iops,
            d.p50_us,
            d.p99_us,
            iops_theory.map_or("unknown".into(), |v| format!("{v:.0}"))
        );
    }

    let dir = match &args.write_dir {
        Some(d) => d.clone(),
        None if t.device => std::env::current_dir()?,
        None => t.path.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf),
    };
    result!(
        "\nwrites: {} appends of {} B per policy to a scratch file in {}:",
        args.writes,
        args.write_size,
        dir.display()
    );
    result!("{:>10} {:>12} {:>12} {:>14} {:>12}", "policy", "p50 us", "p99 us", "throughput", "x buffered");
    let writes = disk::writes(&dir, args.write_size as usize, args.writes, &Sync::ALL)?;
    let base = writes.iter().find(|w| w.sync == Sync::Buffered).map_or(f64::NAN, |w| w.p50_us);
    for w in &writes {
        result!(
            "{:>10} {:>12.1} {:>12.1} {:>14} {:>12.0}",
            w.sync.name(),
            w.p50_us,
            w.p99_us,
            mib(w.bytes_per_second),
            w.p50_us / base
        );
    }
    let fsync_theory = sheet.and_then(DataSheet::fsync_latency);
    match &fsync_theory {
        Some((lo, hi, working)) => {
            result!("fsync theory: {:.0}-{:.0} us ({})", lo * 1e6, hi * 1e6, working.join("; "))
        }
        None => result!("fsync theory: unknown (no rpm: give --datasheet for a rotating disk)"),
    }
    Ok(json!({
        "target": t, "device": info, "theory": theory_note,
        "position": pos_json, "sizes": by_size, "depths": depths, "iops_theory": iops_theory,
        "writes": writes, "write_dir": dir,
        "fsync_theory_us": fsync_theory.map(|(lo, hi, w)| json!({"low": lo * 1e6, "high": hi * 1e6, "working": w})),
    }))
}

fn network_part(args: &Args, rate: f64) -> anyhow::Result<Value> {
    let (wire, tbf) = theory::tcp_payload(rate, args.mtu);
    let paper = theory::paper_ethernet();
    result!(
        "\nnetwork: TCP payload between two namespaces over a veth pair, tc tbf at {} (MTU {})",
        args.rate,
        args.mtu
    );
    for l in tbf.working.iter().chain(wire.working.iter().skip(1)) {
        result!("  {l}");
    }
    if (rate - 1e9).abs() < 1.0 && args.mtu == 1500 {
        for l in &paper.working {
            result!("  {l}");
        }
    }
    let pair = Pair::create(args.mtu)?;
    let exe = std::env::current_exe()?;
    let addr = format!("{}:{}", net::RECEIVER, net::PORT);
    let measure = |streams: usize| -> anyhow::Result<net::Received> {
        let cmd = |role: &str| {
            let mut c = Command::new(&exe);
            c.args(["lab", "limits-stream", role, "--addr", &addr, "--streams", &streams.to_string()])
                .args(["--warmup", &format!("{}ms", args.warmup.as_millis())])
                .args(["--seconds", &format!("{}ms", args.seconds.as_millis())]);
            c
        };
        net::run(&pair, &cmd("serve"), &cmd("send"))
    };
    pair.shape(Some(rate))?;
    result!(
        "{:>8} {:>14} {:>14} {:>10} {:>10} {:>12}",
        "streams",
        "measured",
        "tbf theory",
        "of tbf",
        "of wire",
        "fairness"
    );
    let mut runs = Vec::new();
    for &n in &args.streams {
        let r = measure(n)?;
        let (lo, hi) =
            (r.per_stream.iter().min().copied().unwrap_or(0), r.per_stream.iter().max().copied().unwrap_or(0));
        result!(
            "{:>8} {:>14} {:>14} {:>9.1}% {:>9.1}% {:>12}",
            n,
            mib(r.bytes_per_second),
            mib(tbf.value),
            r.bytes_per_second / tbf.value * 100.0,
            r.bytes_per_second / wire.value * 100.0,
            if hi > 0 { format!("{:.2}", lo as f64 / hi as f64) } else { "-".into() }
        );
        runs.push(json!({"streams": n, "received": r, "of_tbf": r.bytes_per_second / tbf.value, "of_wire": r.bytes_per_second / wire.value}));
    }
    let top = args.streams.iter().copied().max().unwrap_or(1);
    pair.shape(None)?;
    let free = measure(top)?;
    result!(
        "unshaped, {top} streams: {} — the machine's own limit over veth (CPU-bound), far above the shaped rate",
        mib(free.bytes_per_second)
    );
    Ok(json!({
        "rate_bps": rate, "rate": args.rate, "mtu": args.mtu,
        "theory": {"tbf": tbf, "wire": wire, "paper": paper},
        "runs": runs, "unshaped": {"streams": top, "received": free},
    }))
}
