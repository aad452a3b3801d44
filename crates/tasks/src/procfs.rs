//! `/proc/PID/{stat,io,status,smaps_rollup}` read into numbers: pure parsers, fuzzed.

/// The fields of `/proc/PID/stat` kept (proc(5); fields counted from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    /// `comm`: up to 15 bytes, any bytes but NUL (parentheses and spaces too).
    pub comm: String,
    pub state: u8,
    pub ppid: u32,
    pub majflt: u64,
    /// Clock ticks (USER_HZ).
    pub utime: u64,
    pub stime: u64,
    pub num_threads: u64,
    /// Ticks after boot: with the pid, a process's identity.
    pub starttime: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// One `/proc/PID/stat` line; None when it is not one.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    // The comm may hold ')': the last one closes it.
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_owned();
    let mut f = text[close + 1..].split_ascii_whitespace();
    // f.nth(k) consumes; fields from 3 on, index = field - 3.
    let mut at = 3usize;
    let mut field = |n: usize| -> Option<&str> {
        let v = f.nth(n - at)?;
        at = n + 1;
        Some(v)
    };
    let state = *field(3)?.as_bytes().first()?;
    let ppid = field(4)?.parse().ok()?;
    let majflt = field(12)?.parse().ok()?;
    let utime = field(14)?.parse().ok()?;
    let stime = field(15)?.parse().ok()?;
    let num_threads = field(20)?.parse().ok()?;
    let starttime = field(22)?.parse().ok()?;
    let rss: i64 = field(24)?.parse().ok()?;
    Some(Stat { pid, comm, state, ppid, majflt, utime, stime, num_threads, starttime, rss_pages: rss.max(0) as u64 })
}

/// Storage I/O of `/proc/PID/io` (readable by the owner and root).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Io {
    pub read_bytes: u64,
    pub write_bytes: u64,
}

pub fn parse_io(text: &str) -> Option<Io> {
    let mut io = Io::default();
    let (mut r, mut w) = (false, false);
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("read_bytes:") {
            io.read_bytes = v.trim().parse().ok()?;
            r = true;
        } else if let Some(v) = line.strip_prefix("write_bytes:") {
            io.write_bytes = v.trim().parse().ok()?;
            w = true;
        }
    }
    (r && w).then_some(io)
}

/// Context switches of `/proc/PID/status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switches {
    pub voluntary: u64,
    pub nonvoluntary: u64,
}

pub fn parse_status(text: &str) -> Option<Switches> {
    let mut s = Switches::default();
    let (mut v, mut n) = (false, false);
    for line in text.lines() {
        if let Some(x) = line.strip_prefix("voluntary_ctxt_switches:") {
            s.voluntary = x.trim().parse().ok()?;
            v = true;
        } else if let Some(x) = line.strip_prefix("nonvoluntary_ctxt_switches:") {
            s.nonvoluntary = x.trim().parse().ok()?;
            n = true;
        }
    }
    (v && n).then_some(s)
}

/// The proportional set size of `/proc/PID/smaps_rollup` (its `Pss:` line,
/// kB), in bytes: the process's resident pages, each shared page divided
/// among the processes sharing it.
pub fn parse_pss(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    let mut f = line["Pss:".len()..].split_ascii_whitespace();
    let kb: u64 = f.next()?.parse().ok()?;
    (f.next() == Some("kB")).then_some(kb)?.checked_mul(1024)
}

/// The states of `/proc/PID/stat`'s letter as process-exporter names them
/// (`namedprocess_namegroup_states{state}`), in the order groups store them.
pub const STATES: [&str; 5] = ["Running", "Sleeping", "Waiting", "Zombie", "Other"];

/// The index in [`STATES`] of a state letter (`D` is Waiting, stopped and
/// traced are Other).
pub fn state_index(state: u8) -> usize {
    match state {
        b'R' => 0,
        b'S' => 1,
        b'D' => 2,
        b'Z' => 3,
        _ => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comm_with_parentheses_and_spaces() {
        let line = "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 1200 0 3 0 250 75 0 0 20 0 4 0 123456 10000000 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "my (odd) prog");
        assert_eq!((s.state, s.ppid, s.majflt, s.utime, s.stime), (b'S', 1, 3, 250, 75));
        assert_eq!((s.num_threads, s.starttime, s.rss_pages), (4, 123456, 2560));
        assert_eq!(parse_stat("12 (x) S 1"), None, "cut short");
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn io_and_switches() {
        let io =
            "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(parse_io(io), Some(Io { read_bytes: 4096, write_bytes: 8192 }));
        let st = "Name:\tx\nvoluntary_ctxt_switches:\t10\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_status(st), Some(Switches { voluntary: 10, nonvoluntary: 3 }));
        assert_eq!(parse_status("Name:\tx\n"), None);
    }

    #[test]
    fn our_own_stat_reads() {
        let text = std::fs::read_to_string("/proc/self/stat").unwrap();
        let s = parse_stat(&text).unwrap();
        assert_eq!(s.pid, std::process::id());
        assert!(s.num_threads >= 1 && s.rss_pages > 0);
    }

    #[test]
    fn pss_is_read_from_smaps_rollup() {
        let text = "55d0c8a00000-7ffd3000 ---p 00000000 00:00 0                          [rollup]\n\
                    Rss:                3412 kB\nPss:                1207 kB\nPss_Dirty:           300 kB\n";
        assert_eq!(parse_pss(text), Some(1207 * 1024));
        assert_eq!(parse_pss("Pss: 12 MB\n"), None);
        assert_eq!(parse_pss("Pss_Dirty: 1 kB\n"), None);
        assert_eq!(parse_pss(&format!("Pss: {} kB\n", u64::MAX)), None, "overflow refused");
        assert_eq!(STATES[state_index(b'D')], "Waiting");
        assert_eq!(STATES[state_index(b'T')], "Other");
    }
}
