//! The dashboard (web/, TypeScript) is bundled into web/dist and embedded in
//! the binary. `make` builds it first (`make web`); a plain `cargo build` or
//! `cargo install --path crates/kansoku` builds it here when it is missing
//! and npm is installed, and otherwise says in one line what to run.

#![allow(clippy::disallowed_methods, reason = "a build script: it blocks no async worker")]

use std::path::Path;
use std::process::Command;

const FILES: [&str; 3] = ["index.html", "app.js", "app.css"];

fn main() {
    // Read when the script runs, not baked in when it was compiled: two
    // checkouts sharing one CARGO_TARGET_DIR may share this script's binary.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    let web = Path::new(&manifest).join("../../web");
    let dist = web.join("dist");
    for f in FILES {
        println!("cargo:rerun-if-changed={}", dist.join(f).display());
    }
    if FILES.iter().all(|f| dist.join(f).exists()) {
        return;
    }
    let missing = || {
        panic!(
            "the dashboard is not built ({} is missing) and npm could not build it: install Node.js and npm, \
             or run `make web` (npm ci && npm run build in web/) first",
            dist.display()
        )
    };
    let npm = |args: &[&str]| {
        let status = Command::new("npm").args(args).current_dir(&web).status();
        matches!(status, Ok(s) if s.success())
    };
    if !web.join("node_modules/.package-lock.json").exists()
        && !npm(&["ci", "--no-audit", "--no-fund", "--loglevel=error"])
    {
        missing();
    }
    if !npm(&["run", "--silent", "build"]) || !FILES.iter().all(|f| dist.join(f).exists()) {
        missing();
    }
}
