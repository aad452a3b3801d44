//! House rules that are cheaper to check than to remember: every source file
//! opens with a `//!` paragraph saying what it is for; ARCHITECTURE.md's code
//! map names every crate and no crate that is gone; every mention of a seed
//! paper names one that exists (in `../shared/seeds/`, beside the checkout);
//! crates depend only on lower layers; a crate's own clippy.toml keeps the
//! workspace's rules. And ARCHITECTURE.md says what the code does: its layer
//! line is `LAYERS`, its `unsafe` invariant names every file with unsafe
//! code, its JSON invariant every file that derives or implements
//! `Serialize`, and its code map's rows stay short.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Files below `dir` whose name ends with one of `exts`, skipping build
/// output and installed packages.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !["target", "node_modules", "dist", "corpus", "artifacts", ".git"].contains(&name.as_str()) {
                files(&path, exts, out);
            }
        } else if exts.iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_says_what_it_is_for() {
    let root = root();
    let mut rs = Vec::new();
    files(&root.join("crates"), &[".rs"], &mut rs);
    files(&root.join("fuzz/fuzz_targets"), &[".rs"], &mut rs);
    assert!(rs.len() > 100, "found only {} files", rs.len());
    let bare: Vec<String> = rs
        .iter()
        .filter(|p| !std::fs::read_to_string(p).unwrap().starts_with("//!"))
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(bare.is_empty(), "files without a //! paragraph on top: {bare:?}");
}

#[test]
fn the_code_map_names_every_crate() {
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let named: Vec<&str> = map.lines().filter_map(|l| l.strip_prefix("| `crates/")?.split('`').next()).collect();
    let mut crates: Vec<String> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    for c in &crates {
        assert!(named.contains(&c.as_str()), "crates/{c} is not in ARCHITECTURE.md's code map");
        let lib =
            ["src/lib.rs", "src/main.rs"].iter().map(|f| root.join("crates").join(c).join(f)).find(|p| p.exists());
        let text =
            std::fs::read_to_string(lib.unwrap_or_else(|| panic!("crates/{c} has no lib.rs or main.rs"))).unwrap();
        let purpose: String = text.lines().take_while(|l| l.starts_with("//!")).collect();
        assert!(purpose.len() > 60, "crates/{c}: its lib.rs or main.rs opens without a paragraph on its purpose");
    }
    for n in named {
        assert!(crates.iter().any(|c| c == n), "the code map names crates/{n}, which does not exist");
    }
}

#[test]
fn seed_papers_are_named_as_they_are_filed() {
    let root = root();
    let seeds_dir = root.join("../shared/seeds");
    let filed: Vec<String> = match std::fs::read_dir(&seeds_dir) {
        Ok(d) => d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        // A checkout without the papers beside it: only the form is checked.
        Err(_) => Vec::new(),
    };
    let mut texts = Vec::new();
    for dir in ["crates", "docs", "web/src", "scripts"] {
        files(&root.join(dir), &[".rs", ".md", ".ts", ".sh", ".py"], &mut texts);
    }
    texts.extend(["README.md", "ARCHITECTURE.md"].map(|f| root.join(f)));
    let mut wrong = Vec::new();
    for path in texts {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, _) in text.match_indices("seeds/") {
            let rest = &text[i + "seeds/".len()..];
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.').collect();
            let name = name.trim_end_matches('.');
            if name.is_empty() || name == "README.md" {
                continue; // the folder itself, or its index
            }
            // `seeds/000` or `seeds/000_8748c71b7784e574.txt`: a paper's number, or its file.
            let ok_form = name.len() >= 3 && name[..3].chars().all(|c| c.is_ascii_digit());
            let ok_file = filed.is_empty() || filed.iter().any(|f| f.starts_with(name) || name == f.as_str());
            if !ok_form || !ok_file {
                wrong.push(format!("{}: seeds/{name}", path.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    assert!(wrong.is_empty(), "seed papers named as no file in ../shared/seeds is: {wrong:?}");
}

/// The crates' layers, lowest first, as ARCHITECTURE.md draws them: a crate
/// may depend only on crates of lower layers.
const LAYERS: &[&[&str]] = &[
    &["model", "clock", "client", "access", "config"],
    &["codec", "logs"],
    &["source"],
    &["store", "wire", "perf", "collect", "snmp", "trace", "load", "experiment", "extents", "limits", "tasks", "synth"],
    &["symstore", "chstore", "link"],
    &["influx", "agent", "ingest", "promql", "latency"],
    &["diagnose", "formats"],
    &["node", "api", "rules"],
    &["lab"],
    &["kansoku"],
];

#[test]
fn crates_depend_only_downwards() {
    let root = root();
    let layer = |c: &str| LAYERS.iter().position(|l| l.contains(&c));
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let at = layer(&name).unwrap_or_else(|| panic!("crates/{name} is in no layer of tidy.rs's LAYERS"));
        let manifest = std::fs::read_to_string(root.join("crates").join(&name).join("Cargo.toml")).unwrap();
        // Only [dependencies]: tests may reach across (dev-dependencies).
        let deps = manifest.split("\n[dependencies]\n").nth(1).unwrap_or_default();
        let deps = deps.split("\n[").next().unwrap_or_default();
        for line in deps.lines() {
            let dep = line.split([' ', '.', '=']).next().unwrap_or_default();
            if let Some(d) = layer(dep)
                && d >= at
            {
                wrong.push(format!("{name} -> {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "dependencies that do not point to a lower layer: {wrong:?}");
}

/// Clippy reads the nearest clippy.toml only: a crate's own must keep every
/// workspace rule.
#[test]
fn crate_clippy_rules_keep_the_workspace_rules() {
    let root = root();
    let rules = |text: &str| -> Vec<String> {
        text.lines().filter_map(|l| Some(l.split("path = \"").nth(1)?.split('"').next()?.to_owned())).collect()
    };
    let workspace = rules(&std::fs::read_to_string(root.join("clippy.toml")).unwrap());
    assert!(workspace.len() >= 2, "{workspace:?}");
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let path = entry.unwrap().path().join("clippy.toml");
        if let Ok(text) = std::fs::read_to_string(&path) {
            let own = rules(&text);
            for r in &workspace {
                assert!(own.contains(r), "{} drops the workspace rule on {r}", path.display());
            }
        }
    }
}

/// Benchmarks stay off the production path (issue 46): in the binary only
/// `main.rs`, which dispatches `kansoku lab …`, names the `lab` crate; `up`,
/// `server` and `agent` run no code of it.
#[test]
fn only_main_names_the_lab() {
    let root = root();
    let mut rs = Vec::new();
    files(&root.join("crates/kansoku/src"), &[".rs"], &mut rs);
    let naming: Vec<String> = rs
        .iter()
        .filter(|p| !p.ends_with("main.rs"))
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("lab::"))
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(naming.is_empty(), "these files of the binary name the lab: {naming:?}");
    for c in ["node", "api", "agent", "ingest", "rules", "collect", "load", "perf", "synth"] {
        let manifest = std::fs::read_to_string(root.join("crates").join(c).join("Cargo.toml")).unwrap();
        let deps = manifest.split("\n[dependencies]\n").nth(1).unwrap_or_default();
        let deps = deps.split("\n[").next().unwrap_or_default();
        assert!(!deps.lines().any(|l| l.starts_with("lab")), "crates/{c} depends on the lab");
    }
}

/// ARCHITECTURE.md.
fn architecture() -> String {
    std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap()
}

/// The bullet of ARCHITECTURE.md that begins with `start`, its continuation
/// lines (indented by two) joined to it.
fn bullet(doc: &str, start: &str) -> String {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with(start));
    let first = lines.next().unwrap_or_else(|| panic!("ARCHITECTURE.md has no bullet beginning {start:?}"));
    let mut text = first.to_owned();
    for l in lines.take_while(|l| l.starts_with("  ")) {
        text.push(' ');
        text.push_str(l.trim());
    }
    text
}

/// What `text` holds in backticks.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The source files `text` names in backticks (`crates/…/x.rs`).
fn named_files(text: &str) -> std::collections::BTreeSet<String> {
    backticked(text).into_iter().filter(|t| t.starts_with("crates/") && t.ends_with(".rs")).map(str::to_owned).collect()
}

/// The `.rs` files under crates/ for which `keep` (path from the root, text)
/// holds.
fn crate_files(keep: impl Fn(&str, &str) -> bool) -> std::collections::BTreeSet<String> {
    let root = root();
    let mut rs = Vec::new();
    files(&root.join("crates"), &[".rs"], &mut rs);
    rs.iter()
        .map(|p| (p.strip_prefix(&root).unwrap().display().to_string(), std::fs::read_to_string(p).unwrap()))
        .filter(|(path, text)| keep(path, text))
        .map(|(path, _)| path)
        .collect()
}

/// Fails naming what `doc` (ARCHITECTURE.md's `what`) lacks and what it
/// names wrongly.
fn same_files(what: &str, doc: &std::collections::BTreeSet<String>, code: &std::collections::BTreeSet<String>) {
    let missing: Vec<&String> = code.difference(doc).collect();
    let extra: Vec<&String> = doc.difference(code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "ARCHITECTURE.md's {what}: it lacks {missing:?}, and names {extra:?}, which the code does not bear out"
    );
}

/// The layer line of ARCHITECTURE.md's invariants draws `LAYERS`: every
/// crate of every layer, the layers in order, separated by arrows.
#[test]
fn the_layer_line_is_tidy_s_layers() {
    let line = bullet(&architecture(), "- The crates depend in one direction:");
    // The drawing runs from the colon to the first parenthesis.
    let drawn = line.split_once(':').unwrap().1.split('(').next().unwrap();
    let drawn: Vec<Vec<&str>> = drawn.split('→').map(backticked).collect();
    let layers: Vec<Vec<&str>> = LAYERS.iter().map(|l| l.to_vec()).collect();
    assert_eq!(drawn, layers, "ARCHITECTURE.md's layer line (left) is not tidy.rs's LAYERS (right)");
}

/// The invariant on `unsafe` names every file that has any: an `unsafe`
/// block, function, impl or extern block outside comments, or an
/// `allow(unsafe_code)` (one line or several).
#[test]
fn the_unsafe_list_is_every_unsafe_file() {
    // Spelled in pieces so that this file does not find itself.
    let kw = "unsafe";
    let needles = [format!("{kw} {{"), format!("{kw} fn "), format!("{kw} impl"), format!("{kw} extern")];
    let code = crate_files(|_, text| {
        let code: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
        code.iter().any(|l| needles.iter().any(|n| l.contains(n.as_str())))
            || code
                .join("\n")
                .split("allow(")
                .skip(1)
                .any(|a| a.split(')').next().unwrap().contains(&format!("{kw}_code")))
    });
    assert!(code.len() >= 3, "found only {code:?}");
    let doc = named_files(&bullet(&architecture(), "- **`unsafe` only where it is named**"));
    same_files("list of files with unsafe code", &doc, &code);
}

/// The invariant on JSON names every file outside tests and benchmarks that
/// derives or implements `serde::Serialize`.
#[test]
fn the_serialize_list_is_every_serializing_file() {
    let is_serialize = |t: &str| t.trim() == "Serialize" || t.trim().ends_with("::Serialize");
    let code = crate_files(|path, text| {
        !path.contains("/tests/")
            && !path.contains("/benches/")
            && (text.split("derive(").skip(1).any(|d| d.split(')').next().unwrap().split(',').any(is_serialize))
                || text.lines().any(|l| {
                    l.trim_start().starts_with("impl")
                        && (l.contains(" Serialize for ") || l.contains("::Serialize for "))
                }))
    });
    assert!(code.len() >= 3, "found only {code:?}");
    let doc = named_files(&bullet(&architecture(), "- **The API's JSON is shaped in `api`**"));
    same_files("list of files that serialise", &doc, &code);
}

/// The code map stays a map: a row's "what it holds" within 240 characters,
/// its "key types" within 160; the details live in each crate's lib.rs.
#[test]
fn code_map_rows_stay_short() {
    let doc = architecture();
    let map = doc.split("\n## Code map\n").nth(1).expect("ARCHITECTURE.md has a code map");
    let map = map.split("\n#").next().unwrap();
    let rows: Vec<&str> = map.lines().filter(|l| l.starts_with("| `")).collect();
    assert!(rows.len() >= LAYERS.iter().map(|l| l.len()).sum::<usize>(), "only {} rows in the code map", rows.len());
    let mut long = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 5, "a code map row of other than three cells: {row}");
        let (holds, keys) = (cells[2].chars().count(), cells[3].chars().count());
        if holds > 240 || keys > 160 {
            long.push(format!("{}: {holds} and {keys} characters", cells[1]));
        }
    }
    assert!(long.is_empty(), "code map rows over 240 (what it holds) or 160 (key types) characters: {long:?}");
}

/// The binary composes (issue 46): flags, and which parts a command runs.
/// What grows past this budget belongs in a crate of its own.
#[test]
fn the_binary_stays_composition() {
    let mut rs = Vec::new();
    files(&root().join("crates/kansoku/src"), &[".rs"], &mut rs);
    // Tests beside the code are not counted: they check it, they compose nothing.
    let code =
        |text: String| text.lines().take_while(|l| !l.starts_with("#[cfg(test)]") && !l.starts_with("#[test]")).count();
    let lines: usize = rs.iter().map(|p| code(std::fs::read_to_string(p).unwrap())).sum();
    assert!(
        lines <= 1500,
        "crates/kansoku/src holds {lines} lines of code (at most 1,500): move what is not composition out"
    );
}
