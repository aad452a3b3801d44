//! A procfs/sysfs file kept open and re-read from offset 0 each round.
//!
//! Why not `fs::read_to_string`: open+close per file per round is two extra
//! syscalls and a path walk; at 10 ms intervals over dozens of files that is
//! measurable. procfs seq_files and sysfs attributes regenerate their content
//! when read from offset 0, so one `pread` loop per round suffices.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::source::SourceError;

/// A read shorter than the buffer and than this many bytes is the end of the
/// file, which saves the extra `pread` that would only return 0. Why it is
/// safe: sysfs attributes and single-record procfs files (`stat`, `meminfo`,
/// `loadavg`, `pressure/*`) return everything that fits; a multi-record
/// seq_file (`diskstats`, `net/dev`) can also return short when its kernel
/// buffer (at least a 4 KiB page) cannot take the next record, but then it
/// has returned more than a page minus one record (lines here are < 200 B).
const SHORT_READ_IS_EOF_BELOW: usize = 2048;

#[derive(Debug)]
pub struct ProcFile {
    path: PathBuf,
    file: Option<File>,
    /// Read buffer; its first `len` bytes are the latest content.
    buf: Vec<u8>,
    len: usize,
}

impl ProcFile {
    /// Opens the file now, so a missing file is reported at start-up.
    pub fn open(path: impl AsRef<Path>) -> io::Result<ProcFile> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path)?;
        Ok(ProcFile { path, file: Some(file), buf: Vec::new(), len: 0 })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's current content. Reopens once if the handle went stale
    /// (e.g. a sysfs device re-registered).
    pub fn read(&mut self) -> io::Result<&str> {
        self.read_with_path().map(|(_, text)| text).map_err(|e| match e {
            SourceError::Read { source, .. } => source,
            SourceError::Parse { .. } => unreachable!("reading does not parse"),
        })
    }

    /// Like [`ProcFile::read`], with the path in the error and lent beside the
    /// text so parse errors can name it too.
    pub fn read_with_path(&mut self) -> Result<(&Path, &str), SourceError> {
        let filled = self.read_into_buf().or_else(|_| {
            self.file = Some(File::open(&self.path)?);
            self.read_into_buf()
        });
        let text = filled.and_then(|()| {
            std::str::from_utf8(&self.buf[..self.len]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        });
        match text {
            Ok(text) => Ok((&self.path, text)),
            Err(source) => Err(SourceError::Read { path: self.path.display().to_string(), source }),
        }
    }

    /// Reads the file and returns its length, nothing checked or parsed:
    /// the collector's floor ([`crate::Collector::read_round`]).
    pub fn read_raw(&mut self) -> io::Result<usize> {
        self.read_into_buf().map(|()| self.len)
    }

    /// Reads the file into `buf[..len]`. The buffer stays at its full
    /// (zeroed once) size between rounds, so no round pays for zero-filling.
    fn read_into_buf(&mut self) -> io::Result<()> {
        let file = self.file.as_ref().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if self.buf.is_empty() {
            self.buf.resize(4096, 0);
        }
        self.len = 0;
        loop {
            if self.buf.len() - self.len < 1024 {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown, 0);
            }
            let room = self.buf.len() - self.len;
            let n = file.read_at(&mut self.buf[self.len..], self.len as u64)?;
            self.len += n;
            if n == 0 || (n < room && n < SHORT_READ_IS_EOF_BELOW) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_whole_files_of_any_size() {
        let dir = std::env::temp_dir().join(format!("kansoku-procfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for size in [0, 1, 2047, 2048, 4095, 4096, 4097, 10_000, 100_000] {
            let path = dir.join(format!("f{size}"));
            let text: String = (0..size).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            std::fs::write(&path, &text).unwrap();
            let mut f = ProcFile::open(&path).unwrap();
            assert_eq!(f.read().unwrap(), text, "size {size}");
            assert_eq!(f.read().unwrap(), text, "size {size}, second read");
        }
        // A real multi-record seq_file reads the same as std does.
        let mut f = ProcFile::open("/proc/self/mountinfo").unwrap();
        assert_eq!(
            f.read().unwrap().lines().count(),
            std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().count()
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
