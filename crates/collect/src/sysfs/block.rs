//! Per block device I/O from `/sys/block/<dev>/stat`: the same fields as
//! `/proc/diskstats` (kernel `Documentation/block/stat.rst`), but read only
//! for the devices we keep. `/proc/diskstats` makes the kernel format every
//! device (loop devices included, dozens on some hosts) each round; this reads
//! one short file per wanted device. The device list is rescanned every
//! [`RESCAN`], so a hot-plugged disk appears within that time.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use regex::Regex;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::procfs::diskstats::{DEVICE_EXCLUDE, emit_disk, parse_fields};
use crate::source::{HostSource, Missing, SourceError};

/// How often the device list is re-read: hot-plug latency versus a
/// directory scan per round.
pub const RESCAN: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub struct BlockSource {
    dir: PathBuf,
    exclude: Regex,
    devices: Vec<(String, ProcFile)>,
    scanned: Instant,
}

impl BlockSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let dir = root.join("sys/block");
        let exclude = Regex::new(DEVICE_EXCLUDE).expect("valid constant regex");
        let devices = scan(&dir, &exclude).map_err(|e| Missing::new("diskstats", format!("{}: {e}", dir.display())))?;
        Ok(Box::new(BlockSource { dir, exclude, devices, scanned: Instant::now() }))
    }
}

/// Wanted devices under `dir`, sorted by name, each with its `stat` opened.
fn scan(dir: &Path, exclude: &Regex) -> std::io::Result<Vec<(String, ProcFile)>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !exclude.is_match(n))
        .collect();
    names.sort();
    // A device that vanished between listing and opening is simply skipped.
    Ok(names.into_iter().filter_map(|n| ProcFile::open(dir.join(&n).join("stat")).ok().map(|f| (n, f))).collect())
}

impl HostSource for BlockSource {
    fn name(&self) -> &'static str {
        "diskstats"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        self.devices.iter_mut().map(|(_, f)| f).collect()
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        if self.scanned.elapsed() >= RESCAN {
            if let Ok(devices) = scan(&self.dir, &self.exclude) {
                self.devices = devices;
            }
            self.scanned = Instant::now();
        }
        let mut first_err = None;
        for (name, file) in &mut self.devices {
            // One failing device (being removed) must not hide the others.
            let result = file.read_with_path().and_then(|(path, text)| {
                crate::procfs::parsed(path, parse_fields(text.split_ascii_whitespace(), 1, name))
            });
            match result {
                Ok((fields, n)) => emit_disk(out, name, &fields[..n]),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fixture_tree_and_skips_excluded_devices() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synthetic");
        let mut src = BlockSource::open(&root).unwrap();
        let mut e = Emitter::new("h");
        e.begin(model::Timestamp(0));
        src.collect(&mut e).unwrap();
        let b = e.finish();
        let devices: std::collections::BTreeSet<&str> = b.defs.iter().filter_map(|(_, k)| k.get("device")).collect();
        assert_eq!(devices.into_iter().collect::<Vec<_>>(), ["nvme0n1", "sda"]);
        let read_bytes = b
            .defs
            .iter()
            .find(|(_, k)| k.get("device") == Some("sda") && k.name() == "node_disk_read_bytes_total")
            .unwrap();
        assert_eq!(b.points.iter().find(|(i, _)| *i == read_bytes.0).unwrap().1, 402_326.0 * 512.0);
        assert_eq!(b.points.len(), 15 + 17, "sda has 15 fields (4.18), nvme0n1 17 (5.5+)");
    }

    #[test]
    fn this_host_matches_proc_diskstats() {
        let mut src = BlockSource::open(Path::new("/")).expect("/sys/block on a Linux host");
        let mut e = Emitter::new("h");
        e.begin(model::Timestamp(0));
        src.collect(&mut e).unwrap();
        let sysfs_devices: std::collections::BTreeSet<String> =
            e.finish().defs.iter().filter_map(|(_, k)| k.get("device").map(str::to_owned)).collect();
        let text = std::fs::read_to_string("/proc/diskstats").unwrap();
        let exclude = Regex::new(DEVICE_EXCLUDE).unwrap();
        let proc_devices: std::collections::BTreeSet<String> = crate::procfs::diskstats::parse_diskstats(&text)
            .unwrap()
            .iter()
            .map(|l| l.device.to_owned())
            .filter(|d| !exclude.is_match(d))
            .collect();
        assert_eq!(sysfs_devices, proc_devices);
    }
}
