//! Profiles of another node, named on the server: two agents, each in a
//! mount namespace of its own (so their binaries' paths do not exist on
//! the server) with a faked boot id and a kernel symbol table of their own
//! (every name prefixed `agentk_`, so a frame named from it cannot have
//! been named from the server's), run a freshly built busy program deleted
//! after it started. The server asks each agent for what it lacks; the
//! program's function tops its table, its kernel frames carry the agent's
//! names, and every binary and table arrived once although two agents ran
//! them.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{BIN, http_get};

/// Spins in a function with a name the server must find, and reads
/// /dev/zero in between, so the kernel has frames of its own.
const SPINNER_C: &str = r#"
#include <fcntl.h>
#include <unistd.h>
static char buf[65536];
volatile unsigned long sink = 1;
__attribute__((noinline)) unsigned long kansoku_namespaced_spinner(unsigned long x) {
    for (long i = 0; i < 2000000; i++) x = x * 6364136223846793005UL + 1;
    return x;
}
int main(void) {
    int fd = open("/dev/zero", O_RDONLY);
    for (;;) {
        sink = kansoku_namespaced_spinner(sink);
        for (int i = 0; i < 16; i++) if (read(fd, buf, sizeof buf) < 0) return 1;
    }
}
"#;

const BOOT: &str = "0badb007-0000-4000-8000-00000000c0de";

/// This kernel's symbol table with every name prefixed `agentk_`.
fn renamed_kallsyms(to: &Path) {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut out = String::with_capacity(text.len() + text.lines().count() * 7);
    for line in text.lines() {
        let mut f = line.splitn(4, [' ', '\t']);
        let (a, t, name, rest) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap(), f.next());
        out.push_str(&format!("{a} {t} agentk_{name}"));
        if let Some(m) = rest {
            out.push('\t');
            out.push_str(m.trim());
        }
        out.push('\n');
    }
    std::fs::write(to, out).unwrap();
}

/// An agent of `host` in a mount namespace of its own: the faked boot id
/// and kernel table bound over /proc's, a tmpfs at `ns_dir` (empty
/// outside) holding the spinner, started then deleted; returns once the
/// script says the spinner's pid (its line on stdout, just before the
/// agent starts).
fn namespaced_agent(tmp: &Path, ingest: &str, host: &str, spinner: &Path, ns_dir: &Path) -> (Child, u32) {
    let script = format!(
        r#"set -e
mount --make-rprivate /
mount --bind {boot} /proc/sys/kernel/random/boot_id
mount --bind {kallsyms} /proc/kallsyms
mount -t tmpfs tmpfs {dir}
cp {spinner} {dir}/ns-spinner
{dir}/ns-spinner >/dev/null &
spinner=$!
# Once it runs the program (not the shell forked for it), the program is
# gone from every path before the agent starts: only the mapping holds it.
until [ "$(readlink /proc/$spinner/exe)" = {dir}/ns-spinner ]; do :; done
rm {dir}/ns-spinner
echo $spinner
exec {bin} agent --server {ingest} --host {host} --perf 2000 --perf-callchain --trace off --batch 500ms --data {data} >/dev/null
"#,
        boot = tmp.join("boot_id").display(),
        kallsyms = tmp.join("kallsyms").display(),
        dir = ns_dir.display(),
        spinner = spinner.display(),
        bin = BIN,
        data = tmp.join(format!("{host}-data")).display(),
    );
    let mut child = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let pid = line.trim().parse().unwrap_or_else(|_| panic!("{host}: no spinner started (the script said {line:?})"));
    (child, pid)
}

/// Processes killed when dropped (the spinners outlive their agents).
struct Pids(Vec<u32>);

impl Drop for Pids {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

fn top(addr: &str, query: &str) -> Result<serde_json::Value, String> {
    let (status, body) = http_get(addr, &format!("/api/v1/profile/top?{query}"));
    if status != 200 {
        return Err(body);
    }
    serde_json::from_str(&body).map_err(|_| body)
}

#[test]
fn another_node_s_user_and_kernel_frames_are_named_from_what_its_agent_sent() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    std::fs::write(tmp.join("boot_id"), format!("{BOOT}\n")).unwrap();
    renamed_kallsyms(&tmp.join("kallsyms"));
    let (src, spinner) = (tmp.join("spinner.c"), tmp.join("spinner"));
    std::fs::write(&src, SPINNER_C).unwrap();
    assert!(Command::new("cc").args(["-O1", "-g", "-o"]).arg(&spinner).arg(&src).status().expect("cc").success());
    let build_id = perf::procs::build_id(&spinner).expect("cc links a build id");

    let data = tmp.join("server");
    let ingest = format!("127.0.0.1:{}", common::free_port());
    let srv = common::start(&["server", "--listen", "127.0.0.1:0", "--ingest", &ingest], &data);
    let mut agents = Vec::new();
    let mut spinners = Pids(Vec::new());
    for host in ["ns-a", "ns-b"] {
        let ns_dir = tmp.join(format!("{host}-only"));
        std::fs::create_dir(&ns_dir).unwrap();
        let (child, pid) = namespaced_agent(tmp, &ingest, host, &spinner, &ns_dir);
        agents.push((host, common::Killed(child), ns_dir));
        spinners.0.push(pid);
    }
    for ((_, _, ns_dir), pid) in agents.iter().zip(&spinners.0) {
        // Its path exists nowhere outside the namespace.
        assert_eq!(std::fs::read_dir(ns_dir).unwrap().count(), 0);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        assert!(exe.to_string_lossy().ends_with("ns-spinner (deleted)"), "{exe:?}");
    }

    for ((host, ..), pid) in agents.iter().zip(&spinners.0) {
        let query = format!("host={host}&since=1m&pid={pid}&n=50");
        let v = common::until(
            &srv.addr,
            &format!("kansoku_perf_samples_total{{host=\"{host}\"}}"),
            60,
            &format!("{host}: the spinner named and its kernel frames from its own table"),
            || {
                let v = top(&srv.addr, &query)?;
                let rows = v["rows"].as_array().ok_or_else(|| v.to_string())?;
                let first = rows.first().ok_or_else(|| v.to_string())?;
                let named = first["symbol"].as_str().is_some_and(|s| s.contains("kansoku_namespaced_spinner"));
                let kernel = rows
                    .iter()
                    .any(|r| r["module"] == "[kernel]" && r["symbol"].as_str().unwrap().starts_with("agentk_"));
                if named && kernel && v["samples"].as_u64().unwrap_or(0) > 500 { Ok(v) } else { Err(v.to_string()) }
            },
        );
        let body = v.to_string();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows[0]["module"], "ns-spinner", "{body}");
        assert!(rows[0]["share"].as_f64().unwrap() > 50.0, "{body}");
        // Every kernel frame is named from the agent's table, none from the
        // server's own (which has no `agentk_` names).
        for r in rows.iter().filter(|r| r["module"] == "[kernel]") {
            let s = r["symbol"].as_str().unwrap();
            assert!(s.starts_with("agentk_") || s == "[unknown]", "{s}: {body}");
        }
    }

    // The program's binary and the boot's table are on the server, by
    // content; each arrived once though two agents sampled everything.
    let kept = data.join("buildid").join(perf::procs::hex(&build_id));
    assert_eq!(std::fs::read(&kept).unwrap(), std::fs::read(&spinner).unwrap());
    assert!(data.join("kallsyms").join(BOOT).is_file());
    let (_, status) = http_get(&srv.addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let s = &status["symbols"];
    assert_eq!(s["refused"], 0, "{s}");
    assert_eq!(s["received"], s["files"], "{s}");
    assert!(s["received"].as_u64().unwrap() >= 2, "{s}");
    // The figures are series, too (stored every second).
    let received = s["received"].as_f64().unwrap();
    let series = "kansoku_symbols_received_total";
    common::until(&srv.addr, series, 10, "the series of the symbol store's figures", || {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64;
        let q = common::query(&srv.addr, series, 0, now);
        let last = q["series"][0]["values"].as_array().and_then(|v| v.last()?.as_f64());
        if last.is_some_and(|v| v >= received) { Ok(()) } else { Err(q.to_string()) }
    });
}
