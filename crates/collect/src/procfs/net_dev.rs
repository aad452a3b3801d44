//! Per interface network counters from `/proc/net/dev` (this network namespace).
//! Resolution: most drivers update these per packet; some refresh from the NIC
//! periodically (the glogger paper saw e1000 every 2 s) — see the store's
//! staleness detection for how that shows.

use std::path::Path;

use crate::emitter::Emitter;
use crate::proc_file::ProcFile;
use crate::source::{HostSource, Missing, ParseError, SourceError, field_u64};

/// Column names after the interface name, in file order, as node_exporter
/// names them (`node_network_{name}_total`).
pub const COLUMNS: [&str; 16] = [
    "receive_bytes",
    "receive_packets",
    "receive_errs",
    "receive_drop",
    "receive_fifo",
    "receive_frame",
    "receive_compressed",
    "receive_multicast",
    "transmit_bytes",
    "transmit_packets",
    "transmit_errs",
    "transmit_drop",
    "transmit_fifo",
    "transmit_colls",
    "transmit_carrier",
    "transmit_compressed",
];

const METRICS: [&str; 16] = [
    "node_network_receive_bytes_total",
    "node_network_receive_packets_total",
    "node_network_receive_errs_total",
    "node_network_receive_drop_total",
    "node_network_receive_fifo_total",
    "node_network_receive_frame_total",
    "node_network_receive_compressed_total",
    "node_network_receive_multicast_total",
    "node_network_transmit_bytes_total",
    "node_network_transmit_packets_total",
    "node_network_transmit_errs_total",
    "node_network_transmit_drop_total",
    "node_network_transmit_fifo_total",
    "node_network_transmit_colls_total",
    "node_network_transmit_carrier_total",
    "node_network_transmit_compressed_total",
];

#[derive(Debug, PartialEq, Eq)]
pub struct Interface<'a> {
    pub device: &'a str,
    pub counters: [u64; 16],
}

pub fn parse_net_dev(text: &str) -> Result<Vec<Interface<'_>>, ParseError> {
    let mut out = Vec::new();
    // Two header lines, then `  name: c0 c1 ... c15`.
    for (i, line) in text.lines().enumerate().skip(2) {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let (device, rest) = line.split_once(':').ok_or_else(|| ParseError::new(n, "expected `name: counters`"))?;
        let mut fields = rest.split_ascii_whitespace();
        let mut counters = [0u64; 16];
        for (slot, col) in counters.iter_mut().zip(COLUMNS) {
            *slot = field_u64(fields.next(), n, col)?;
        }
        out.push(Interface { device: device.trim(), counters });
    }
    Ok(out)
}

#[derive(Debug)]
pub struct NetDevSource {
    file: ProcFile,
}

impl NetDevSource {
    pub fn open(root: &Path) -> Result<Box<dyn HostSource>, Missing> {
        Ok(Box::new(NetDevSource { file: super::open(root, "proc/net/dev", "net_dev")? }))
    }
}

impl HostSource for NetDevSource {
    fn name(&self) -> &'static str {
        "net_dev"
    }

    fn files(&mut self) -> Vec<&mut ProcFile> {
        vec![&mut self.file]
    }

    fn collect(&mut self, out: &mut Emitter) -> Result<(), SourceError> {
        let (path, text) = self.file.read_with_path()?;
        for iface in super::parsed(path, parse_net_dev(text))? {
            for (metric, v) in METRICS.iter().zip(iface.counters) {
                out.emit(metric, &[("device", iface.device)], v as f64);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_file() {
        let ifaces = parse_net_dev(include_str!("../../tests/fixtures/debian12-vm/net_dev")).unwrap();
        let names: Vec<&str> = ifaces.iter().map(|i| i.device).collect();
        assert_eq!(names, ["lo", "ifb0", "ifb1", "eth0"]);
        assert_eq!(ifaces[0].counters[0], ifaces[0].counters[8], "loopback rx bytes = tx bytes");
        assert!(ifaces[3].counters[0] > 0);
    }

    #[test]
    fn rejects_short_lines() {
        let text = "h1\nh2\n  lo: 1 2 3\n";
        assert_eq!(parse_net_dev(text).unwrap_err(), ParseError::new(3, "missing field receive_drop"));
    }

    #[test]
    fn metric_names_follow_columns() {
        for (m, c) in METRICS.iter().zip(COLUMNS) {
            assert_eq!(*m, format!("node_network_{c}_total"));
        }
    }
}
