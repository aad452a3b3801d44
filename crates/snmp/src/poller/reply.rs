//! One datagram: matched to its target by source address and request id,
//! its varbinds checked against the OIDs asked, values recorded with the
//! interval's boundary, and everything else counted by reason.

use super::target::pdu_error;
use super::*;

pub(super) const SYS_UPTIME_BYTES: &[u8] = &[0x2b, 6, 1, 2, 1, 1, 3, 0];

/// A varbind's value, checked and detached from the datagram.
#[derive(Debug, Clone, Copy)]
pub(super) enum Parsed {
    /// The exact value, and as a sample.
    Number(Raw, f64),
    /// An exception (noSuchInstance, ...) or a value that is no number.
    Missing(&'static str),
}

impl Parsed {
    fn of(v: &Value<'_>) -> Parsed {
        match *v {
            Value::Counter32(c) => Parsed::Number(Raw::Counter32(c), c as f64),
            Value::Counter64(c) => Parsed::Number(Raw::Counter64(c), c as f64),
            _ => match v.as_f64() {
                Some(f) => Parsed::Number(Raw::Other(f.to_bits()), f),
                None => Parsed::Missing(v.exception().unwrap_or("notNumeric")),
            },
        }
    }
}

/// Short slices compared in a loop, not a `memcmp` call per OID.
pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

impl Poller {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn handle(
        &mut self,
        buf: usize,
        len: usize,
        from: Option<SocketAddr>,
        arrived_ns: i64,
        batch: &mut Batch,
        t_ns: i64,
        draining: bool,
    ) {
        let Some(&ti) = from.as_ref().and_then(|a| self.by_addr.get(a)) else {
            self.stats.unknown_source.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let datagram = &self.bufs[buf][..len];
        let t = &mut self.targets[ti];
        // Counted now, written once per interval with the count (see `poll_once`).
        let fault = |_: &mut Series, _: &mut Batch, stats: &PollerStats, t: &mut Target, f: Fault| {
            let counter = match f {
                Fault::Late => &stats.late,
                Fault::Duplicate => &stats.duplicates,
                Fault::WrongRequestId => &stats.wrong_request_id,
                Fault::Malformed => &stats.malformed,
            };
            counter.fetch_add(1, Ordering::Relaxed);
            t.faults[f as usize] += 1;
        };
        let Ok((h, vbs)) = message::decode(datagram) else {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
        };
        if h.kind != PduKind::Response {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
        }
        let current = h.request_id == t.rid;
        if draining || !current {
            let f = if current && t.answered || h.request_id == t.prev_rid && t.prev_answered && !draining {
                Fault::Duplicate
            } else if current || h.request_id == t.prev_rid {
                Fault::Late
            } else {
                Fault::WrongRequestId
            };
            return fault(&mut self.series, batch, &self.stats, t, f);
        }
        if t.answered {
            return fault(&mut self.series, batch, &self.stats, t, Fault::Duplicate);
        }
        // Check and parse the whole answer before recording any of it: one
        // pass, OIDs compared with the request's, values made 'static.
        let parsed = &mut self.parsed;
        parsed.clear();
        if h.error_status == 0 {
            for (k, vb) in vbs.enumerate() {
                let Some(expect) = t.expect_at.get(k).map(|&(a, b)| &t.expect[a as usize..b as usize]) else {
                    return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
                };
                match vb {
                    Ok(vb) if same_bytes(expect, vb.oid.0) => parsed.push(Parsed::of(&vb.value)),
                    _ => return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed),
                }
            }
            if parsed.len() != t.active.len() {
                return fault(&mut self.series, batch, &self.stats, t, Fault::Malformed);
            }
        }
        t.answered = true;
        self.n_answered += 1;
        self.last_answer_ns = self.last_answer_ns.max(arrived_ns);
        let series = &mut self.series;
        series.push(batch, t.id_up, 1.0);
        let rtt_ns = (arrived_ns - t.sent_ns).max(0);
        t.last_rtt_ns = Some(rtt_ns);
        series.push(batch, t.id_rtt, (rtt_ns / 1000) as f64 / 1e6);
        for o in t.oids.iter_mut() {
            if let Some(error) = o.removed {
                let id = o.error_id(series, &t.labels, error);
                series.push(batch, id, 1.0);
            }
        }
        if h.error_status != 0 {
            self.stats.pdu_errors.fetch_add(1, Ordering::Relaxed);
            pdu_error(series, batch, t, h.error_status, h.error_index);
            return;
        }

        // sysUpTime going backwards: the agent restarted, counters with it.
        let mut restarted = false;
        if let (Some(Parsed::Number(Raw::Other(bits), _)), true) = (parsed.first(), t.uptime_first) {
            let now = f64::from_bits(*bits) as u32;
            restarted = t.uptime.is_some_and(|prev| track::restarted(prev, now));
            t.uptime = Some(now);
        }
        if restarted {
            self.stats.restarts.fetch_add(1, Ordering::Relaxed);
            let id = series.get_or_add(t.key("kansoku_snmp_restart", &[]));
            series.push(batch, id, 1.0);
        }
        let mut stale = 0u32;
        for (k, p) in parsed.iter().enumerate() {
            let labels = &t.labels;
            let o = &mut t.oids[t.active[k]];
            let (raw, value) = match *p {
                Parsed::Number(raw, value) => (raw, value),
                Parsed::Missing(error) => {
                    o.last = Some(Err(error));
                    let id = o.error_id(series, labels, error);
                    series.push(batch, id, 1.0);
                    continue;
                }
            };
            series.push(batch, o.id_value, value);
            let obs = o.track.observe(raw, t_ns, restarted, self.interval_ns);
            if let Some(inc) = obs.increase {
                let id = *o.id_increase.get_or_insert_with(|| {
                    let name = format!("{}_increase", o.key.name());
                    series.add(SeriesKey::new(name, o.key.labels().iter().map(|(k, v)| (k.as_str(), v.as_str()))))
                });
                series.push(batch, id, inc as f64);
            }
            stale += obs.stale as u32;
            o.last = Some(Ok(value));
            o.last_stale = obs.stale;
            if let Some(p) = o.track.period_ns()
                && (obs.period_changed || t_ns - o.period_written_ns >= PERIOD_REPEAT_NS)
            {
                let id = *o.id_period.get_or_insert_with(|| {
                    let mut lab: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    lab.push(("oid", &o.display));
                    series.add(SeriesKey::new("kansoku_snmp_update_period_seconds", lab))
                });
                series.push(batch, id, (p / 1000) as f64 / 1e6);
                o.period_written_ns = t_ns;
            }
        }
        series.push(batch, t.id_stale, stale as f64);
        self.stats.stale_values.fetch_add(stale as u64, Ordering::Relaxed);
    }
}
