//! Memory usage from `/proc/meminfo`. Values in the file are KiB; we emit
//! bytes, named as node_exporter does: `Active(anon)` -> `node_memory_Active_anon_bytes`.
//! Unit-less fields (`HugePages_Total`) are counts and keep no `_bytes` suffix.
//! Resolution: exact at read time (the kernel sums counters on each read).

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError, parse_u64};

/// One `Name: value [kB]` line; `bytes` is false for unit-less counts.
#[derive(Debug, PartialEq, Eq)]
pub struct MeminfoField<'a> {
    pub name: &'a str,
    pub value: u64,
    pub bytes: bool,
}

/// Byte-level: each line is `Name:`, spaces, digits, and an optional ` kB`.
pub fn parse_meminfo(text: &str) -> Result<Vec<MeminfoField<'_>>, ParseError> {
    let mut out = Vec::with_capacity(64);
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim_ascii().is_empty() {
            continue;
        }
        let colon = line.bytes().position(|c| c == b':').ok_or_else(|| ParseError::new(n, "expected `Name: value`"))?;
        let name = &line[..colon];
        let rest = line[colon + 1..].trim_ascii();
        let (digits, unit) = rest.split_at(rest.bytes().position(|c| !c.is_ascii_digit()).unwrap_or(rest.len()));
        let value = parse_u64(digits)
            .ok_or_else(|| ParseError::new(n, format!("field {name}: {rest:?} is not an unsigned integer")))?;
        let bytes = match unit.trim_ascii_start() {
            "kB" => true,
            "" => false,
            u => return Err(ParseError::new(n, format!("unknown unit {u:?}"))),
        };
        out.push(MeminfoField { name, value: if bytes { value * 1024 } else { value }, bytes });
    }
    Ok(out)
}

/// `Active(anon)` -> `node_memory_Active_anon_bytes`.
pub fn metric_name(field: &MeminfoField<'_>) -> String {
    let mut name = String::from("node_memory_");
    for c in field.name.chars() {
        match c {
            '(' => name.push('_'),
            ')' => {}
            c if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
            _ => name.push('_'),
        }
    }
    if field.bytes {
        name.push_str("_bytes");
    }
    name
}

#[derive(Debug)]
pub struct MeminfoSource {
    file: ProcFile,
    /// Metric names by field position; rebuilt if the field list changes.
    names: Vec<(String, String)>,
}

impl MeminfoSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        let file = super::open(root, "proc/meminfo", "meminfo")?;
        Ok(Box::new(MeminfoSource { file, names: Vec::new() }))
    }
}

impl HostSource for MeminfoSource {
    fn name(&self) -> &'static str {
        "meminfo"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        vec![&mut self.file]
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        let names = &mut self.names;
        let (path, text) = self.file.read_with_path()?;
        let fields = super::parsed(path, parse_meminfo(text))?;
        for (i, f) in fields.iter().enumerate() {
            if names.get(i).is_none_or(|(field, _)| field != f.name) {
                names.truncate(i);
                names.push((f.name.to_owned(), metric_name(f)));
            }
            out.emit(&names[i].1, &[], f.value as f64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    #[test]
    fn parses_captured_file() {
        let fields = parse_meminfo(include_str!("../../tests/fixtures/debian12-vm/meminfo")).unwrap();
        let names: Vec<String> = fields.iter().take(8).map(metric_name).collect();
        expect![[r#"["node_memory_MemTotal_bytes", "node_memory_MemFree_bytes", "node_memory_MemAvailable_bytes", "node_memory_Buffers_bytes", "node_memory_Cached_bytes", "node_memory_SwapCached_bytes", "node_memory_Active_bytes", "node_memory_Inactive_bytes"]"#]]
            .assert_eq(&format!("{names:?}"));
        let total = &fields[0];
        assert!(total.value > 1 << 30 && total.value.is_multiple_of(1024));
    }

    #[test]
    fn names_and_units() {
        let f = parse_meminfo("Active(anon):  12 kB\nHugePages_Total:  3\n").unwrap();
        assert_eq!(metric_name(&f[0]), "node_memory_Active_anon_bytes");
        assert_eq!(f[0].value, 12 * 1024);
        assert_eq!(metric_name(&f[1]), "node_memory_HugePages_Total");
        assert_eq!(f[1].value, 3);
        assert_eq!(parse_meminfo("MemTotal 12 kB").unwrap_err(), ParseError::new(1, "expected `Name: value`"));
        assert_eq!(parse_meminfo("MemTotal: 12 MB").unwrap_err(), ParseError::new(1, r#"unknown unit "MB""#));
    }
}
