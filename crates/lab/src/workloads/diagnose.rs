//! `kansoku lab diagnose`: the bottleneck verdict's validation campaign
//! (issue 23, seed 001). `kansoku up` watches this machine while workloads
//! built to produce each pattern run one after another in a random order —
//! busy in user space, busy copying in the kernel, waiting on a throttled
//! disk, fighting over one lock, short of memory, sending through a shaped
//! link, idle — and the schedule
//! is the ground truth: every verdict window that lies inside a workload
//! (after it settled) is counted against the verdict that workload should
//! get, into a confusion matrix. Windows between workloads are not
//! counted. With `--record`, each counted window's features and truth are
//! written out: the recorded fixture of `crates/diagnose/tests`.
//!
//! Needs root (kernel tracing, cgroups, swap, a network namespace); tools
//! it lacks (stress-ng, fio, ip/tc) leave their workloads out, said so.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, bail};
use model::Timestamp;
use serde_json::{Value, json};

use crate::out::result;
use crate::transfer::Proc;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long each workload runs.
    #[arg(long, default_value = "30s", value_parser = model::parse_duration)]
    pub phase: Duration,
    /// Idle time between workloads (not counted).
    #[arg(long, default_value = "6s", value_parser = model::parse_duration)]
    pub gap: Duration,
    /// Time a workload is given to take hold before its windows count.
    #[arg(long, default_value = "4s", value_parser = model::parse_duration)]
    pub settle: Duration,
    /// Rounds: each runs every workload once, in its own random order.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    /// The verdict's window.
    #[arg(long, default_value = "5s", value_parser = model::parse_duration)]
    pub window: Duration,
    /// Seed of the random order (default: from the clock; printed, so a
    /// run's order can be repeated).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Only these workloads (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Workload>,
    /// Working directory: kansoku's data and the I/O workload's file; it
    /// must be on a block device (default: a new one under /var/tmp).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write the results (schedule, windows, confusion matrix) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write each counted window's features and truth as JSON here (the
    /// classifier's recorded fixture).
    #[arg(long)]
    pub record: Option<PathBuf>,
}

/// The workloads, each built to produce one verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Nothing runs.
    Idle,
    /// `stress-ng --cpu 0`: every CPU busy in user space.
    CpuUser,
    /// A thread per CPU writing and reading 1 MiB of a memfd: the kernel
    /// copying (copy_from_user / copy_to_user on top).
    CpuKernel,
    /// `fio` synchronous 4 KiB random reads, O_DIRECT, four jobs, in a
    /// cgroup throttled to 200 reads a second: a slow disk.
    Io,
    /// Four threads per CPU taking turns on one mutex.
    LockMutex,
    /// `stress-ng --futex 0`: futex wait/wake storms.
    LockFutex,
    /// `stress-ng --vm 2 --vm-bytes 96M` in a cgroup limited to 64 MiB,
    /// swapping to zram: reclaim on every allocation.
    Memory,
    /// A TCP stream over the loopback of a network namespace of its own,
    /// shaped by `tc tbf` to 20 Mbit/s: a link at its limit.
    Network,
}

impl Workload {
    const ALL: [Workload; 8] = [
        Workload::Idle,
        Workload::CpuUser,
        Workload::CpuKernel,
        Workload::Io,
        Workload::LockMutex,
        Workload::LockFutex,
        Workload::Memory,
        Workload::Network,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::Idle => "idle",
            Workload::CpuUser => "cpu-user",
            Workload::CpuKernel => "cpu-kernel",
            Workload::Io => "io",
            Workload::LockMutex => "lock-mutex",
            Workload::LockFutex => "lock-futex",
            Workload::Memory => "memory",
            Workload::Network => "network",
        }
    }

    /// The verdict it should get.
    fn expect(self) -> &'static str {
        match self {
            Workload::Idle => "healthy",
            Workload::CpuUser => "cpu-busy-user",
            Workload::CpuKernel => "cpu-busy-kernel",
            Workload::Io => "io-bound",
            Workload::LockMutex | Workload::LockFutex => "lock-contention",
            Workload::Memory => "memory-pressure",
            Workload::Network => "network-bound",
        }
    }

    /// The programs it needs.
    fn needs(self) -> &'static [&'static str] {
        match self {
            Workload::CpuUser | Workload::LockFutex | Workload::Memory => &["stress-ng"],
            Workload::Io => &["fio"],
            Workload::Network => &["ip", "tc"],
            _ => &[],
        }
    }
}

/// What a running workload holds: processes (killed as a group), threads
/// (stopped by a flag), the cgroup they run in.
#[derive(Default)]
struct Running {
    children: Vec<Child>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    cgroup: Option<Cgroup>,
}

impl Running {
    fn spawn(&mut self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let mut cmd = match &self.cgroup {
            // The shell joins the cgroup, then becomes the program.
            Some(cg) => {
                let mut c = Command::new("sh");
                c.args([
                    "-c",
                    "for p in $KANSOKU_CGROUP_PROCS; do echo $$ > \"$p\" || exit 1; done; exec \"$@\"",
                    "sh",
                ])
                .env("KANSOKU_CGROUP_PROCS", cg.procs_files())
                .arg(program);
                c
            }
            None => Command::new(program),
        };
        use std::os::unix::process::CommandExt as _;
        let child = cmd
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("start {program}"))?;
        self.children.push(child);
        Ok(())
    }

    fn thread(&mut self, f: impl FnOnce(Arc<AtomicBool>) + Send + 'static) {
        let stop = Arc::clone(&self.stop);
        self.threads.push(std::thread::spawn(move || f(stop)));
    }

    /// Whether a process of the workload has already exited (it failed).
    fn failed(&mut self) -> Option<String> {
        self.children.iter_mut().find_map(|c| match c.try_wait() {
            Ok(Some(st)) => Some(format!("exited early ({st})")),
            _ => None,
        })
    }

    fn stop(mut self) {
        use nix::sys::signal::{Signal::SIGKILL, kill, killpg};
        for c in &mut self.children {
            let _ = killpg(nix::unistd::Pid::from_raw(c.id() as i32), SIGKILL);
            let _ = c.wait();
        }
        // Processes that left the group (fio's jobs call setsid) are still
        // in the cgroup: killed there, until it is empty.
        if let Some(cg) = &self.cgroup {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                let pids = cg.pids();
                if pids.is_empty() {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    eprintln!("lab diagnose: processes {pids:?} outlived their workload");
                    break;
                }
                for pid in pids {
                    let _ = kill(nix::unistd::Pid::from_raw(pid), SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // The cgroup goes once its processes have (Drop).
    }
}

/// A cgroup of the campaign's own, v2 where the controllers are there, v1
/// otherwise; removed on drop.
struct Cgroup {
    dirs: Vec<PathBuf>,
}

const CGROUP_NAME: &str = "kansoku-lab-diagnose";

/// A cgroup setting: controller, (v1 file, value), (v2 file, value).
type Setting<'a> = (&'a str, (&'a str, String), (&'a str, String));

impl Cgroup {
    /// A cgroup with `settings`: (controller, v1 file and value, v2 file
    /// and value).
    fn new(settings: &[Setting<'_>]) -> anyhow::Result<Cgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let v2_controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        let mut cg = Cgroup { dirs: Vec::new() };
        for (controller, v1, v2) in settings {
            let (dir, (file, value)) = if v2_controllers.split_whitespace().any(|c| c == *controller) {
                std::fs::write(root.join("cgroup.subtree_control"), format!("+{controller}"))
                    .with_context(|| format!("enable the {controller} controller"))?;
                (root.join(CGROUP_NAME), v2)
            } else {
                let hier = root.join(if *controller == "io" { "blkio" } else { controller });
                if !hier.is_dir() {
                    bail!("no {controller} controller (cgroup v1 or v2) under {}", root.display());
                }
                (hier.join(CGROUP_NAME), v1)
            };
            if !dir.is_dir() {
                std::fs::create_dir(&dir).with_context(|| format!("create {}", dir.display()))?;
            }
            std::fs::write(dir.join(file), value).with_context(|| format!("write {value:?} to {file}"))?;
            if !cg.dirs.contains(&dir) {
                cg.dirs.push(dir);
            }
        }
        Ok(cg)
    }

    fn pids(&self) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .dirs
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|t| t.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    fn procs_files(&self) -> String {
        self.dirs.iter().map(|d| d.join("cgroup.procs").display().to_string()).collect::<Vec<_>>().join(" ")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        for d in &self.dirs {
            if let Err(e) = std::fs::remove_dir(d) {
                eprintln!("lab diagnose: could not remove {}: {e}", d.display());
            }
        }
    }
}

/// Swap on zram for the memory workload, when the machine has no swap:
/// turned off and reset on drop.
struct ZramSwap;

impl ZramSwap {
    fn ensure() -> anyhow::Result<Option<ZramSwap>> {
        let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
        if swaps.lines().count() > 1 {
            return Ok(None);
        }
        let size = Path::new("/sys/block/zram0/disksize");
        let current = std::fs::read_to_string(size)
            .context("the memory workload needs swap, and there is none and no zram device (swapon a file first)")?;
        if current.trim() != "0" {
            bail!("the memory workload needs swap: none is on, and zram0 is in use");
        }
        std::fs::write(size, "1G").context("size zram0")?;
        let guard = ZramSwap;
        for (prog, args) in [("mkswap", &["/dev/zram0"][..]), ("swapon", &["/dev/zram0"][..])] {
            let out = Command::new(prog).args(args).output().with_context(|| format!("run {prog}"))?;
            if !out.status.success() {
                bail!("{prog} /dev/zram0: {}", String::from_utf8_lossy(&out.stderr).trim());
            }
        }
        Ok(Some(guard))
    }
}

impl Drop for ZramSwap {
    fn drop(&mut self) {
        let _ = Command::new("swapoff").arg("/dev/zram0").status();
        let _ = std::fs::write("/sys/block/zram0/reset", "1");
    }
}

/// The whole disk a file lives on, as `major:minor` (what block throttling
/// takes).
fn disk_of(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(path)?.dev();
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    if !sys.exists() {
        bail!("{} is not on a block device ({major}:{minor}): pass --dir on a disk", path.display());
    }
    // A partition's parent directory is its disk.
    let disk = if sys.join("partition").exists() { sys.join("..") } else { sys };
    Ok(std::fs::read_to_string(disk.join("dev"))?.trim().to_owned())
}

/// Threads writing and reading 1 MiB of a memfd, one per CPU.
fn copy_loop(stop: Arc<AtomicBool>) {
    let Ok(fd) = rustix::fs::memfd_create("kansoku-lab-copy", rustix::fs::MemfdFlags::CLOEXEC) else { return };
    let mut buf = vec![7u8; 1 << 20];
    while !stop.load(Relaxed) {
        let _ = rustix::io::pwrite(&fd, &buf, 0);
        let _ = rustix::io::pread(&fd, &mut buf, 0);
    }
}

/// Threads taking turns on one mutex.
fn mutex_loop(lock: Arc<std::sync::Mutex<u64>>, stop: Arc<AtomicBool>) {
    while !stop.load(Relaxed) {
        let mut g = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for _ in 0..200 {
            *g = std::hint::black_box(g.wrapping_mul(31).wrapping_add(1));
        }
    }
}

/// A network namespace of the campaign's own with its loopback shaped to
/// 20 Mbit/s; deleted on drop. The burst (128 KiB) holds loopback's largest
/// GSO packet (64 KiB): a smaller one makes tbf cut each packet into
/// segments (whose waits cannot be matched to their packet) or drop it.
struct ShapedNetns;

const NETNS: &str = "kansoku-lab-diagnose";

impl ShapedNetns {
    fn new() -> anyhow::Result<ShapedNetns> {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).stderr(Stdio::null()).status();
        let run = |args: &[&str]| -> anyhow::Result<()> {
            let out = Command::new(args[0]).args(&args[1..]).output().with_context(|| format!("run {}", args[0]))?;
            if !out.status.success() {
                bail!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
            }
            Ok(())
        };
        run(&["ip", "netns", "add", NETNS])?;
        let ns = ShapedNetns;
        run(&["ip", "-n", NETNS, "link", "set", "lo", "up"])?;
        run(&[
            "tc", "-n", NETNS, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "20mbit", "burst", "128kb",
            "latency", "100ms",
        ])?;
        Ok(ns)
    }

    /// Moves the calling thread into the namespace.
    fn enter() -> anyhow::Result<()> {
        let f = std::fs::File::open(format!("/run/netns/{NETNS}")).context("open the network namespace")?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).context("enter the network namespace")?;
        Ok(())
    }
}

impl Drop for ShapedNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
    }
}

/// One TCP stream through the shaped loopback: a receiver and a sender
/// thread, each in the namespace, writing 64 KiB at a time until stopped.
fn shaped_stream(r: &mut Running) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let (port_tx, port_rx) = std::sync::mpsc::sync_channel::<anyhow::Result<u16>>(1);
    r.thread(move |stop| {
        let listener = ShapedNetns::enter().and_then(|()| Ok(std::net::TcpListener::bind("127.0.0.1:0")?));
        let listener = match listener {
            Ok(l) => l,
            Err(e) => {
                let _ = port_tx.send(Err(e));
                return;
            }
        };
        let _ = port_tx.send(Ok(listener.local_addr().map(|a| a.port()).unwrap_or(0)));
        // Polled, so a sender that never connects cannot hold the stop.
        let _ = listener.set_nonblocking(true);
        let mut conn = loop {
            match listener.accept() {
                Ok((c, _)) => break c,
                Err(_) if stop.load(Relaxed) => return,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = vec![0u8; 1 << 16];
        while !stop.load(Relaxed) {
            if let Ok(0) = conn.read(&mut buf) {
                break;
            }
        }
    });
    let port = port_rx.recv().context("the receiver thread")??;
    r.thread(move |stop| {
        if ShapedNetns::enter().is_err() {
            return;
        }
        let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return };
        let _ = conn.set_write_timeout(Some(Duration::from_millis(200)));
        let buf = vec![1u8; 1 << 16];
        while !stop.load(Relaxed) {
            let _ = conn.write(&buf);
        }
    });
    Ok(())
}

struct Ctx {
    cpus: usize,
    io_file: PathBuf,
    io_disk: Option<String>,
}

fn start(w: Workload, ctx: &Ctx) -> anyhow::Result<Running> {
    let mut r = Running::default();
    match w {
        Workload::Idle => {}
        Workload::CpuUser => r.spawn("stress-ng", &["--cpu", "0", "--quiet"])?,
        Workload::CpuKernel => {
            for _ in 0..ctx.cpus {
                r.thread(copy_loop);
            }
        }
        Workload::Io => {
            let disk = ctx.io_disk.as_deref().context("no disk to throttle")?;
            r.cgroup = Some(Cgroup::new(&[(
                "io",
                ("blkio.throttle.read_iops_device", format!("{disk} 200")),
                ("io.max", format!("{disk} riops=200")),
            )])?);
            let file = format!("--filename={}", ctx.io_file.display());
            r.spawn(
                "fio",
                &[
                    "--name=lab-io",
                    &file,
                    "--size=256M",
                    "--rw=randread",
                    "--bs=4k",
                    "--direct=1",
                    "--ioengine=psync",
                    "--numjobs=4",
                    "--time_based",
                    "--runtime=86400",
                ],
            )?;
        }
        Workload::LockMutex => {
            let lock = Arc::new(std::sync::Mutex::new(0u64));
            for _ in 0..4 * ctx.cpus {
                let lock = Arc::clone(&lock);
                r.thread(move |stop| mutex_loop(lock, stop));
            }
        }
        Workload::LockFutex => r.spawn("stress-ng", &["--futex", "0", "--quiet"])?,
        Workload::Network => {
            for _ in 0..4 {
                shaped_stream(&mut r)?;
            }
        }
        Workload::Memory => {
            r.cgroup = Some(Cgroup::new(&[(
                "memory",
                ("memory.limit_in_bytes", "64M".into()),
                ("memory.max", "64M".into()),
            )])?);
            r.spawn("stress-ng", &["--vm", "2", "--vm-bytes", "96M", "--quiet"])?;
        }
    }
    Ok(r)
}

/// SplitMix64: the campaign's shuffles, repeatable from the printed seed.
fn shuffle<T>(v: &mut [T], state: &mut u64) {
    for i in (1..v.len()).rev() {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
}

/// One workload's run: when it held, what it should be called.
#[derive(serde::Serialize)]
struct Phase {
    round: usize,
    workload: Workload,
    expect: &'static str,
    /// Unix seconds: started, counted from (after --settle), stopped.
    start: f64,
    counted_from: f64,
    stop: f64,
    failed: Option<String>,
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

fn secs(t: Timestamp) -> f64 {
    t.as_nanos() as f64 / 1e9
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if args.rounds == 0 {
        bail!("--rounds 0: no workload would run");
    }
    if !rustix::process::geteuid().is_root() {
        bail!("lab diagnose needs root: kernel tracing, cgroups and swap");
    }
    let seed = args.seed.unwrap_or_else(|| Timestamp::now().as_nanos() as u64);
    let mut wanted: Vec<Workload> = if args.only.is_empty() { Workload::ALL.to_vec() } else { args.only.clone() };
    wanted.sort();
    wanted.dedup();
    let mut skipped: Vec<(Workload, String)> = Vec::new();
    wanted.retain(|w| match w.needs().iter().find(|p| !which(p)) {
        Some(p) => {
            skipped.push((*w, format!("{p} not installed (apt-get install {p})")));
            false
        }
        None => true,
    });
    let tmp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new().prefix("kansoku-lab-diagnose.").tempdir_in("/var/tmp")?;
            tmp.path().to_owned()
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let io_file = dir.join("io-workload.dat");
    let mut io_disk = None;
    if wanted.contains(&Workload::Io) {
        match disk_of(&dir) {
            Ok(d) => {
                eprintln!("lab diagnose: laying out the I/O workload's file (256 MiB) on disk {d}");
                let file = format!("--filename={}", io_file.display());
                let out = Command::new("fio")
                    .args(["--name=layout", &file, "--size=256M", "--rw=write", "--bs=1M"])
                    .output()
                    .context("run fio")?;
                if !out.status.success() {
                    bail!("fio could not lay out {}: {}", io_file.display(), String::from_utf8_lossy(&out.stderr));
                }
                io_disk = Some(d);
            }
            Err(e) => {
                wanted.retain(|w| *w != Workload::Io);
                skipped.push((Workload::Io, e.to_string()));
            }
        }
    }
    let _swap = if wanted.contains(&Workload::Memory) {
        match ZramSwap::ensure() {
            Ok(s) => s,
            Err(e) => {
                wanted.retain(|w| *w != Workload::Memory);
                skipped.push((Workload::Memory, e.to_string()));
                None
            }
        }
    } else {
        None
    };
    let _netns = if wanted.contains(&Workload::Network) {
        match ShapedNetns::new() {
            Ok(ns) => Some(ns),
            Err(e) => {
                wanted.retain(|w| *w != Workload::Network);
                skipped.push((Workload::Network, e.to_string()));
                None
            }
        }
    } else {
        None
    };
    for (w, why) in &skipped {
        eprintln!("lab diagnose: leaving out {}: {why}", w.name());
    }
    if wanted.is_empty() {
        bail!("no workload left to run");
    }
    let ctx = Ctx { cpus, io_file, io_disk };

    // kansoku watching this machine: collector, kernel tracer.
    let host = "lab-diagnose";
    let mut up = Command::new(std::env::current_exe()?);
    up.args(["up", "--host", host, "--listen", "127.0.0.1:0", "--interval", "100ms", "--trace", "1s", "--perf", "199"])
        .arg("--data")
        .arg(dir.join("kansoku"));
    let mut up = Proc::spawn(up).context("start kansoku up")?;
    let line = up.wait_for("listening on http://")?;
    let addr = line
        .split("listening on http://")
        .nth(1)
        .and_then(|r| r.split([',', ' ']).next())
        .context("kansoku up's address")?
        .to_owned();
    up.wait_for("trace: kernel event histograms").context("kansoku up without kernel tracing")?;

    let total = args.rounds * wanted.len();
    let per = args.phase + args.gap;
    eprintln!(
        "lab diagnose: {}; {} workloads x {} rounds, {:?} each after {:?} idle, windows of {:?}, seed {seed} \
         (about {} min)",
        crate::machine_line(),
        wanted.len(),
        args.rounds,
        args.phase,
        args.gap,
        args.window,
        (per.as_secs_f64() * total as f64 / 60.0).ceil()
    );
    let mut state = seed;
    let mut phases = Vec::new();
    for round in 1..=args.rounds {
        let mut order = wanted.clone();
        shuffle(&mut order, &mut state);
        for w in order {
            std::thread::sleep(args.gap);
            let t0 = Timestamp::now();
            let mut running = start(w, &ctx).with_context(|| format!("start the {} workload", w.name()))?;
            std::thread::sleep(args.phase);
            let failed = running.failed();
            let t1 = Timestamp::now();
            running.stop();
            eprintln!(
                "lab diagnose: {}/{total} round {round}: {}{}",
                phases.len() + 1,
                w.name(),
                failed.as_deref().map(|f| format!(" — {f}")).unwrap_or_default()
            );
            let settle = i64::try_from(args.settle.as_nanos()).unwrap_or(i64::MAX);
            phases.push(Phase {
                round,
                workload: w,
                expect: w.expect(),
                start: secs(t0),
                counted_from: (t0.as_nanos().saturating_add(settle)) as f64 / 1e9,
                stop: secs(t1),
                failed,
            });
        }
    }
    // The last window is in the store once the tracer's and collector's
    // next reads are.
    std::thread::sleep(args.window + Duration::from_secs(2));
    let (from, to) = (phases[0].start - args.window.as_secs_f64(), phases.last().map_or(0.0, |p| p.stop));
    let window = format!("{}ms", args.window.as_millis());
    let answer = client::get_json(
        &format!("http://{addr}"),
        "/api/v1/diagnosis",
        &[
            ("host", host),
            ("from", &format!("{from:.3}")),
            ("to", &format!("{to:.3}")),
            ("window", &window),
            ("features", "true"),
        ],
    )?;
    // The seed's other table: what was on the CPUs in each workload's
    // first run (the sampler's top symbols over its counted span).
    let mut tops = Vec::new();
    for p in phases.iter().filter(|p| p.round == 1) {
        let top = client::get_json(
            &format!("http://{addr}"),
            "/api/v1/profile/top",
            &[
                ("host", host),
                ("from", &format!("{:.3}", p.counted_from)),
                ("to", &format!("{:.3}", p.stop)),
                ("n", "3"),
            ],
        )?;
        let rows: Vec<String> = top["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{} {:.0} %", r["symbol"].as_str().unwrap_or("?"), r["share"].as_f64().unwrap_or(0.0)))
            .collect();
        tops.push((p.workload.name(), rows.join(", ")));
    }
    up.stop();
    let report = tally(&phases, &answer, args.window.as_secs_f64())?;
    // The results go to stdout (progress went to stderr).
    for line in report.text.lines() {
        result!("{line}");
    }
    result!("on the CPUs (top 3 symbols of the sampler, first round):");
    for (w, top) in &tops {
        result!("  {w:<12} {top}");
    }
    if let Some(path) = &args.json {
        let v = json!({
            "machine": crate::machine(),
            "seed": seed,
            "phase_seconds": args.phase.as_secs_f64(),
            "window_seconds": args.window.as_secs_f64(),
            "skipped": skipped.iter().map(|(w, why)| json!({"workload": w.name(), "why": why})).collect::<Vec<_>>(),
            "phases": phases,
            "top_symbols": tops.iter().map(|(w, t)| json!({"workload": w, "top": t})).collect::<Vec<_>>(),
            "matrix": report.matrix,
            "right": report.right,
            "counted": report.counted,
            "idle_false": report.idle_false,
            "idle_counted": report.idle_counted,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&v)?).with_context(|| format!("write {}", path.display()))?;
    }
    if let Some(path) = &args.record {
        let mut f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        writeln!(f, "{}", serde_json::to_string_pretty(&report.recorded)?)?;
        result!("lab diagnose: {} windows recorded in {}", report.recorded.len(), path.display());
    }
    Ok(())
}

struct Report {
    text: String,
    /// truth -> verdict -> windows.
    matrix: std::collections::BTreeMap<String, std::collections::BTreeMap<String, usize>>,
    right: usize,
    counted: usize,
    idle_false: usize,
    idle_counted: usize,
    recorded: Vec<Value>,
}

/// Each answered window inside a phase's counted span, against its truth.
fn tally(phases: &[Phase], answer: &Value, window: f64) -> anyhow::Result<Report> {
    use std::collections::BTreeMap;
    let windows = answer["windows"].as_array().context("the diagnosis answer has no windows")?;
    let mut matrix: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let (mut right, mut counted, mut idle_false, mut idle_counted) = (0, 0, 0, 0);
    let mut recorded = Vec::new();
    for w in windows {
        let (Some(t), Some(verdict)) = (w["t"].as_f64(), w["verdict"].as_str()) else { continue };
        let Some(p) = phases.iter().find(|p| p.failed.is_none() && t - window >= p.counted_from && t <= p.stop) else {
            continue;
        };
        *matrix.entry(p.expect.to_owned()).or_default().entry(verdict.to_owned()).or_default() += 1;
        counted += 1;
        right += usize::from(verdict == p.expect);
        if p.workload == Workload::Idle {
            idle_counted += 1;
            idle_false += usize::from(verdict != "healthy");
        }
        recorded
            .push(json!({"workload": p.workload, "expect": p.expect, "verdict": verdict, "features": w["features"]}));
    }
    if counted == 0 {
        bail!("no verdict window fell inside a workload: the phases are shorter than --settle plus a --window");
    }
    let verdicts: Vec<String> = {
        let mut v: Vec<String> = matrix.values().flat_map(|r| r.keys().cloned()).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut text = String::new();
    let width = verdicts.iter().map(String::len).max().unwrap_or(8).max(8);
    text.push_str(&format!("{:<18}", "truth \\ verdict"));
    for v in &verdicts {
        text.push_str(&format!(" {v:>width$}"));
    }
    text.push_str("   right\n");
    for (truth, row) in &matrix {
        text.push_str(&format!("{truth:<18}"));
        for v in &verdicts {
            text.push_str(&format!(" {:>width$}", row.get(v).copied().unwrap_or(0)));
        }
        let n: usize = row.values().sum();
        let ok = row.get(truth).copied().unwrap_or(0);
        text.push_str(&format!("   {:5.1} %\n", 100.0 * ok as f64 / n as f64));
    }
    text.push_str(&format!(
        "labelled right: {right} of {counted} windows, {:.1} % (target >= 95 %)\n",
        100.0 * right as f64 / counted as f64
    ));
    if idle_counted > 0 {
        text.push_str(&format!(
            "false verdicts on the idle host: {idle_false} of {idle_counted} windows, {:.1} % (target <= 1 %)\n",
            100.0 * idle_false as f64 / idle_counted as f64
        ));
    }
    Ok(Report { text, matrix, right, counted, idle_false, idle_counted, recorded })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffles_repeat_from_their_seed_and_keep_every_workload() {
        let (mut a, mut b) = (Workload::ALL.to_vec(), Workload::ALL.to_vec());
        let (mut s1, mut s2) = (42, 42);
        shuffle(&mut a, &mut s1);
        shuffle(&mut b, &mut s2);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, Workload::ALL.to_vec());
        // Another round from the advanced state is another order (for this seed).
        shuffle(&mut b, &mut s2);
        assert_ne!(a, b);
    }

    #[test]
    fn windows_count_only_inside_a_settled_workload() {
        let phase = |w: Workload, start: f64, stop: f64| Phase {
            round: 1,
            workload: w,
            expect: w.expect(),
            start,
            counted_from: start + 4.0,
            stop,
            failed: None,
        };
        let phases = [phase(Workload::CpuUser, 100.0, 130.0), phase(Workload::Idle, 136.0, 166.0)];
        let answer = json!({"windows": [
            {"t": 105.0, "verdict": "healthy"},          // still settling: not counted
            {"t": 110.0, "verdict": "cpu-busy-user"},
            {"t": 130.0, "verdict": "healthy"},          // wrong
            {"t": 135.0, "verdict": "healthy"},          // between: not counted
            {"t": 150.0, "verdict": "cpu-busy-user"},    // a false verdict on idle
            {"t": 165.0, "verdict": "healthy"},
        ]});
        let r = tally(&phases, &answer, 5.0).unwrap();
        assert_eq!((r.right, r.counted, r.idle_false, r.idle_counted), (2, 4, 1, 2));
        assert_eq!(r.matrix["cpu-busy-user"]["healthy"], 1);
        assert!(r.text.contains("labelled right: 2 of 4 windows, 50.0 %"), "{}", r.text);
    }
}
