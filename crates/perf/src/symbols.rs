//! Top symbols of per-CPU samples (the table of `seeds/001`: rank, symbol,
//! module, samples, share), symbolised with blazesym on the machine that
//! serves the query: kernel addresses through its kallsyms, user addresses
//! through the live process's mappings. Samples of processes that have
//! exited, or of other machines' user space, stay `[unknown]` per process;
//! normalising at capture with a build-id cache is the next step.

use std::collections::HashMap;

use blazesym::symbolize::source::{Kernel, Process, Source};
use blazesym::symbolize::{Input, Symbolizer};
use blazesym::{Addr, Pid};

/// Addresses at or above this are the kernel's (x86-64 and arm64 canonical
/// upper half).
pub const KERNEL_MIN: u64 = 0xffff_8000_0000_0000;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TopRow {
    pub rank: usize,
    pub symbol: String,
    pub module: String,
    pub samples: u64,
    /// Per cent of all samples in the range.
    pub share: f64,
}

fn module_name(m: Option<&std::ffi::OsStr>) -> String {
    m.map(|m| {
        let p = std::path::Path::new(m);
        p.file_name().unwrap_or(m).to_string_lossy().into_owned()
    })
    .unwrap_or_default()
}

/// Symbolises `counts` ((pid, ip) -> samples) and returns the `n` symbols
/// with the most samples.
pub fn top(counts: &HashMap<(u32, u64), u64>, n: usize) -> Vec<TopRow> {
    let symbolizer = Symbolizer::new();
    let total: u64 = counts.values().sum();
    let mut by_sym: HashMap<(String, String), u64> = HashMap::new();
    // Kernel addresses, all processes at once.
    let mut kernel: Vec<(Addr, u64)> = Vec::new();
    let mut user: HashMap<u32, Vec<(Addr, u64)>> = HashMap::new();
    for (&(pid, ip), &c) in counts {
        if ip >= KERNEL_MIN {
            kernel.push((ip, c));
        } else {
            user.entry(pid).or_default().push((ip, c));
        }
    }
    let mut add = |sym: String, module: String, c: u64| *by_sym.entry((sym, module)).or_default() += c;
    if !kernel.is_empty() {
        let addrs: Vec<Addr> = kernel.iter().map(|k| k.0).collect();
        let src = Source::Kernel(Kernel { vmlinux: blazesym::MaybeDefault::None, ..Kernel::default() });
        match symbolizer.symbolize(&src, Input::AbsAddr(&addrs)) {
            Ok(syms) => {
                for (s, (_, c)) in syms.iter().zip(&kernel) {
                    match s.as_sym() {
                        Some(sym) => add(sym.name.to_string(), "[kernel]".into(), *c),
                        None => add("[unknown]".into(), "[kernel]".into(), *c),
                    }
                }
            }
            Err(_) => kernel.iter().for_each(|(_, c)| add("[unknown]".into(), "[kernel]".into(), *c)),
        }
    }
    for (pid, addrs_counts) in user {
        let addrs: Vec<Addr> = addrs_counts.iter().map(|k| k.0).collect();
        // A stripped binary, JIT code, or a process gone: name the process.
        let unknown = match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            Ok(comm) if pid > 0 => format!("[unknown] ({}, pid {pid})", comm.trim()),
            _ => format!("[unknown] (pid {pid})"),
        };
        let src = Source::Process(Process::new(Pid::from(pid)));
        match (pid, symbolizer.symbolize(&src, Input::AbsAddr(&addrs))) {
            (1.., Ok(syms)) => {
                for (s, (_, c)) in syms.iter().zip(&addrs_counts) {
                    match s.as_sym() {
                        Some(sym) => add(sym.name.to_string(), module_name(sym.module.as_deref()), *c),
                        None => add(unknown.clone(), String::new(), *c),
                    }
                }
            }
            _ => addrs_counts.iter().for_each(|(_, c)| add(unknown.clone(), String::new(), *c)),
        }
    }
    let mut rows: Vec<((String, String), u64)> = by_sym.into_iter().collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows.into_iter()
        .take(n)
        .enumerate()
        .map(|(i, ((symbol, module), samples))| TopRow {
            rank: i + 1,
            symbol,
            module,
            samples,
            share: if total > 0 { samples as f64 * 100.0 / total as f64 } else { 0.0 },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_with_a_name(x: u64) -> u64 {
        x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(7)
    }

    #[test]
    fn own_functions_and_kernel_addresses_are_named() {
        let f = a_function_with_a_name as *const () as usize as u64;
        std::hint::black_box(a_function_with_a_name(3));
        let mut counts = HashMap::new();
        counts.insert((std::process::id(), f + 1), 30);
        counts.insert((std::process::id(), 0x10), 5); // nothing mapped there
        counts.insert((999_999_999, 0x401000), 5); // no such process
        let rows = top(&counts, 10);
        assert_eq!(rows[0].samples, 30);
        assert!(rows[0].symbol.contains("a_function_with_a_name"), "{rows:?}");
        assert!((rows[0].share - 75.0).abs() < 1e-9);
        assert!(rows.iter().any(|r| r.symbol == "[unknown] (pid 999999999)" && r.samples == 5), "{rows:?}");
    }
}
