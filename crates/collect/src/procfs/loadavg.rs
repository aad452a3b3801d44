//! Load averages from `/proc/loadavg`. Resolution: the kernel recomputes them
//! every 5 s (LOAD_FREQ), so at 100 ms most samples repeat the previous value.

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError};

pub fn parse_loadavg(text: &str) -> Result<[f64; 3], ParseError> {
    let mut fields = text.split_ascii_whitespace();
    let mut out = [0.0; 3];
    for (slot, name) in out.iter_mut().zip(["load1", "load5", "load15"]) {
        let f = fields.next().ok_or_else(|| ParseError::new(1, format!("missing field {name}")))?;
        *slot = f.parse().map_err(|_| ParseError::new(1, format!("field {name}: {f:?} is not a number")))?;
    }
    Ok(out)
}

#[derive(Debug)]
pub struct LoadavgSource {
    file: ProcFile,
}

impl LoadavgSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        Ok(Box::new(LoadavgSource { file: super::open(root, "proc/loadavg", "loadavg")? }))
    }
}

impl HostSource for LoadavgSource {
    fn name(&self) -> &'static str {
        "loadavg"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        vec![&mut self.file]
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        let (path, text) = self.file.read_with_path()?;
        let [l1, l5, l15] = super::parsed(path, parse_loadavg(text))?;
        out.emit("node_load1", &[], l1);
        out.emit("node_load5", &[], l5);
        out.emit("node_load15", &[], l15);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(parse_loadavg("0.03 0.08 0.04 1/77 2120\n"), Ok([0.03, 0.08, 0.04]));
        assert!(parse_loadavg(include_str!("../../tests/fixtures/debian12-vm/loadavg")).is_ok());
        assert_eq!(parse_loadavg("0.1 x"), Err(ParseError::new(1, r#"field load5: "x" is not a number"#)));
    }
}
