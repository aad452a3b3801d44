//! What a target's state does per interval: its OIDs' series and request
//! bytes, and the sparse samples of what went wrong — faults by kind, error
//! statuses (a noSuchName drops the object from the request).

use super::reply::SYS_UPTIME_BYTES;
use super::*;

impl Fault {
    pub(super) fn name(self) -> &'static str {
        match self {
            Fault::Late => "late",
            Fault::Duplicate => "duplicate",
            Fault::WrongRequestId => "wrong_request_id",
            Fault::Malformed => "malformed",
        }
    }
}

impl TargetOid {
    pub(super) fn new(o: &PlannedOid, target_labels: &[(String, String)], series: &mut Series) -> TargetOid {
        let lab = target_labels.iter().chain(&o.labels).map(|(k, v)| (k.as_str(), v.as_str()));
        let key = SeriesKey::new(o.metric.as_str(), lab);
        TargetOid {
            bytes: o.oid.to_bytes(),
            display: mib::display(&o.oid),
            id_value: series.add(key.clone()),
            key,
            id_increase: None,
            id_period: None,
            period_written_ns: i64::MIN,
            track: OidTrack::default(),
            removed: None,
            error_ids: Vec::new(),
            last: None,
            last_stale: false,
        }
    }

    pub(super) fn error_id(&mut self, series: &mut Series, labels: &[(String, String)], error: &'static str) -> u32 {
        if let Some(&(_, id)) = self.error_ids.iter().find(|(e, _)| *e == error) {
            return id;
        }
        let id = series.get_or_add(error_key(labels, &self.display, error));
        self.error_ids.push((error, id));
        id
    }
}

impl Target {
    pub(super) fn reencode(&mut self) {
        let oids: Vec<Vec<u8>> = self.active.iter().map(|&i| self.oids[i].bytes.clone()).collect();
        self.request = PreEncoded::new(self.version, &self.community, PduKind::Get, &oids, (0, 0));
        self.expect.clear();
        self.expect_at.clear();
        for o in &oids {
            let start = self.expect.len() as u32;
            self.expect.extend_from_slice(o);
            self.expect_at.push((start, self.expect.len() as u32));
        }
        self.uptime_first = oids.first().is_some_and(|o| o == SYS_UPTIME_BYTES);
    }

    pub(super) fn key(&self, name: &str, extra: &[(&str, &str)]) -> SeriesKey {
        let labels = self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(extra.iter().copied());
        SeriesKey::new(name, labels)
    }
}

pub(super) const FAULTS: [Fault; 4] = [Fault::Late, Fault::Duplicate, Fault::WrongRequestId, Fault::Malformed];

/// One `kansoku_snmp_fault{kind}` sample per kind seen this interval, valued
/// with the number of such replies (one sample per series and interval).
pub(super) fn write_faults(series: &mut Series, batch: &mut Batch, t: &mut Target) {
    for f in FAULTS {
        let n = std::mem::take(&mut t.faults[f as usize]);
        if n == 0 {
            continue;
        }
        let id = match t.fault_ids[f as usize] {
            Some(id) => id,
            None => {
                let id = series.get_or_add(t.key("kansoku_snmp_fault", &[("kind", f.name())]));
                t.fault_ids[f as usize] = Some(id);
                id
            }
        };
        series.push(batch, id, n as f64);
    }
}

pub(super) fn error_key(labels: &[(String, String)], oid: &str, error: &str) -> SeriesKey {
    let lab = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain([("oid", oid), ("error", error)]);
    SeriesKey::new("kansoku_snmp_error", lab)
}

/// An error status fails the whole PDU. noSuchName (v1's answer to an
/// object the agent lacks) names the culprit by index: drop it from the
/// request so the others are polled from the next interval on, and keep
/// recording the error for it. Anything else is recorded as is.
pub(super) fn pdu_error(series: &mut Series, batch: &mut Batch, t: &mut Target, status: i64, index: i64) {
    let name = error_status_name(status);
    let culprit = usize::try_from(index).ok().filter(|&i| i >= 1 && i <= t.active.len()).map(|i| i - 1);
    match (status, culprit) {
        (2, Some(k)) => {
            let o = t.active.remove(k);
            let oid = &mut t.oids[o];
            oid.removed = Some("noSuchName");
            tracing::warn!(
                "{}: noSuchName for {}: polling the target's other OIDs without it (kansoku_snmp_error)",
                t.addr,
                oid.display
            );
            let id = oid.error_id(series, &t.labels, "noSuchName");
            series.push(batch, id, 1.0);
            t.reencode();
            t.request.set_request_id(t.rid);
        }
        _ => {
            let id = series.get_or_add(t.key("kansoku_snmp_pdu_error", &[("error", name)]));
            series.push(batch, id, 1.0);
        }
    }
}
