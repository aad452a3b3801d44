//! Reads `perf script -F cpu,pid,tid,time,ip --ns` output into per-CPU
//! event batches, and records such a capture with `perf record`.
//!
//! Line shape (fields as perf aligns them):
//! `  1234/1240  [001] 46828.738031581:  ffffffff821f2c2b`

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use codec::events::EventBatch;

/// One batch per CPU, in input order. perf's times are CLOCK_MONOTONIC-like
/// seconds; `offset_ns` is added to put them on the wall clock.
pub fn parse(text: &str, offset_ns: i64) -> anyhow::Result<Vec<EventBatch>> {
    let mut per_cpu: Vec<EventBatch> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parse_line(line).with_context(|| format!("perf script line {}: {line:?}", i + 1))?;
        let (pid, tid, cpu, t, ip) = parsed;
        while per_cpu.len() <= cpu as usize {
            per_cpu.push(EventBatch { cpu: per_cpu.len() as u32, ..EventBatch::default() });
        }
        per_cpu[cpu as usize].push(t + offset_ns, pid, tid, ip);
    }
    Ok(per_cpu.into_iter().filter(|b| !b.is_empty()).collect())
}

/// Cuts one CPU's events into batches spanning at most `span_ns` and
/// holding at most `max` events: how agents send them (`kansoku import`,
/// `kansoku lab store`).
pub fn pieces(b: &EventBatch, span_ns: i64, max: usize) -> Vec<EventBatch> {
    let mut out = Vec::new();
    let mut lo = 0;
    while lo < b.len() {
        let end = b.time[lo].saturating_add(span_ns);
        let hi = (lo + b.time[lo..].partition_point(|&t| t < end)).min(lo + max.max(1));
        out.push(EventBatch {
            cpu: b.cpu,
            time: b.time[lo..hi].to_vec(),
            pid: b.pid[lo..hi].to_vec(),
            tid: b.tid[lo..hi].to_vec(),
            ip: b.ip[lo..hi].to_vec(),
            chain: if b.chain.is_empty() { Vec::new() } else { b.chain[lo..hi].to_vec() },
            stacks: b.stacks.clone(),
            procs: b.procs.clone(),
        });
        lo = hi;
    }
    out
}

fn parse_line(line: &str) -> anyhow::Result<(u32, u32, u32, i64, u64)> {
    let mut it = line.split_whitespace();
    let (pid, tid) = it.next().and_then(|f| f.split_once('/')).context("no pid/tid")?;
    let cpu = it.next().context("no [cpu]")?;
    let cpu = cpu.strip_prefix('[').and_then(|c| c.strip_suffix(']')).context("cpu is not [N]")?;
    let time = it.next().context("no time")?.trim_end_matches(':');
    let (s, ns) = time.split_once('.').context("time is not seconds.nanoseconds")?;
    if ns.len() != 9 {
        bail!("time needs nanoseconds (perf script --ns)");
    }
    let t = s.parse::<i64>()?.checked_mul(1_000_000_000).context("time overflows")? + ns.parse::<i64>()?;
    let ip = u64::from_str_radix(it.next().context("no ip")?, 16).context("ip is not hex")?;
    Ok((id(pid)?, id(tid)?, cpu.parse()?, t, ip))
}

/// A pid or tid; perf prints the record's `(u32)-1` (no task known) as `-1`:
/// kept as the record holds it.
fn id(s: &str) -> anyhow::Result<u32> {
    if s == "-1" { Ok(u32::MAX) } else { Ok(s.parse()?) }
}

/// Records `perf record -e cpu-clock -F hz -a` on every CPU while `workload`
/// runs, and returns its `perf script` text. A workload that is not
/// installed is named as such (perf would only say it failed).
pub fn record(dir: &Path, hz: u32, workload: &[&str]) -> anyhow::Result<String> {
    let program = workload.first().context("no workload to record")?;
    find_program(program)?;
    let data = dir.join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", &hz.to_string(), "-a", "-o"])
        .arg(&data)
        .arg("--")
        .args(workload)
        .stdout(std::process::Stdio::null())
        .output()
        .context("run perf (Debian: apt-get install linux-perf)")?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("nothing").trim();
        let hint = if said.contains("paranoid") || said.contains("ermission") {
            "; is perf_event_paranoid <= 1 or are you root?"
        } else {
            ""
        };
        bail!("perf record of `{}` failed ({}): perf said: {said}{hint}", workload.join(" "), out.status);
    }
    script(&data)
}

/// The path of `program` (a name looked up in PATH, or a path), or an error
/// that says it is not installed.
pub fn find_program(program: &str) -> anyhow::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = Path::new(program);
        return if runnable(p) {
            Ok(p.to_owned())
        } else {
            bail!("the workload {program} does not exist or is not executable")
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| runnable(p)).with_context(|| {
        format!("the workload `{program}` is not installed (not in PATH); on Debian: apt-get install {program}, or scripts/deps.sh bench")
    })
}

/// `perf script -F cpu,pid,tid,time,ip --ns -i FILE`: the text [`parse`] reads.
pub fn script(file: &Path) -> anyhow::Result<String> {
    let out = Command::new("perf")
        .args(["script", "-F", "cpu,pid,tid,time,ip", "--ns", "-i"])
        .arg(file)
        .output()
        .context("run perf script (Debian: apt-get install linux-perf)")?;
    if !out.status.success() {
        bail!("perf script -i {}: {}", file.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    String::from_utf8(out.stdout).context("perf script printed non-UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_workload_is_named_before_perf_runs() {
        let e = record(Path::new("/nonexistent"), 99, &["kansoku-no-such-workload", "--cpu", "1"]).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("`kansoku-no-such-workload` is not installed"), "{msg}");
        assert!(find_program("sh").is_ok());
        assert!(format!("{:#}", find_program("/nonexistent/x").unwrap_err()).contains("does not exist"));
    }

    #[test]
    fn pieces_are_cut_by_span_and_size() {
        let mut b = EventBatch { cpu: 3, ..EventBatch::default() };
        for i in 0..10 {
            b.push(i * 40, 1, 2, 3);
        }
        let parts = pieces(&b, 100, 2);
        assert_eq!(parts.iter().map(EventBatch::len).collect::<Vec<_>>(), [2, 2, 2, 2, 2]);
        assert!(parts.iter().all(|p| p.cpu == 3));
        let parts = pieces(&b, 100, 1000);
        assert_eq!(parts.iter().map(|p| p.time[0]).collect::<Vec<_>>(), [0, 120, 240, 360]);
    }

    #[test]
    fn parses_perf_script_lines_and_rejects_others() {
        let text = "    0/0     [000] 46828.738031581:  ffffffff821f2c2b\n\
                    29748/29750 [001] 46828.738059032:      7f44a5dd4deb\n";
        let b = parse(text, 5).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(
            (b[0].cpu, b[0].time[0], b[0].pid[0], b[0].ip[0]),
            (0, 46_828_738_031_586, 0, 0xffff_ffff_821f_2c2b)
        );
        assert_eq!((b[1].cpu, b[1].pid[0], b[1].tid[0], b[1].ip[0]), (1, 29748, 29750, 0x7f44_a5dd_4deb));
        // A sample perf could not attribute to a task.
        let b = parse("   -1/-1    [001] 11748.604999581:  ffffffff8220342e\n", 0).unwrap();
        assert_eq!((b[0].pid[0], b[0].tid[0]), (u32::MAX, u32::MAX));
        let e = parse("1/1 [000] 12.5: ff\n", 0).unwrap_err();
        assert!(format!("{e:#}").contains("line 1") && format!("{e:#}").contains("--ns"), "{e:#}");
        assert!(parse("garbage\n", 0).is_err());
    }
}
