//! Per-core CPU time and system-wide scheduler counters from `/proc/stat`.
//!
//! Resolution: CPU times are in USER_HZ ticks (10 ms on every Linux since
//! USER_HZ is fixed at 100); the kernel accounts them per scheduler tick
//! (4 ms at HZ=250) unless built with VIRT_CPU_ACCOUNTING_GEN. At a 100 ms
//! interval one tick is ±10 % of a core: use `sysfs::cpuidle` for a finer idle
//! time where the kernel exposes it.

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError, field_u64};

/// Mode names in `/proc/stat` column order, as node_exporter labels them.
pub const MODES: [&str; 8] = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// One entry per `cpuN` line, in file order.
    pub cpus: Vec<CpuTicks>,
    pub context_switches: u64,
    pub interrupts: u64,
    pub forks: u64,
    pub procs_running: u64,
    pub procs_blocked: u64,
    pub boot_time_seconds: u64,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
pub struct CpuTicks {
    pub cpu: u32,
    /// user, nice, system, idle, iowait, irq, softirq, steal (USER_HZ ticks).
    /// `user`/`nice` include guest time, as in the kernel.
    pub modes: [u64; 8],
    /// guest, guest_nice.
    pub guest: [u64; 2],
}

pub fn parse_stat(text: &str) -> Result<Stat, ParseError> {
    let mut stat = Stat::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut fields = line.split_ascii_whitespace();
        let Some(key) = fields.next() else { continue };
        match key {
            "cpu" => {}
            "ctxt" => stat.context_switches = field_u64(fields.next(), n, "ctxt")?,
            "intr" => stat.interrupts = field_u64(fields.next(), n, "intr")?,
            "processes" => stat.forks = field_u64(fields.next(), n, "processes")?,
            "procs_running" => stat.procs_running = field_u64(fields.next(), n, "procs_running")?,
            "procs_blocked" => stat.procs_blocked = field_u64(fields.next(), n, "procs_blocked")?,
            "btime" => stat.boot_time_seconds = field_u64(fields.next(), n, "btime")?,
            k if k.starts_with("cpu") => {
                let cpu = k[3..].parse().map_err(|_| ParseError::new(n, format!("bad cpu name {k:?}")))?;
                let mut ticks = CpuTicks { cpu, ..CpuTicks::default() };
                for (slot, mode) in ticks.modes.iter_mut().zip(MODES) {
                    *slot = field_u64(fields.next(), n, mode)?;
                }
                // guest columns appeared in 2.6.24 / 2.6.33; absent means 0.
                for slot in &mut ticks.guest {
                    *slot = fields.next().map_or(Ok(0), |f| field_u64(Some(f), n, "guest"))?;
                }
                stat.cpus.push(ticks);
            }
            _ => {}
        }
    }
    if stat.cpus.is_empty() {
        return Err(ParseError::new(1, "no cpuN lines"));
    }
    Ok(stat)
}

#[derive(Debug)]
pub struct StatSource {
    file: ProcFile,
    ticks_per_second: f64,
    cpu_labels: Vec<String>,
}

impl StatSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let file = super::open(root, "proc/stat", "stat")?;
        let hz = rustix::param::clock_ticks_per_second() as f64;
        Ok(Box::new(StatSource { file, ticks_per_second: hz, cpu_labels: Vec::new() }))
    }
}

impl HostSource for StatSource {
    fn name(&self) -> &'static str {
        "stat"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        vec![&mut self.file]
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        let (path, text) = self.file.read_with_path()?;
        let stat = super::parsed(path, parse_stat(text))?;
        for c in &stat.cpus {
            while self.cpu_labels.len() <= c.cpu as usize {
                self.cpu_labels.push(self.cpu_labels.len().to_string());
            }
            let cpu = self.cpu_labels[c.cpu as usize].as_str();
            // Divide (not multiply by 1/hz) so values are the exact decimal
            // ticks/100 the store's decimal codec recognises.
            for (mode, ticks) in MODES.iter().zip(c.modes) {
                out.emit(
                    "node_cpu_seconds_total",
                    &[("cpu", cpu), ("mode", mode)],
                    ticks as f64 / self.ticks_per_second,
                );
            }
            for (mode, ticks) in ["user", "nice"].iter().zip(c.guest) {
                out.emit(
                    "node_cpu_guest_seconds_total",
                    &[("cpu", cpu), ("mode", mode)],
                    ticks as f64 / self.ticks_per_second,
                );
            }
        }
        out.emit("node_context_switches_total", &[], stat.context_switches as f64);
        out.emit("node_intr_total", &[], stat.interrupts as f64);
        out.emit("node_forks_total", &[], stat.forks as f64);
        out.emit("node_procs_running", &[], stat.procs_running as f64);
        out.emit("node_procs_blocked", &[], stat.procs_blocked as f64);
        out.emit("node_boot_time_seconds", &[], stat.boot_time_seconds as f64);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_file() {
        let stat = parse_stat(include_str!("../../tests/fixtures/debian12-vm/stat")).unwrap();
        assert_eq!(stat.cpus.len(), 2);
        assert_eq!(stat.cpus[1].cpu, 1);
        assert!(stat.context_switches > 0 && stat.interrupts > 0 && stat.forks > 0);
        assert!(stat.boot_time_seconds > 1_600_000_000);
        assert!(stat.procs_running >= 1);
    }

    #[test]
    fn old_kernel_without_guest_columns() {
        let stat = parse_stat("cpu  1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\nctxt 9\n").unwrap();
        assert_eq!(stat.cpus[0].modes, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(stat.cpus[0].guest, [0, 0]);
        assert_eq!(stat.context_switches, 9);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(
            parse_stat("cpu0 1 2 x").unwrap_err(),
            ParseError::new(1, r#"field system: "x" is not an unsigned integer"#)
        );
        assert_eq!(parse_stat("cpuX 1").unwrap_err(), ParseError::new(1, r#"bad cpu name "cpuX""#));
        assert_eq!(parse_stat("ctxt 1\n").unwrap_err(), ParseError::new(1, "no cpuN lines"));
        assert_eq!(parse_stat("cpu0 1 2").unwrap_err(), ParseError::new(1, "missing field system"));
    }
}
