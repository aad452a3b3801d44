//! One thread's cumulative figures as a task iterator reads them
//! (`trace::tasks`), for the processes collector (`tasks`).

/// One thread: its thread group, run time, context switches and storage
/// bytes. A group leader's switches and bytes include those of its group's
/// exited threads, so that the sum over a thread group is the process's
/// (what `getrusage` and `/proc/PID/io` count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thread {
    pub tgid: u32,
    pub runtime_ns: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl Thread {
    /// Adds `o`'s figures to these (summing a thread group).
    pub fn add(&mut self, o: &Thread) {
        self.runtime_ns = self.runtime_ns.wrapping_add(o.runtime_ns);
        self.voluntary = self.voluntary.wrapping_add(o.voluntary);
        self.nonvoluntary = self.nonvoluntary.wrapping_add(o.nonvoluntary);
        self.read_bytes = self.read_bytes.wrapping_add(o.read_bytes);
        self.write_bytes = self.write_bytes.wrapping_add(o.write_bytes);
    }
}
