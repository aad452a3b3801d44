//! The data directory: a marker file saying it is ours and in which format,
//! a lock held by the one writer, and the `wal/` and `blocks/` folders.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::StoreError;

pub const MARKER: &str = "KANSOKU";
pub const LOCK: &str = "LOCK";
const MARKER_TEXT: &str = "kansoku data directory\nformat 1\n";

pub fn wal_dir(root: &Path) -> PathBuf {
    root.join("wal")
}

pub fn events_dir(root: &Path) -> PathBuf {
    root.join("events")
}

pub fn blocks_dir(root: &Path) -> PathBuf {
    root.join("blocks")
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + use<'a> {
    move |source| StoreError::Io { op, path: path.to_path_buf(), source }
}

/// Checks the marker, creating the layout in a new or empty directory when `create`.
pub fn prepare(root: &Path, create: bool) -> Result<(), StoreError> {
    let marker = root.join(MARKER);
    match fs::read_to_string(&marker) {
        Ok(text) if text == MARKER_TEXT => {}
        Ok(text) => {
            let found = text.lines().nth(1).unwrap_or("unknown").to_owned();
            return Err(StoreError::Format { path: root.to_path_buf(), found });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !create {
                return Err(match fs::metadata(root) {
                    Ok(_) => StoreError::NotOurs { path: root.to_path_buf() },
                    Err(_) => StoreError::Missing { path: root.to_path_buf() },
                });
            }
            let empty = match fs::read_dir(root) {
                Ok(mut it) => it.next().is_none(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => true,
                Err(e) => return Err(io("read data directory", root)(e)),
            };
            if !empty {
                return Err(StoreError::NotOurs { path: root.to_path_buf() });
            }
            fs::create_dir_all(root).map_err(io("create data directory", root))?;
            let mut f = File::create(&marker).map_err(io("write marker", &marker))?;
            f.write_all(MARKER_TEXT.as_bytes()).and_then(|()| f.sync_all()).map_err(io("write marker", &marker))?;
        }
        Err(e) => return Err(io("read marker", &marker)(e)),
    }
    if create {
        for d in [wal_dir(root), blocks_dir(root)] {
            fs::create_dir_all(&d).map_err(io("create directory", &d))?;
        }
        File::open(root).and_then(|d| d.sync_all()).map_err(io("sync data directory", root))?;
    }
    Ok(())
}

/// Takes the writer's exclusive lock (released when the file is closed,
/// including by `kill -9`), recording our pid for the error others see.
pub fn lock(root: &Path) -> Result<File, StoreError> {
    let path = root.join(LOCK);
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("open lock", &path))?;
    match f.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            return Err(StoreError::Locked { path: root.to_path_buf(), pid: pid.trim().to_owned() });
        }
        Err(fs::TryLockError::Error(e)) => return Err(io("lock data directory", &path)(e)),
    }
    f.set_len(0).and_then(|()| writeln!(f, "{}", std::process::id())).map_err(io("write lock", &path))?;
    Ok(f)
}
