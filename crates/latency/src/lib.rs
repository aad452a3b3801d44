//! Latency sensitivity — seed 003 (`seeds/003_249d1f3952f8e1df.txt`) adds
//! I/O latency x in steps and measures a server's throughput P: the
//! degradation PD[x] = (P_local − P[x]) / P_local × 100 %, its curve, the
//! knee where it turns up, and from a per-hop latency and a budget how many
//! switch tiers a design can afford. Here: an in-process injector (`shim`:
//! a C library loaded with LD_PRELOAD that busy-waits a set number of
//! nanoseconds before chosen libc calls — `pread`, `pwrite`, `fdatasync`,
//! `fsync`, `recv`, `send` — which PostgreSQL and most servers import from
//! glibc), its calibration (`calibrate`: what each requested step really
//! adds, measured per call), and the curve's arithmetic (`curve`: PD with
//! bootstrap intervals, the kneedle knee with its interval, the tier
//! budget), and a network injector (`relay`: a TCP relay adding the step one
//! way each direction), and a storage injector (`disk`: a FUSE file whose
//! every read, write and sync is answered that much later, with a loop
//! device and ext4 over it, so databases and fio run on it unchanged).
//! `kansoku lab latency` (crate `lab`) runs the sweep.
//!
//! The shim (`shim/delay.c`) is compiled by `build.rs` and installed by
//! `install`; `calibrate` probes each step and judges it (`probe`, `judge`,
//! `parse_ns`), and `relay::calibrate` measures the relay's. The FUSE file
//! (`fuser`) answers on 16 threads (`disk::{Injector, Stack, probe}`).
//! `curve` also holds the closed-loop model by Little's law
//! (`closed_loop_pd`) and the curve's shape in the paper's terms (`shape`).

pub mod calibrate;
pub mod curve;
pub mod disk;
pub mod relay;

use std::path::{Path, PathBuf};

/// The injector, compiled at build time (empty when no C compiler was found).
static SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libkansoku_delay.so"));

/// Writes the injector into `dir` (readable by every user: a server may run
/// as its own user) and returns its path for `LD_PRELOAD`.
pub fn install(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if SHIM.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the latency injector was left out of this build (no C compiler when it was compiled): apt-get install gcc, then rebuild",
        ));
    }
    let path = dir.join("libkansoku_delay.so");
    std::fs::write(&path, SHIM)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}
