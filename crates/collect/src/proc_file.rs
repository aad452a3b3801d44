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

#[derive(Debug)]
pub struct ProcFile {
    path: PathBuf,
    file: Option<File>,
    buf: Vec<u8>,
}

impl ProcFile {
    /// Opens the file now, so a missing file is reported at start-up.
    pub fn open(path: impl AsRef<Path>) -> io::Result<ProcFile> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path)?;
        Ok(ProcFile {
            path,
            file: Some(file),
            buf: Vec::with_capacity(4096),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's current content. Reopens once if the handle went stale
    /// (e.g. a sysfs device re-registered).
    pub fn read(&mut self) -> io::Result<&str> {
        if self.read_into_buf().is_err() {
            self.file = Some(File::open(&self.path)?);
            self.read_into_buf()?;
        }
        std::str::from_utf8(&self.buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Like [`ProcFile::read`], with the path in the error and lent beside the
    /// text so parse errors can name it too.
    pub fn read_with_path(&mut self) -> Result<(&Path, &str), SourceError> {
        if let Err(source) = self.read().map(|_| ()) {
            return Err(SourceError::Read {
                path: self.path.display().to_string(),
                source,
            });
        }
        let text = std::str::from_utf8(&self.buf).expect("checked by read");
        Ok((&self.path, text))
    }

    fn read_into_buf(&mut self) -> io::Result<()> {
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        self.buf.clear();
        loop {
            let len = self.buf.len();
            if self.buf.capacity() - len < 1024 {
                self.buf.reserve(self.buf.capacity().max(4096));
            }
            let cap = self.buf.capacity();
            self.buf.resize(cap, 0);
            let n = file.read_at(&mut self.buf[len..], len as u64)?;
            self.buf.truncate(len + n);
            if n == 0 {
                return Ok(());
            }
        }
    }
}
