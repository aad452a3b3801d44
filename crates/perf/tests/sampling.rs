//! Real sampling with perf_event_open (software cpu-clock, root as on CI):
//! a busy child process is what its CPU runs most; times are on
//! CLOCK_MONOTONIC; a ring too small for its rate reports its losses.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use perf::{Capture, Config, Event, Record};

/// The tests run one at a time: each one's busy process must be the only one.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Busy(Child);

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_busy_process_is_on_top_and_times_are_monotonic() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let busy = Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
    let pid = busy.0.id();
    // The busy loop's own on-CPU time (schedstat), what its samples must match.
    let on_cpu = || -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
        s.split_whitespace().next().unwrap().parse().unwrap()
    };
    let cpu0 = on_cpu();
    let mut cap = Capture::open(&Config { period_ns: 100_000, ring_pages: 64, ..Config::default() }).unwrap();
    let started = Instant::now();
    let mut by_pid: HashMap<u32, u64> = HashMap::new();
    let mut times: HashMap<u32, Vec<u64>> = HashMap::new();
    // Drain whenever a ring is a quarter full, until 4,000 samples are in.
    while by_pid.values().sum::<u64>() < 4000 {
        // (Wake-ups are edge-like: a ring that filled before the poll began
        // may not signal again; the poll's own limit bounds that case.)
        cap.wait(Duration::from_millis(100)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(30), "4,000 samples not in within 30 s");
        cap.drain(|_, r| {
            if let Record::Sample { pid, time, cpu, .. } = r {
                *by_pid.entry(pid).or_default() += 1;
                times.entry(cpu).or_default().push(time);
            }
        })
        .unwrap();
    }
    let elapsed = started.elapsed();
    let ran_ns = on_cpu() - cpu0;
    let total: u64 = by_pid.values().sum();
    let busy_n = by_pid.get(&pid).copied().unwrap_or(0);
    assert!(total > 1000, "only {total} samples in {elapsed:?}");
    // A sample per 100 µs the busy loop was on a CPU: its count matches its
    // own CPU time, however busy the rest of the machine is. (Samples in
    // flight at the ends blur it by a few; the bounds are wide.)
    let expected = ran_ns / 100_000;
    assert!(expected > 200, "the busy loop ran only {ran_ns} ns in {elapsed:?}");
    assert!(
        busy_n * 2 > expected && busy_n < expected * 2,
        "busy pid {pid}: {busy_n} samples for {ran_ns} ns on CPU (~{expected} expected); all: {by_pid:?}"
    );
    assert_eq!(cap.counts.lost, 0, "a 256 KiB ring drained at a quarter full loses nothing");
    for (cpu, t) in &times {
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "cpu {cpu}: times go back");
        let span = t.last().unwrap() - t.first().unwrap();
        assert!(span <= elapsed.as_nanos() as u64, "cpu {cpu}: samples span {span} ns in {elapsed:?}");
    }
}

#[test]
fn cycles_sample_where_the_machine_counts_them_and_say_what_to_use_where_not() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let busy = Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
    let pid = busy.0.id();
    let cfg = Config { event: Event::Cycles, period_ns: 1_000_000, ring_pages: 64, ..Config::default() };
    match Capture::open(&cfg) {
        // A machine with a PMU: the busy loop's cycles are sampled.
        Ok(mut cap) => {
            let started = Instant::now();
            let mut busy_n = 0;
            while busy_n < 100 {
                cap.wait(Duration::from_millis(100)).unwrap();
                assert!(started.elapsed() < Duration::from_secs(30), "100 cycle samples of the busy loop not in 30 s");
                cap.drain(|_, r| {
                    if matches!(r, Record::Sample { pid: p, .. } if p == pid) {
                        busy_n += 1;
                    }
                })
                .unwrap();
            }
        }
        // Without one (this project's VMs): an error that says so and names
        // the event that works.
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("perf_event_open(cycles, cpu "), "{msg}");
            assert!(msg.contains("no hardware cycle counter") && msg.contains("sample with cpu-clock"), "{msg}");
        }
    }
}

#[test]
fn a_full_ring_reports_what_it_lost() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let _busy = Busy(Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
    // One 4 KiB page holds ~100 samples: 10 ms at 10 kHz. Woken only when
    // it is all but full, then drained: by then it has overflowed, and the
    // kernel writes its LOST record once the reader frees space.
    let cfg = Config { period_ns: 100_000, ring_pages: 1, wakeup_bytes: 4096 - 64, ..Config::default() };
    let mut cap = Capture::open(&cfg).unwrap();
    let mut lost_records = 0;
    let started = Instant::now();
    while cap.counts.lost == 0 {
        cap.wait(Duration::from_millis(100)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(30), "no loss reported within 30 s: {:?}", cap.counts);
        cap.drain(|_, r| {
            if let Record::Lost { .. } = r {
                lost_records += 1;
            }
        })
        .unwrap();
    }
    assert!(cap.counts.lost > 0, "{:?}", cap.counts);
    assert_eq!(lost_records, cap.counts.lost_records);
    // What was kept plus what was lost is more than the page could hold
    // (4,096 bytes of 40-byte samples).
    let kept_and_lost = cap.counts.samples + cap.counts.lost;
    assert!(kept_and_lost > 4096 / 40, "{:?}", cap.counts);
}

/// The side band of a real process: its fork, its exec (a COMM record),
/// the executable mapping of its binary with the binary's build id, its
/// exit — in this order by their times (the rings of different CPUs are
/// read one after the other).
#[test]
fn a_process_s_life_is_in_the_side_band() {
    let _one_at_a_time = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut cap = Capture::open(&Config { period_ns: 1_000_000, sideband: true, ..Config::default() }).unwrap();
    let exe = std::fs::canonicalize("/bin/true").unwrap();
    let mut child = Command::new(&exe).spawn().unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    let mut seen: Vec<(u64, String)> = Vec::new();
    let mut build_id = Vec::new();
    let started = Instant::now();
    while !seen.iter().any(|s| s.1 == "exit") {
        assert!(started.elapsed() < Duration::from_secs(30), "no exit record in 30 s: {seen:?}");
        cap.wait(Duration::from_millis(50)).unwrap();
        cap.drain(|_, r| match r {
            Record::Fork { time, pid: p, .. } if p == pid => seen.push((time, "fork".into())),
            Record::Comm { time, pid: p, exec: true, .. } if p == pid => seen.push((time, "exec".into())),
            Record::Mmap2 { time, pid: p, filename, build_id: id, .. }
                if p == pid && std::path::Path::new(std::str::from_utf8(filename).unwrap()) == exe =>
            {
                build_id = id.to_vec();
                seen.push((time, "binary".into()));
            }
            Record::Exit { time, pid: p, tid, .. } if p == pid && tid == pid => seen.push((time, "exit".into())),
            _ => {}
        })
        .unwrap();
    }
    seen.sort();
    assert_eq!(seen.iter().map(|s| s.1.as_str()).collect::<Vec<_>>(), ["fork", "exec", "binary", "exit"], "{seen:?}");
    assert!(cap.counts.sideband >= 4);
    let want = perf::procs::build_id(&exe).expect("/bin/true has a build id");
    assert!(build_id.is_empty() || build_id == want, "the kernel's build id is the file's");
}
