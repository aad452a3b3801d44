//! Compiles the BPF programs (`bpf/*.bpf.c`) with clang into OUT_DIR, and
//! turns the kernel headers' system call numbers into a name table. Without
//! clang the build still succeeds: the object is left empty and tracing
//! says at run time what to install (`scripts/deps.sh` installs clang).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-changed=bpf/common.h");
    for name in ["syscalls", "block", "sched", "lock", "mem", "net", "tasks"] {
        let src = format!("bpf/{name}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        let obj = out.join(format!("{name}.bpf.o"));
        let built = Command::new(&clang).args(["-O2", "-g", "-target", "bpf", "-c", &src, "-o"]).arg(&obj).status();
        match built {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("{clang} failed on {src} ({s})"),
            Err(e) => {
                println!(
                    "cargo:warning=no {clang} ({e}): kernel tracing is left out of this build; apt-get install clang"
                );
                std::fs::write(&obj, b"").expect("write OUT_DIR");
            }
        }
    }
    // System call names by number, from the headers this machine builds for.
    let header = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h";
    println!("cargo:rerun-if-changed={header}");
    let mut names: Vec<(u32, String)> = std::fs::read_to_string(header)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("#define __NR_")?;
            let (name, nr) = rest.split_once(' ')?;
            Some((nr.trim().parse().ok()?, name.to_owned()))
        })
        .collect();
    names.sort();
    let table: String = names.iter().map(|(nr, n)| format!("    ({nr}, {n:?}),\n")).collect();
    std::fs::write(
        out.join("syscall_names.rs"),
        format!("/// System call numbers and names (x86_64).\npub const NAMES: &[(u32, &str)] = &[\n{table}];\n"),
    )
    .expect("write OUT_DIR");
}
