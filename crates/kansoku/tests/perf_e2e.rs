//! `--perf`: real per-CPU sampling (perf_event_open, cpu-clock at 10 kHz)
//! beside a busy process. With `kansoku up` every sample the sampler took is
//! stored, the busy process is on top and its function tops the symbols; with an agent the samples travel
//! to the server as event batches, all of them.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{BIN, Killed, Live, http_get};

fn busy() -> Killed {
    Killed(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap())
}

fn stop(child: &mut Child) {
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let st = child.wait().unwrap();
    assert!(st.success(), "exit {st}");
}

fn last_value(data: &Path, selector: &str) -> f64 {
    let out = Command::new(BIN).args(["query", selector, "--from", "0"]).arg("--data").arg(data).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().last().and_then(|l| l.rsplit(',').next()).and_then(|v| v.parse().ok()).unwrap_or(-1.0)
}

/// Events per pid, from the data directory.
fn events_by_pid(data: &Path, selector: &str) -> (u64, HashMap<u32, u64>) {
    let out = Command::new(BIN)
        .args(["export", selector, "--events", "--format", "csv"])
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    // (Columns by name: the stream's labels come first, and vary.)
    let at = text.lines().next().unwrap().split(',').position(|c| c == "pid").expect("a pid column");
    let mut by_pid = HashMap::new();
    let mut n = 0;
    for l in text.lines().skip(1) {
        let pid: u32 = l.split(',').nth(at).unwrap().parse().unwrap();
        *by_pid.entry(pid).or_default() += 1;
        n += 1;
    }
    (n, by_pid)
}

/// The sampler's own reports of `host` (its samples so far) on the live
/// tail: once a second from `up`, with every batch from an agent. The
/// waits below move on them — each report follows a set of batches handed
/// downstream — never on a clock. (A subscription per wait: one left
/// unread for long would lag.)
fn sampler_reports(addr: &str, host: &str) -> Live {
    Live::open(addr, &format!("kansoku_perf_samples_total{{host=\"{host}\"}}"))
}

/// Asks `check` at each sampler report of `host` until it answers `Ok`;
/// fails after 30 reports with `what` and the last answer.
fn until<T>(addr: &str, host: &str, what: &str, check: impl FnMut() -> Result<T, String>) -> T {
    common::until(addr, &format!("kansoku_perf_samples_total{{host=\"{host}\"}}"), 30, what, check)
}

/// Until the sampler of `host` reports `at_least` samples taken.
fn wait_samples(addr: &str, host: &str, at_least: f64) {
    let mut reports = sampler_reports(addr, host);
    for _ in 0..60 {
        if reports.next_points().1[0].is_some_and(|n| n >= at_least) {
            return;
        }
    }
    panic!("{at_least} samples not reported in 60 reports");
}

fn profile_top(addr: &str, query: &str) -> Result<serde_json::Value, String> {
    let (_, body) = http_get(addr, &format!("/api/v1/profile/top?{query}"));
    serde_json::from_str(&body).map_err(|_| body)
}

/// The top symbols of `query` once it holds more than `more_than` samples.
fn wait_profile(addr: &str, host: &str, query: &str, more_than: u64) -> serde_json::Value {
    until(addr, host, &format!("more than {more_than} samples in /api/v1/profile/top?{query}"), || {
        let v = profile_top(addr, query)?;
        if v["samples"].as_u64().is_some_and(|n| n > more_than) { Ok(v) } else { Err(v.to_string()) }
    })
}

/// One test, two phases: their busy loops must not compete.
#[test]
fn perf_sampling_in_up_and_through_an_agent() {
    up_stores_every_sample_and_the_busy_process_is_on_top();
    an_agent_ships_its_samples_to_the_server();
}

/// Burns a CPU in a function with a name the profile must find.
#[inline(never)]
fn spin_here_for_kansoku(stop: &std::sync::atomic::AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    x
}

fn up_stores_every_sample_and_the_busy_process_is_on_top() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let spinning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinner = {
        let stop = std::sync::Arc::clone(&spinning);
        std::thread::spawn(move || spin_here_for_kansoku(&stop))
    };
    let mut up = common::start(
        &["up", "--listen", "127.0.0.1:0", "--host", "perf-up", "--perf", "10000", "--perf-callchain"],
        &data,
    );
    wait_samples(&up.addr, "perf-up", 15_000.0);
    // The top-symbols table of this process, symbolised by the running
    // server: the spinning thread's function leads it. A share of what the
    // test controls (its own process), never of the machine: other load on
    // the machine changes the machine's shares, not this one.
    // Waited for by this process's own samples (a loaded machine gives the
    // spinner less CPU, so the host's total says nothing about them).
    let me = std::process::id();
    let v = wait_profile(&up.addr, "perf-up", &format!("host=perf-up&since=1m&n=10&pid={me}"), 2000);
    let body = v.to_string();
    let top = &v["rows"][0];
    assert!(top["symbol"].as_str().unwrap().contains("spin_here_for_kansoku"), "{body}");
    assert!(top["share"].as_f64().unwrap() > 50.0, "{body}");
    assert!(top["module"].as_str().unwrap().starts_with("perf_e2e"), "{body}");
    call_chains_make_a_flame_graph_folded_stacks_and_a_timeline(&up.addr, "perf-up");
    spinning.store(true, std::sync::atomic::Ordering::Relaxed);
    spinner.join().unwrap();
    a_process_that_has_exited_is_named_though_its_binary_is_gone(&up.addr, "perf-up", &data, dir.path());
    stop(&mut up.child);
    let sampled = last_value(&data, "kansoku_perf_samples_total");
    // The stream says which boot's kernel and processes its samples name.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let (n, by_pid) = events_by_pid(&data, &format!("perf_cpu_clock{{host=\"perf-up\",boot=\"{}\"}}", boot.trim()));
    assert_eq!(n as f64, sampled, "stored events vs samples the sampler took");
    assert_eq!(last_value(&data, "kansoku_perf_dropped_samples_total"), 0.0);
    assert_eq!(last_value(&data, "kansoku_perf_lost_samples_total"), 0.0);
    // The cache kept at least the exited program's binary (named above after it was deleted).
    assert!(last_value(&data, "kansoku_perf_buildid_cached_total") >= 1.0);
    // This process's samples are all there (at least the 2000 the server
    // counted above); whether it topped the machine depends on other load.
    let mine = by_pid.get(&std::process::id()).copied().unwrap_or(0);
    assert!(mine > 2000, "{mine} samples of this process stored: {by_pid:?}");
}

/// The flame graph holds every sample in the range, the spinning function
/// under this process; the folded stacks add up to the same and hold the
/// kernel's call chains (deeper than one frame); the timeline has a row per
/// CPU and knows this process.
fn call_chains_make_a_flame_graph_folded_stacks_and_a_timeline(addr: &str, host: &str) {
    // A fixed range, complete once a sample after it is stored (each set
    // holds every CPU's samples up to its drain): the views see the same.
    let to = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    wait_profile(addr, host, &format!("host={host}&from={to}&to={}&n=1", to + 600), 0);
    let range = format!("host={host}&from={}&to={to}", to - 60);
    let (status, body) = http_get(addr, &format!("/api/v1/profile/flame?{range}"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let samples = v["samples"].as_u64().unwrap();
    assert!(samples > 1000 && v["with_call_chains"].as_u64().unwrap() == samples, "{}", &body[..body.len().min(300)]);
    // Frames in preorder: [name, samples, depth].
    let frames: Vec<(String, u64, u64)> = serde_json::from_value(v["frames"].clone()).unwrap();
    assert_eq!((frames[0].1, frames[0].2), (samples, 0), "the root holds every sample");
    let me = format!("({})", std::process::id());
    let at = frames.iter().position(|f| f.2 == 1 && f.0.ends_with(&me)).expect("this process");
    let below = frames[at + 1..].iter().take_while(|f| f.2 > 1);
    assert!(below.clone().any(|f| f.0.contains("spin_here_for_kansoku")), "its function under it");
    let children: u64 = frames.iter().filter(|f| f.2 == 1).map(|f| f.1).sum();
    assert_eq!(children, samples, "processes add up to the root");
    let (status, folded) = http_get(addr, &format!("/api/v1/profile/folded?{range}"));
    assert_eq!(status, 200, "{folded}");
    let mut sum = 0;
    let mut deepest = 0;
    for line in folded.lines() {
        let (stack, count) = line.rsplit_once(' ').expect("stack count");
        sum += count.parse::<u64>().expect("a count");
        deepest = deepest.max(stack.split(';').count());
    }
    assert_eq!(sum, samples, "folded stacks hold every sample");
    assert!(deepest >= 4, "kernel call chains are several frames deep: {deepest}");
    pprof_holds_the_same_samples_and_go_s_pprof_reads_it(addr, &range, samples);
    // This process's own cells (of a loaded machine's, others may win every bucket).
    let (status, body) =
        http_get(addr, &format!("/api/v1/profile/timeline?{range}&buckets=30&pid={}", std::process::id()));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["cpus"].as_array().unwrap().len(), perf::online_cpus().unwrap().len(), "{body}");
    assert!(v["processes"].get(std::process::id().to_string()).is_some(), "{body}");
}

/// A C program spinning in a named function until SIGTERM.
const SPINNER_C: &str = r#"
#include <signal.h>
static volatile sig_atomic_t done;
static void on_term(int s) { (void)s; done = 1; }
__attribute__((noinline)) unsigned long kansoku_exited_spinner(void) {
    unsigned long x = 1;
    while (!done) x = x * 6364136223846793005UL + 1;
    return x;
}
int main(void) { signal(SIGTERM, on_term); return (int)(kansoku_exited_spinner() & 0); }
"#;

/// A process samples saw, gone, its binary deleted: its name and its
/// function still come out, from the mappings its batches carry and the
/// build-id cache of the data directory.
fn a_process_that_has_exited_is_named_though_its_binary_is_gone(addr: &str, host: &str, data: &Path, tmp: &Path) {
    let (src, exe) = (tmp.join("spinner.c"), tmp.join("exited-spinner"));
    std::fs::write(&src, SPINNER_C).unwrap();
    let cc = Command::new("cc").args(["-O1", "-o"]).arg(&exe).arg(&src).status().expect("a C compiler (cc)");
    assert!(cc.success());
    let id = perf::procs::build_id(&exe).expect("cc links a build id");
    let cached = data.join(perf::procs::CACHE_DIR).join(perf::procs::hex(&id));
    let mut child = Killed(Command::new(&exe).spawn().unwrap());
    let pid = child.0.id();
    let query = format!("host={host}&since=1m&pid={pid}&n=5");
    wait_profile(addr, host, &query, 2000);
    until(addr, host, "the binary in the build-id cache", || {
        if cached.is_file() { Ok(()) } else { Err(format!("{cached:?}")) }
    });
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    assert!(child.0.wait().unwrap().success());
    std::fs::remove_file(&exe).unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the process is gone");
    // Its samples were stored before it exited: no wait.
    let v = profile_top(addr, &query).unwrap();
    assert!(v["samples"].as_u64().unwrap() > 2000, "{v}");
    let top = &v["rows"][0];
    assert!(top["symbol"].as_str().unwrap().contains("kansoku_exited_spinner"), "{v}");
    assert_eq!(top["module"], "exited-spinner", "{v}");
    assert!(top["share"].as_f64().unwrap() > 50.0, "{v}");
    // Its name, too, came with its batches.
    let (status, body) = http_get(addr, &format!("/api/v1/profile/flame?{query}"));
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["frames"][1][0], format!("exited-spinner ({pid})"), "{body}");
}

/// The pprof export: every sample of the range, the spinning function
/// among its functions; and the real `go tool pprof` reads the file.
fn pprof_holds_the_same_samples_and_go_s_pprof_reads_it(addr: &str, range: &str, samples: u64) {
    use std::io::Read;
    let (status, gz) = common::http_get_bytes(addr, &format!("/api/v1/profile/pprof?{range}"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&gz));
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut raw).expect("gzip");
    let p = perf::pprof::decode(&raw).expect("a profile");
    assert_eq!(p.sample.iter().map(|s| s.value[0] as u64).sum::<u64>(), samples);
    assert!(p.function.iter().any(|f| p.string_table[f.name as usize].contains("spin_here_for_kansoku")));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("profile.pb.gz");
    std::fs::write(&file, &gz).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-symbolize=none", "-nodecount=1000"])
        .arg(&file)
        .output()
        .expect("go (for go tool pprof)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(&format!("Total samples = {samples}")), "{text}");
    assert!(text.contains("spin_here_for_kansoku"), "{text}");
}

fn an_agent_ships_its_samples_to_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("server");
    let ingest = format!("127.0.0.1:{}", common::free_port());
    let mut srv = common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", &ingest], &data);
    let _b = busy();
    let mut agent = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &ingest,
            "--host",
            "perf-agent",
            "--perf",
            "10000",
            "--perf-callchain",
            "--trace",
            "off",
        ])
        .args(["--batch", "500ms"])
        .arg("--data")
        .arg(dir.path().join("agent"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_samples(&srv.addr, "perf-agent", 15_000.0);
    // Call chains travel with the samples.
    let (status, body) = http_get(&srv.addr, "/api/v1/profile/flame?host=perf-agent&since=1m");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(v["with_call_chains"].as_u64().unwrap() > 1000, "{}", &body[..body.len().min(300)]);
    stop(&mut agent);
    stop(&mut srv.child);
    let sampled = last_value(&data, "kansoku_perf_samples_total{host=\"perf-agent\"}");
    let (n, _) = events_by_pid(&data, "perf_cpu_clock{host=\"perf-agent\"}");
    assert!(sampled >= 15_000.0);
    assert_eq!(n as f64, sampled, "events on the server vs samples the agent took");
}

/// Samples whose stream says they are of another boot (or machine) are not
/// named from this one: this kernel's symbols would put another kernel's
/// addresses (KASLR) on wrong functions. The same address labelled with
/// this boot is named.
#[test]
fn another_boot_s_kernel_addresses_are_not_named_from_this_kernel() {
    use codec::events::{Encoding, EventBatch};
    use model::{SeriesKey, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let this_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_owned();
    // A kernel function's address, as this kernel has it (root reads them).
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let schedule = kallsyms
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let a = u64::from_str_radix(f.first()?, 16).ok()?;
            (a != 0 && f.get(2) == Some(&"schedule")).then_some(a)
        })
        .expect("schedule in /proc/kallsyms with its address");
    {
        let store = store::Store::open(&data, store::Options::default()).unwrap();
        let t0 = Timestamp::now().as_nanos() - 10_000_000_000;
        for (host, boot) in [("here", this_boot.as_str()), ("far", "00000000-0000-0000-0000-not-this-boot")] {
            let mut b = EventBatch::default();
            (0..20).for_each(|i| b.push(t0 + i * 100_000, 4242, 4242, schedule + 4));
            let stream = SeriesKey::new("perf_cpu_clock", [("host", host), ("boot", boot)]);
            store.events().append(&stream, &mut b, Encoding::Fast).unwrap();
        }
        store.close().unwrap();
    }
    let srv = common::start(&["up", "--listen", "127.0.0.1:0", "--host", "e2e-boot"], &data);
    let top = |host: &str| {
        let (status, body) = http_get(&srv.addr, &format!("/api/v1/profile/top?host={host}&since=1h"));
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        (v["rows"][0]["symbol"].as_str().unwrap().to_owned(), v["rows"][0]["module"].clone(), v["samples"].clone())
    };
    assert_eq!(top("here"), ("schedule".to_owned(), "[kernel]".into(), 20.into()));
    assert_eq!(
        top("far"),
        ("[unknown] (kernel of another boot: its symbol table not received)".to_owned(), "[kernel]".into(), 20.into())
    );
}
