//! Every task's run time, context switches and storage I/O in one read, by
//! a BPF task iterator (`bpf/tasks.bpf.c`): the processes collector's way
//! to find the processes that ran since its last round without walking
//! `/proc`, and to count their switches and I/O without reading their
//! `status` and `io` files. Each read attaches the iterator anew (a
//! link, then an iterator file read to its end): two system calls and the
//! kernel's walk of its task list.

use std::io::Read;

use aya::Ebpf;
use aya::programs::Iter;

use crate::TraceError;

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tasks.bpf.o"));

/// Bytes of one record: tgid, pid, `__state`, `exit_state`, kernel
/// thread (0 or 1), padding (u32 each), run time ns, voluntary and
/// involuntary context switches, bytes read from and written to storage
/// (u64 each), little-endian.
pub const RECORD: usize = 64;

/// One thread as the iterator saw it (`model::task::Thread`).
pub use model::task::Thread as Task;

/// The loaded iterator.
#[derive(Debug)]
pub struct TaskIter {
    ebpf: Ebpf,
    buf: Vec<u8>,
}

impl TaskIter {
    /// Loads the iterator (relocated against this kernel's BTF).
    pub fn open() -> Result<TaskIter, TraceError> {
        if OBJECT.is_empty() {
            return Err(TraceError::NotBuilt);
        }
        let btf = aya::Btf::from_sys_fs().map_err(|e| TraceError::Btf(e.to_string()))?;
        let mut ebpf = aya::EbpfLoader::new().btf(Some(&btf)).load(OBJECT)?;
        let prog: &mut Iter = ebpf
            .program_mut("tasks")
            .ok_or(TraceError::Program { name: "tasks", source: aya::programs::ProgramError::NotLoaded })?
            .try_into()
            .map_err(|source| TraceError::Program { name: "tasks", source })?;
        prog.load("task", &btf).map_err(|source| TraceError::Program { name: "tasks", source })?;
        drop(btf);
        crate::bpf::give_back_free_heap();
        Ok(TaskIter { ebpf, buf: Vec::new() })
    }

    /// Every task now, one per thread, into `out`.
    pub fn read(&mut self, out: &mut Vec<Task>) -> std::io::Result<()> {
        let err = |e: String| std::io::Error::other(format!("BPF task iterator: {e}"));
        let prog: &mut Iter = self
            .ebpf
            .program_mut("tasks")
            .ok_or_else(|| err("gone".into()))?
            .try_into()
            .map_err(|e| err(format!("{e}")))?;
        let id = prog.attach().map_err(|e| err(format!("attach: {e}")))?;
        let link = prog.take_link(id).map_err(|e| err(format!("link: {e}")))?;
        let mut file = link.into_file().map_err(|e| err(format!("iterator: {e}")))?;
        self.buf.clear();
        file.read_to_end(&mut self.buf)?;
        parse(&self.buf, out).ok_or_else(|| err(format!("{} bytes: not whole records", self.buf.len())))
    }
}

/// The records of `bytes` into `out` (cleared first); None if the bytes
/// are not whole records.
pub fn parse(bytes: &[u8], out: &mut Vec<Task>) -> Option<()> {
    out.clear();
    if !bytes.len().is_multiple_of(RECORD) {
        return None;
    }
    out.extend(bytes.chunks_exact(RECORD).map(|r| {
        let half = |i: usize| u32::from_le_bytes(r[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let word = |i: usize| u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (tgid, pid) = (half(0), half(1));
        Task {
            tgid,
            // The leader's state is the process's; its threads' are not read.
            state: if pid == tgid { model::task::state_letter(half(2), half(3)) } else { 0 },
            kernel: half(4) != 0,
            runtime_ns: word(3),
            voluntary: word(4),
            nonvoluntary: word(5),
            read_bytes: word(6),
            write_bytes: word(7),
        }
    }));
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root and BPF: the iterator sees this process and its threads, and
    /// a thread that spins moves the group's time.
    #[test]
    fn every_task_is_read_and_a_spinning_thread_moves_its_group_s_time() {
        let mut it = TaskIter::open().expect("the task iterator loads (root, BTF)");
        let me = std::process::id();
        let mut tasks = Vec::new();
        let sum = |tasks: &[Task]| tasks.iter().filter(|t| t.tgid == me).map(|t| t.runtime_ns).sum::<u64>();
        it.read(&mut tasks).unwrap();
        let n = std::fs::read_dir("/proc")
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().parse::<u32>().is_ok())
            .count();
        let groups: std::collections::HashSet<u32> = tasks.iter().map(|t| t.tgid).collect();
        assert!(
            groups.len() * 10 >= n * 9 && groups.len() <= n * 11 / 10 + 10,
            "{} groups, {n} in /proc",
            groups.len()
        );
        let before = sum(&tasks);
        assert!(before > 0);
        let spin = std::thread::spawn(|| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(20) {
                std::hint::black_box(0);
            }
        });
        spin.join().unwrap();
        it.read(&mut tasks).unwrap();
        // The spinning thread has exited: its time left the live threads'
        // sum, but this thread ran meanwhile too; the group's sum changed.
        assert_ne!(sum(&tasks), before);
    }

    /// States and kernel threads as `/proc/PID/stat` has them: a stopped
    /// child is `T`, a sleeping one `S`, kthreadd (pid 2) is a kernel
    /// thread and this process is not.
    #[test]
    fn states_and_kernel_threads_are_proc_s() {
        let mut it = TaskIter::open().expect("the task iterator loads (root, BTF)");
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let mut stopped = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let stopped_pid = nix::unistd::Pid::from_raw(stopped.id() as i32);
        nix::sys::signal::kill(stopped_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        // Wait for each to reach its state as /proc shows it: the condition, not a time.
        let proc_state = |pid: u32| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            s.as_bytes()[s.rfind(')').unwrap() + 2]
        };
        for (pid, want) in [(sleeper.id(), b'S'), (stopped.id(), b'T')] {
            while proc_state(pid) != want {
                std::thread::yield_now();
            }
        }
        let mut tasks = Vec::new();
        it.read(&mut tasks).unwrap();
        let leader = |pid: u32| *tasks.iter().find(|t| t.tgid == pid && t.state != 0).unwrap();
        assert!(!leader(std::process::id()).kernel);
        assert_eq!(leader(sleeper.id()).state, b'S');
        assert_eq!(leader(stopped.id()).state, b'T');
        assert!(leader(2).kernel, "kthreadd is a kernel thread");
        // Exactly one leader record per process.
        assert_eq!(tasks.iter().filter(|t| t.tgid == std::process::id() && t.state != 0).count(), 1);
        for c in [&mut sleeper, &mut stopped] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// The process's switches and storage bytes summed over its threads
    /// are `/proc/self/status`'s and `/proc/self/io`'s, exited threads
    /// included: between a read before and a read after.
    #[test]
    fn a_group_s_switches_and_io_are_its_threads_and_its_dead_threads() {
        let mut it = TaskIter::open().expect("the task iterator loads (root, BTF)");
        let me = std::process::id();
        let of_me = |it: &mut TaskIter| {
            let mut tasks = Vec::new();
            it.read(&mut tasks).unwrap();
            tasks
                .iter()
                .filter(|t| t.tgid == me)
                .fold((0u64, 0u64), |a, t| (a.0 + t.voluntary + t.nonvoluntary, a.1 + t.write_bytes))
        };
        // getrusage counts as the iterator does: live threads and exited ones.
        let rusage_switches = || -> u64 {
            let ru = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
            (ru.voluntary_context_switches() + ru.involuntary_context_switches()) as u64
        };
        // A thread that switches a hundred times and writes 1 MiB to disk,
        // then exits: its counts stay with the group.
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("w");
        std::thread::spawn(move || {
            use std::io::Write;
            // The workload, not a wait: each sleep is a voluntary switch.
            for _ in 0..100 {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            let mut f = std::fs::File::create(path).unwrap();
            f.write_all(&vec![7u8; 1 << 20]).unwrap();
            f.sync_all().unwrap();
        })
        .join()
        .unwrap();
        let io_before = std::fs::read_to_string("/proc/self/io").unwrap();
        let (sw_lo, wr_lo) = (rusage_switches(), field(&io_before, "write_bytes"));
        let (sw, wr) = of_me(&mut it);
        let io_after = std::fs::read_to_string("/proc/self/io").unwrap();
        let wr_hi = field(&io_after, "write_bytes");
        assert!(wr >= 1 << 20, "the exited thread's 1 MiB written is not counted: {wr}");
        assert!((wr_lo..=wr_hi).contains(&wr), "write bytes {wr}, /proc/self/io {wr_lo}..{wr_hi}");
        // Switches grow between reads (this thread switches too): the
        // iterator's sum lies between getrusage's before and after.
        let sw_hi = rusage_switches();
        assert!(sw >= 100, "the exited thread's switches are not counted: {sw}");
        assert!((sw_lo..=sw_hi).contains(&sw), "switches {sw}, getrusage {sw_lo}..{sw_hi}");
    }

    fn field(text: &str, name: &str) -> u64 {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok()).unwrap()
    }

    #[test]
    fn records_are_whole_or_refused() {
        let mut out = vec![Task::default()];
        let mut bytes = Vec::new();
        // (tgid, pid, __state, kernel, run time)
        for (g, p, st, k, ns) in [(1u32, 1u32, 1u32, 0u32, 5u64), (1, 2, 0, 0, 7), (30, 30, 0x402, 1, u64::MAX)] {
            for h in [g, p, st, 0, k, 0] {
                bytes.extend_from_slice(&h.to_le_bytes());
            }
            for v in [ns, 1, 2, 3, 4] {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        assert_eq!(parse(&bytes, &mut out), Some(()));
        let t = |tgid, state, kernel, runtime_ns| Task {
            tgid,
            state,
            kernel,
            runtime_ns,
            voluntary: 1,
            nonvoluntary: 2,
            read_bytes: 3,
            write_bytes: 4,
        };
        assert_eq!(out, [t(1, b'S', false, 5), t(1, 0, false, 7), t(30, b'I', true, u64::MAX)]);
        assert_eq!(parse(&bytes[..20], &mut out), None);
    }
}
