//! Per-core idle time by C-state from `/sys/devices/system/cpu/cpuN/cpuidle/stateM/{name,time,usage}`.
//!
//! The finer per-core source: `time` is µs spent in the state, accounted at
//! each idle entry/exit rather than per tick, so at 100 ms it is exact where
//! `/proc/stat` idle is ±10 %. Absent in VMs without a cpuidle driver (then
//! only `/proc/stat` ticks are available; the collector logs that once).

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError};

#[derive(Debug)]
struct State {
    cpu: String,
    name: String,
    time: ProcFile,
    usage: ProcFile,
}

#[derive(Debug)]
pub struct CpuidleSource {
    states: Vec<State>,
}

pub fn parse_counter(text: &str) -> Result<u64, ParseError> {
    let t = text.trim();
    t.parse().map_err(|_| ParseError::new(1, format!("{t:?} is not an unsigned integer")))
}

impl CpuidleSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let cpu_dir = root.join("sys/devices/system/cpu");
        let mut states = Vec::new();
        let mut cpus: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(&cpu_dir)
            .map_err(|e| Missing::new("cpuidle", format!("{}: {e}", cpu_dir.display())))?
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n: u32 = name.strip_prefix("cpu")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        cpus.sort();
        for (cpu, dir) in cpus {
            for m in 0.. {
                let state_dir = dir.join(format!("cpuidle/state{m}"));
                let Ok(name) = std::fs::read_to_string(state_dir.join("name")) else {
                    break;
                };
                let open =
                    |f: &str| ProcFile::open(state_dir.join(f)).map_err(|e| Missing::new("cpuidle", e.to_string()));
                states.push(State {
                    cpu: cpu.to_string(),
                    name: name.trim().to_owned(),
                    time: open("time")?,
                    usage: open("usage")?,
                });
            }
        }
        if states.is_empty() {
            return Err(Missing::new(
                "cpuidle",
                format!("no {}/cpu*/cpuidle/state* (no cpuidle driver)", cpu_dir.display()),
            ));
        }
        Ok(Box::new(CpuidleSource { states }))
    }
}

impl HostSource for CpuidleSource {
    fn name(&self) -> &'static str {
        "cpuidle"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        self.states.iter_mut().flat_map(|s| [&mut s.time, &mut s.usage]).collect()
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        for s in &mut self.states {
            let labels = [("cpu", s.cpu.as_str()), ("state", s.name.as_str())];
            let (path, text) = s.time.read_with_path()?;
            let us = crate::procfs::parsed(path, parse_counter(text))?;
            out.emit("kansoku_cpuidle_state_time_seconds_total", &labels, us as f64 / 1e6);
            let (path, text) = s.usage.read_with_path()?;
            let n = crate::procfs::parsed(path, parse_counter(text))?;
            out.emit("kansoku_cpuidle_state_entries_total", &labels, n as f64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fixture_tree() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synthetic");
        let mut src = CpuidleSource::open(&root).unwrap();
        let mut e = Emitter::new("h");
        e.begin(model::Timestamp(0));
        src.collect(&mut e).unwrap();
        let b = e.finish();
        assert_eq!(b.points.len(), 2 * 3 * 2);
        let c1_state2 = b
            .defs
            .iter()
            .find(|(_, k)| k.get("cpu") == Some("1") && k.get("state") == Some("C6") && k.name().contains("time"))
            .unwrap();
        let v = b.points.iter().find(|(i, _)| *i == c1_state2.0).unwrap().1;
        assert_eq!(v, 0.006007, "(1+1)*1000*3+7 µs");
    }

    #[test]
    fn missing_on_this_kind_of_kernel_is_reported() {
        let Missing { source, why } = CpuidleSource::open(Path::new("/nonexistent")).unwrap_err();
        assert_eq!(source, "cpuidle");
        assert!(why.contains("/nonexistent/sys/devices/system/cpu"), "{why}");
    }
}
