//! The theory side, as arithmetic a reader can follow: each function
//! returns its figure and the lines of its working.
//!
//! - **Ethernet payload** (seed 004): a full frame carries MTU bytes of IP
//!   packet; on the wire it also takes the Ethernet header (14), the FCS
//!   (4), the preamble with its delimiter (8) and the inter-frame gap (12):
//!   MTU + 38 byte times. TCP's payload per frame is MTU − 20 (IP) − 20
//!   (TCP) − 12 (the timestamp option Linux sends by default). The paper
//!   reckoned 1480 payload bytes (ICMP's data after the IP header) over
//!   1521 (21 bytes of signal per frame) and gave 10⁹/8 × 1480/1521 =
//!   121.6 × 10⁶ B/s — "116 MB/s" in MiB/s.
//! - **tc tbf** shapes what the qdisc sees: the frame from the Ethernet
//!   header on (MTU + 14), no FCS, preamble or gap — so through a shaped
//!   veth the payload limit is rate/8 × MSS / (MTU + 14).
//! - **Disk zones** (seed 004): a zone with s sectors per track of b bytes
//!   spinning at r rpm reads s × b × r / 60 bytes a second (the paper
//!   printed it as s × b / r × 60, a slip: its figure 3 follows the
//!   former). One rotation takes 60 / r seconds; seed 001 measured fsync
//!   at 2–3 rotations.

use serde::{Deserialize, Serialize};

/// Bytes a frame takes on the wire beyond its MTU-sized payload: header
/// 14, FCS 4, preamble and start delimiter 8, inter-frame gap 12.
pub const ETHERNET_OVERHEAD: u64 = 38;
/// What tbf counts beyond the IP packet on an Ethernet device: the header.
pub const ETHERNET_HEADER: u64 = 14;
/// IPv4 (20) + TCP (20) + the timestamp option (12) per segment.
pub const TCP_IP_HEADERS: u64 = 52;

/// A limit and how it was reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    /// Bytes per second (or operations, as the caller says).
    pub value: f64,
    pub working: Vec<String>,
}

/// TCP payload over Ethernet at `rate_bps` with `mtu`: on the wire and
/// through `tc tbf` at the same rate.
pub fn tcp_payload(rate_bps: f64, mtu: u64) -> (Limit, Limit) {
    let mss = mtu.saturating_sub(TCP_IP_HEADERS);
    let wire = mtu + ETHERNET_OVERHEAD;
    let shaped = mtu + ETHERNET_HEADER;
    let bytes = rate_bps / 8.0;
    let on_wire = bytes * mss as f64 / wire as f64;
    let through_tbf = bytes * mss as f64 / shaped as f64;
    let head = format!(
        "payload per frame: MTU {mtu} − 20 IP − 20 TCP − 12 timestamp option = {mss} B; line rate {rate_bps:.0} b/s = {bytes:.0} B/s"
    );
    (
        Limit {
            value: on_wire,
            working: vec![
                head.clone(),
                format!("on the wire a frame takes MTU + 14 header + 4 FCS + 8 preamble + 12 gap = {wire} B"),
                format!("{bytes:.0} × {mss} / {wire} = {on_wire:.0} B/s ({:.1} MiB/s)", on_wire / 1048576.0),
            ],
        },
        Limit {
            value: through_tbf,
            working: vec![
                head,
                format!("tc tbf counts the frame from its Ethernet header: MTU + 14 = {shaped} B"),
                format!("{bytes:.0} × {mss} / {shaped} = {through_tbf:.0} B/s ({:.1} MiB/s)", through_tbf / 1048576.0),
            ],
        },
    )
}

/// Seed 004's own figure: 10⁹/8 × 1480/1521.
pub fn paper_ethernet() -> Limit {
    let v = 1e9 / 8.0 * 1480.0 / 1521.0;
    Limit {
        value: v,
        working: vec![
            "seed 004: 1480 B of data per 1500 B IP packet (ICMP after its 20 B IP header), 21 B of signal per frame"
                .into(),
            format!("10^9 / 8 × 1480 / 1521 = {v:.0} B/s = {:.1} MiB/s (the paper's \"116 MB/s\")", v / 1048576.0),
        ],
    }
}

/// A disk's data sheet: a rotating disk's zones, or an SSD's or virtual
/// disk's advertised limits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DataSheet {
    /// The model, as printed.
    #[serde(default)]
    pub model: Option<String>,
    pub rpm: Option<f64>,
    #[serde(default = "sector")]
    pub bytes_per_sector: f64,
    /// Zones from the outer edge in: each up to a fraction of the capacity.
    #[serde(default)]
    pub zones: Vec<Zone>,
    /// Advertised sequential read, bytes per second (SSDs, virtual disks).
    pub read_bytes_per_second: Option<f64>,
    /// Advertised random 4 KiB read IOPS.
    pub read_iops: Option<f64>,
}

fn sector() -> f64 {
    512.0
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Zone {
    /// The zone ends at this fraction of the capacity (0 < until ≤ 1).
    pub until: f64,
    pub sectors_per_track: f64,
}

impl DataSheet {
    pub fn load(text: &str) -> Result<DataSheet, String> {
        let d: DataSheet = toml::from_str(text).map_err(|e| e.to_string())?;
        if !d.zones.is_empty() && d.rpm.is_none() {
            return Err("zones need rpm".into());
        }
        let mut last = 0.0;
        for z in &d.zones {
            if !(z.until > last && z.until <= 1.0) || z.sectors_per_track <= 0.0 {
                return Err(format!(
                    "zone until = {}: zones go outward in, each ending after the last and at most at 1.0, with sectors_per_track > 0",
                    z.until
                ));
            }
            last = z.until;
        }
        Ok(d)
    }

    /// The sequential read limit at `fraction` of the capacity: the zone's
    /// s × b × r / 60, else the advertised figure; None when unknown.
    pub fn read_at(&self, fraction: f64) -> Option<Limit> {
        if let (Some(rpm), Some(z)) = (self.rpm, self.zones.iter().find(|z| fraction < z.until)) {
            let v = z.sectors_per_track * self.bytes_per_sector * rpm / 60.0;
            return Some(Limit {
                value: v,
                working: vec![format!(
                    "zone to {:.0} %: {} sectors/track × {} B × {rpm} rpm / 60 = {v:.0} B/s",
                    z.until * 100.0,
                    z.sectors_per_track,
                    self.bytes_per_sector
                )],
            });
        }
        self.read_bytes_per_second
            .map(|v| Limit { value: v, working: vec![format!("advertised sequential read: {v:.0} B/s")] })
    }

    /// One rotation and seed 001's 2–3 rotations per fsync; None without rpm.
    pub fn fsync_latency(&self) -> Option<(f64, f64, Vec<String>)> {
        let rpm = self.rpm?;
        let rot = 60.0 / rpm;
        Some((
            2.0 * rot,
            3.0 * rot,
            vec![format!(
                "one rotation: 60 / {rpm} rpm = {:.0} µs; an fsync waits 2–3 rotations (seed 001): {:.0}–{:.0} µs",
                rot * 1e6,
                2.0 * rot * 1e6,
                3.0 * rot * 1e6
            )],
        ))
    }
}

/// A rate like `1gbit`, `200mbit`, `100M`, in bits per second (tc's units:
/// k, m, g as powers of 1000; `bit` optional).
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim().to_ascii_lowercase();
    let t = t.strip_suffix("bit").or_else(|| t.strip_suffix("bps")).unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1e3),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('g') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v * mult),
        _ => Err(format!("{s:?}: a rate such as 1gbit, 200mbit or 500kbit")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_papers_figure_and_ours() {
        let p = paper_ethernet();
        assert!((p.value - 121_630_506.0).abs() < 1.0, "{}", p.value);
        assert!((p.value / 1048576.0 - 116.0).abs() < 0.1, "the paper's 116 (MiB/s)");
        let (wire, tbf) = tcp_payload(1e9, 1500);
        // 125e6 × 1448 / 1538 and × 1448 / 1514.
        assert!((wire.value - 117_685_305.6).abs() < 1.0, "{}", wire.value);
        assert!((tbf.value - 119_550_858.6).abs() < 1.0, "{}", tbf.value);
        assert!(wire.working.iter().any(|l| l.contains("1448")));
        // Jumbo frames: less overhead.
        let (jumbo, _) = tcp_payload(1e9, 9000);
        assert!(jumbo.value > wire.value);
    }

    #[test]
    fn zones_give_the_read_speed_by_position() {
        let d = DataSheet::load(
            "model = \"Hitachi 7K500\"\nrpm = 7200\nzones = [{ until = 0.5, sectors_per_track = 1000 }, { until = 1.0, sectors_per_track = 500 }]\n",
        )
        .unwrap();
        // 1000 × 512 × 7200 / 60 = 61,440,000 B/s.
        assert_eq!(d.read_at(0.1).unwrap().value, 61_440_000.0);
        assert_eq!(d.read_at(0.7).unwrap().value, 30_720_000.0);
        let (lo, hi, _) = d.fsync_latency().unwrap();
        assert!((lo - 2.0 * 60.0 / 7200.0).abs() < 1e-12 && (hi - 0.025).abs() < 1e-12);
        assert!(DataSheet::load("zones = [{ until = 0.5, sectors_per_track = 1 }]").is_err(), "zones need rpm");
        assert!(DataSheet::load("rpm = 1\nzones = [{ until = 1.5, sectors_per_track = 1 }]").is_err());
        assert!(DataSheet::load("rmp = 7200").is_err(), "a misspelt key is named");
        assert_eq!(DataSheet::default().read_at(0.5), None, "unknown stays unknown");
    }

    #[test]
    fn rates_read_as_tc_writes_them() {
        assert_eq!(parse_rate("1gbit"), Ok(1e9));
        assert_eq!(parse_rate("200mbit"), Ok(2e8));
        assert_eq!(parse_rate("500k"), Ok(5e5));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0mbit").is_err());
    }
}
