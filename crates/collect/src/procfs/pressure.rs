//! Pressure stall information from `/proc/pressure/{cpu,memory,io,irq}`.
//!
//! We keep only `total=` (cumulative µs stalled, exact); the kernel's avg10/60/300
//! are smoothed views derivable from it at query time. `some` is emitted as
//! `*_waiting_seconds_total`, `full` as `*_stalled_seconds_total`, as
//! node_exporter names them. Resolution: µs, updated on each task state change
//! and folded in by a 2 s averaging worker only for the averages.

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError, field_u64};

/// Resources in the order we read them; `irq` exists since 6.1 with
/// IRQ_TIME_ACCOUNTING.
const RESOURCES: [(&str, &str, &str); 4] = [
    ("cpu", "node_pressure_cpu_waiting_seconds_total", "node_pressure_cpu_stalled_seconds_total"),
    ("memory", "node_pressure_memory_waiting_seconds_total", "node_pressure_memory_stalled_seconds_total"),
    ("io", "node_pressure_io_waiting_seconds_total", "node_pressure_io_stalled_seconds_total"),
    ("irq", "node_pressure_irq_waiting_seconds_total", "node_pressure_irq_stalled_seconds_total"),
];

/// `total=` of the `some` and `full` lines, µs; `None` where a line is absent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub some_us: Option<u64>,
    pub full_us: Option<u64>,
}

pub fn parse_pressure(text: &str) -> Result<Pressure, ParseError> {
    let mut p = Pressure::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut fields = line.split_ascii_whitespace();
        let slot = match fields.next() {
            Some("some") => &mut p.some_us,
            Some("full") => &mut p.full_us,
            Some(other) => return Err(ParseError::new(n, format!("unknown line kind {other:?}"))),
            None => continue,
        };
        let total =
            fields.find_map(|f| f.strip_prefix("total=")).ok_or_else(|| ParseError::new(n, "missing total="))?;
        *slot = Some(field_u64(Some(total), n, "total")?);
    }
    Ok(p)
}

#[derive(Debug)]
pub struct PressureSource {
    files: Vec<(ProcFile, &'static str, &'static str)>,
}

impl PressureSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let mut files = Vec::new();
        let mut last_err = String::new();
        for (res, some, full) in RESOURCES {
            match super::open(root, &format!("proc/pressure/{res}"), "pressure") {
                Ok(f) => files.push((f, some, full)),
                Err(m) => last_err = m.why,
            }
        }
        if files.is_empty() {
            return Err(Missing::new("pressure", format!("{last_err} (kernel without CONFIG_PSI, or psi=0)")));
        }
        Ok(Box::new(PressureSource { files }))
    }
}

impl HostSource for PressureSource {
    fn name(&self) -> &'static str {
        "pressure"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        self.files.iter_mut().map(|(f, _, _)| f).collect()
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        for (file, some, full) in &mut self.files {
            let (path, text) = file.read_with_path()?;
            let p = super::parsed(path, parse_pressure(text))?;
            // Divide so values are exact decimals with 6 places.
            if let Some(us) = p.some_us {
                out.emit(some, &[], us as f64 / 1e6);
            }
            if let Some(us) = p.full_us {
                out.emit(full, &[], us as f64 / 1e6);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_files() {
        let cpu = parse_pressure(include_str!("../../tests/fixtures/debian12-vm/pressure_cpu")).unwrap();
        assert!(cpu.some_us.is_some() && cpu.full_us.is_some());
        let old = parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n").unwrap();
        assert_eq!(old, Pressure { some_us: Some(42), full_us: None });
        assert_eq!(parse_pressure("most total=1").unwrap_err(), ParseError::new(1, r#"unknown line kind "most""#));
        assert_eq!(parse_pressure("some avg10=1").unwrap_err(), ParseError::new(1, "missing total="));
    }
}
