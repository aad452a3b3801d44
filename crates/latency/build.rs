//! Compiles the LD_PRELOAD delay injector (`shim/delay.c`) with the C
//! compiler into OUT_DIR. Without one the build still succeeds: the library
//! is left empty and `kansoku lab latency` says what to install.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-changed=shim/delay.c");
    let lib = out.join("libkansoku_delay.so");
    let built = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "shim/delay.c", "-ldl", "-o"])
        .arg(&lib)
        .status();
    match built {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{cc} failed on shim/delay.c ({s})"),
        Err(e) => {
            println!(
                "cargo:warning=no {cc} ({e}): the latency injector is left out of this build; apt-get install gcc"
            );
            std::fs::write(&lib, b"").expect("write OUT_DIR");
        }
    }
}
