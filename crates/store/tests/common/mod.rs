//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::fs;
use std::path::Path;

/// Copies a data directory while its store is open: the directory as
/// `kill -9` would leave it (everything acknowledged is in the files).
pub fn crash_copy(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            crash_copy(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), dest).unwrap();
        }
    }
}
