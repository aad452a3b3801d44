//! One thread's cumulative figures as a task iterator reads them
//! (`trace::tasks`), for the processes collector (`tasks`).

/// One thread: its thread group, run time, context switches and storage
/// bytes. A group leader's switches and bytes include those of its group's
/// exited threads, so that the sum over a thread group is the process's
/// (what `getrusage` and `/proc/PID/io` count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thread {
    pub tgid: u32,
    /// The state letter `/proc/PID/stat` would show (`R`, `S`, `D`, `T`,
    /// `t`, `X`, `Z`, `P`, `I`) on a group leader — the process's state —
    /// and 0 on its other threads.
    pub state: u8,
    /// A kernel thread (no user space, no memory of its own).
    pub kernel: bool,
    pub runtime_ns: u64,
    pub voluntary: u64,
    pub nonvoluntary: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl Thread {
    /// Adds `o`'s figures to these (summing a thread group).
    pub fn add(&mut self, o: &Thread) {
        if o.state != 0 {
            self.state = o.state;
        }
        self.kernel |= o.kernel;
        self.runtime_ns = self.runtime_ns.wrapping_add(o.runtime_ns);
        self.voluntary = self.voluntary.wrapping_add(o.voluntary);
        self.nonvoluntary = self.nonvoluntary.wrapping_add(o.nonvoluntary);
        self.read_bytes = self.read_bytes.wrapping_add(o.read_bytes);
        self.write_bytes = self.write_bytes.wrapping_add(o.write_bytes);
    }
}

/// The state letter of `/proc/PID/stat` for a task's `__state` and
/// `exit_state` (as the kernel's `__task_state_index` maps them): an
/// rt-lock wait or a frozen task `D`, an idle kernel thread `I`, else the
/// highest reported bit.
pub fn state_letter(state: u32, exit_state: u32) -> u8 {
    const TASK_REPORT: u32 = 0x7f;
    const TASK_IDLE: u32 = 0x402;
    const TASK_RTLOCK_WAIT: u32 = 0x1000;
    const TASK_FROZEN: u32 = 0x8000;
    if state & (TASK_RTLOCK_WAIT | TASK_FROZEN) != 0 {
        return b'D';
    }
    if state & TASK_IDLE == TASK_IDLE {
        return b'I';
    }
    let reported = (state | exit_state) & TASK_REPORT;
    // fls: 0 for running, else the highest set bit's position (1-based).
    let index = (u32::BITS - reported.leading_zeros()) as usize;
    b"RSDTtXZP"[index]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_proc_s_letters() {
        assert_eq!(state_letter(0, 0), b'R');
        assert_eq!(state_letter(1, 0), b'S');
        assert_eq!(state_letter(2, 0), b'D');
        assert_eq!(state_letter(4, 0), b'T');
        assert_eq!(state_letter(8, 0), b't');
        assert_eq!(state_letter(0, 0x20), b'Z');
        assert_eq!(state_letter(0, 0x10), b'X');
        assert_eq!(state_letter(0x40, 0), b'P');
        assert_eq!(state_letter(0x402, 0), b'I');
        assert_eq!(state_letter(0x8402, 0), b'D');
        // TASK_FREEZABLE (0x2000) and other high bits are not reported.
        assert_eq!(state_letter(0x2001, 0), b'S');
        assert_eq!(state_letter(!0x402, 0), b'D');
    }
}
