//! Per block device I/O from `/proc/diskstats`.
//!
//! Fields per the kernel's `Documentation/admin-guide/iostats.rst`: 11 on old
//! kernels, 15 since 4.18 (discards), 17 since 5.5 (flushes). Sectors are
//! always 512 bytes here regardless of the device's sector size; times are ms.
//! Resolution: counters updated at request completion; `io_now` instantaneous.
//! Partitions, loop and RAM disks are skipped, as node_exporter does by default.
//! This is the fallback source: where `/sys/block` exists, `sysfs::block`
//! reads the same fields for the wanted devices only, which is cheaper.

use std::path::Path;

use regex::Regex;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError, field_u64};

/// node_exporter's default `--collector.diskstats.device-exclude`.
pub const DEVICE_EXCLUDE: &str = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$";

/// (metric, scale to base units) for fields 4.. of a line, in file order.
const FIELDS: [(&str, f64); 17] = [
    ("node_disk_reads_completed_total", 1.0),
    ("node_disk_reads_merged_total", 1.0),
    ("node_disk_read_bytes_total", 512.0),
    ("node_disk_read_time_seconds_total", 1e-3),
    ("node_disk_writes_completed_total", 1.0),
    ("node_disk_writes_merged_total", 1.0),
    ("node_disk_written_bytes_total", 512.0),
    ("node_disk_write_time_seconds_total", 1e-3),
    ("node_disk_io_now", 1.0),
    ("node_disk_io_time_seconds_total", 1e-3),
    ("node_disk_io_time_weighted_seconds_total", 1e-3),
    ("node_disk_discards_completed_total", 1.0),
    ("node_disk_discards_merged_total", 1.0),
    ("node_disk_discarded_sectors_total", 1.0),
    ("node_disk_discard_time_seconds_total", 1e-3),
    ("node_disk_flush_requests_total", 1.0),
    ("node_disk_flush_requests_time_seconds_total", 1e-3),
];

#[derive(Debug, PartialEq, Eq)]
pub struct DiskLine<'a> {
    pub device: &'a str,
    /// Raw fields in file order (sectors and ms, not yet scaled); the first
    /// `n_fields` (11 to 17) are present.
    pub fields: [u64; 17],
    pub n_fields: usize,
}

impl DiskLine<'_> {
    pub fn fields(&self) -> &[u64] {
        &self.fields[..self.n_fields]
    }
}

pub fn parse_diskstats(text: &str) -> Result<Vec<DiskLine<'_>>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut it = line.split_ascii_whitespace();
        if it.next().is_none() {
            continue;
        }
        it.next().ok_or_else(|| ParseError::new(n, "missing minor number"))?;
        let device = it.next().ok_or_else(|| ParseError::new(n, "missing device name"))?;
        let (fields, n_fields) = parse_fields(it, n, device)?;
        out.push(DiskLine { device, fields, n_fields });
    }
    Ok(out)
}

#[derive(Debug)]
pub struct DiskstatsSource {
    file: ProcFile,
    exclude: Regex,
}

impl DiskstatsSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let file = super::open(root, "proc/diskstats", "diskstats")?;
        let exclude = Regex::new(DEVICE_EXCLUDE).expect("valid constant regex");
        Ok(Box::new(DiskstatsSource { file, exclude }))
    }
}

/// Parses the numeric fields of one device (a `/proc/diskstats` line after
/// the name, or all of `/sys/block/<dev>/stat`).
pub fn parse_fields<'a>(
    it: impl Iterator<Item = &'a str>,
    line: usize,
    device: &str,
) -> Result<([u64; 17], usize), ParseError> {
    let mut fields = [0u64; 17];
    let mut n_fields = 0;
    for (slot, f) in fields.iter_mut().zip(it) {
        *slot = field_u64(Some(f), line, FIELDS[n_fields].0)?;
        n_fields += 1;
    }
    if n_fields < 11 {
        return Err(ParseError::new(line, format!("{device}: {n_fields} fields, expected at least 11")));
    }
    Ok((fields, n_fields))
}

/// Emits one device's fields with node_exporter names and base units.
pub fn emit_disk(out: &mut Emitter, device: &str, fields: &[u64]) {
    for (&raw, (name, scale)) in fields.iter().zip(FIELDS) {
        // Scale by division for ms so values are exact decimals (x / 1000).
        let v = if scale < 1.0 { raw as f64 / (1.0 / scale).round() } else { raw as f64 * scale };
        out.emit(name, &[("device", device)], v);
    }
}

impl HostSource for DiskstatsSource {
    fn name(&self) -> &'static str {
        "diskstats"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        vec![&mut self.file]
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        let exclude = &self.exclude;
        let (path, text) = self.file.read_with_path()?;
        let lines = super::parsed(path, parse_diskstats(text))?;
        for line in lines.iter().filter(|l| !exclude.is_match(l.device)) {
            emit_disk(out, line.device, line.fields());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_file() {
        let lines = parse_diskstats(include_str!("../../tests/fixtures/debian12-vm/diskstats")).unwrap();
        let vda = lines.iter().find(|l| l.device == "vda").unwrap();
        assert_eq!(vda.fields().len(), 17);
        assert!(vda.fields()[0] > 0, "reads completed");
    }

    #[test]
    fn kernel_4_18_layout_and_default_exclusions() {
        let text = include_str!("../../tests/fixtures/synthetic/diskstats_4_18");
        let lines = parse_diskstats(text).unwrap();
        assert_eq!(lines.len(), 4);
        assert!(lines.iter().all(|l| l.fields().len() == 15));
        let exclude = Regex::new(DEVICE_EXCLUDE).unwrap();
        let kept: Vec<&str> = lines.iter().map(|l| l.device).filter(|d| !exclude.is_match(d)).collect();
        assert_eq!(kept, ["sda", "nvme0n1"]);
    }

    #[test]
    fn units() {
        let mut e = Emitter::new("h");
        e.begin(model::Timestamp(0));
        let lines = parse_diskstats("8 0 sda 1 2 3 4 5 6 7 8 9 1500 11").unwrap();
        emit_disk(&mut e, lines[0].device, lines[0].fields());
        let b = e.finish();
        let get = |name: &str| {
            let id = b.defs.iter().find(|(_, k)| k.name() == name).unwrap().0;
            b.points.iter().find(|(i, _)| *i == id).unwrap().1
        };
        assert_eq!(get("node_disk_read_bytes_total"), 3.0 * 512.0);
        assert_eq!(get("node_disk_read_time_seconds_total"), 0.004);
        assert_eq!(get("node_disk_io_time_seconds_total"), 1.5);
        assert_eq!(get("node_disk_io_now"), 9.0);
        assert_eq!(b.points.len(), 11);
    }

    #[test]
    fn rejects_short_lines() {
        assert_eq!(
            parse_diskstats("8 0 sda 1 2 3").unwrap_err(),
            ParseError::new(1, "sda: 3 fields, expected at least 11")
        );
    }
}
