//! Block files opened on demand, a bounded number kept open. A store keeps
//! blocks for as long as retention allows — 288 a day at 5-minute blocks —
//! and once held a descriptor for each, forever: at a low descriptor limit
//! flushes failed and a restart could not open the store. Now a read opens
//! the block it needs and the [`OPEN_MAX`] most recently used stay open.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Block files kept open at most.
pub(crate) const OPEN_MAX: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct OpenFiles {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    tick: u64,
    files: HashMap<PathBuf, (Arc<File>, u64)>,
}

impl OpenFiles {
    /// The open file at `path`, opening it (and closing the least recently
    /// used one past [`OPEN_MAX`]) if needed.
    pub(crate) fn get(&self, path: &Path) -> io::Result<Arc<File>> {
        {
            let mut g = crate::store::lock(&self.inner);
            g.tick += 1;
            let tick = g.tick;
            if let Some((f, used)) = g.files.get_mut(path) {
                *used = tick;
                return Ok(Arc::clone(f));
            }
        }
        // Opened outside the lock: other reads go on meanwhile.
        let f = Arc::new(File::open(path)?);
        let mut g = crate::store::lock(&self.inner);
        let tick = g.tick;
        g.files.insert(path.to_path_buf(), (Arc::clone(&f), tick));
        if g.files.len() > OPEN_MAX
            && let Some(oldest) = g.files.iter().min_by_key(|(_, (_, used))| *used).map(|(p, _)| p.clone())
        {
            g.files.remove(&oldest);
        }
        Ok(f)
    }

    /// Closes `path` (a block retention removed): its space is freed now,
    /// not when it would have been evicted.
    pub(crate) fn forget(&self, path: &Path) {
        crate::store::lock(&self.inner).files.remove(path);
    }

    pub(crate) fn len(&self) -> usize {
        crate::store::lock(&self.inner).files.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_open_max_stay_open_and_the_recent_ones_win() {
        let dir = tempfile::tempdir().unwrap();
        let files = OpenFiles::default();
        let paths: Vec<PathBuf> = (0..OPEN_MAX + 10)
            .map(|i| {
                let p = dir.path().join(format!("{i}"));
                std::fs::write(&p, [i as u8]).unwrap();
                p
            })
            .collect();
        let first = files.get(&paths[0]).unwrap();
        for p in &paths[1..] {
            files.get(p).unwrap();
            files.get(&paths[0]).unwrap(); // kept warm
        }
        assert_eq!(files.len(), OPEN_MAX);
        let again = files.get(&paths[0]).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the most used file stayed open");
        files.forget(&paths[0]);
        assert_eq!(files.len(), OPEN_MAX - 1);
        assert!(files.get(&dir.path().join("missing")).is_err());
    }
}
