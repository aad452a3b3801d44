//! Every task's run time in one read, by a BPF task iterator
//! (`bpf/tasks.bpf.c`): the processes collector's way to find the
//! processes that ran since its last round without walking `/proc` and
//! reading a file per process. Each read attaches the iterator anew (a
//! link, then an iterator file read to its end): two system calls and the
//! kernel's walk of its task list.

use std::io::Read;

use aya::Ebpf;
use aya::programs::Iter;

use crate::TraceError;

static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tasks.bpf.o"));

/// Bytes of one record: tgid, pid (u32 each), run time ns (u64), little-endian.
pub const RECORD: usize = 16;

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

    /// Every task now: (thread group, run time ns) per thread, into `out`.
    pub fn read(&mut self, out: &mut Vec<(u32, u64)>) -> std::io::Result<()> {
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

/// The records of `bytes` into `out` (cleared first): (tgid, run time ns);
/// None if the bytes are not whole records.
pub fn parse(bytes: &[u8], out: &mut Vec<(u32, u64)>) -> Option<()> {
    out.clear();
    if !bytes.len().is_multiple_of(RECORD) {
        return None;
    }
    out.extend(bytes.chunks_exact(RECORD).map(|r| {
        let tgid = u32::from_le_bytes(r[0..4].try_into().expect("4 bytes"));
        let ns = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
        (tgid, ns)
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
        let sum = |tasks: &[(u32, u64)]| tasks.iter().filter(|t| t.0 == me).map(|t| t.1).sum::<u64>();
        it.read(&mut tasks).unwrap();
        let n = std::fs::read_dir("/proc")
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_str().unwrap().parse::<u32>().is_ok())
            .count();
        let groups: std::collections::HashSet<u32> = tasks.iter().map(|t| t.0).collect();
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

    #[test]
    fn records_are_whole_or_refused() {
        let mut out = vec![(9, 9)];
        let mut bytes = Vec::new();
        for (g, p, ns) in [(1u32, 1u32, 5u64), (1, 2, 7), (30, 30, u64::MAX)] {
            bytes.extend_from_slice(&g.to_le_bytes());
            bytes.extend_from_slice(&p.to_le_bytes());
            bytes.extend_from_slice(&ns.to_le_bytes());
        }
        assert_eq!(parse(&bytes, &mut out), Some(()));
        assert_eq!(out, [(1, 5), (1, 7), (30, u64::MAX)]);
        assert_eq!(parse(&bytes[..20], &mut out), None);
    }
}
