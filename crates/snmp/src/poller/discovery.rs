//! Targets whose discovery failed at start: retried on a thread of their
//! own, and adopted by the poller between intervals once found.

use super::*;

/// Retries discovery of `pending` targets every `every` on a thread of its
/// own, sending each success; ends when all are found or `stop` is set.
pub(super) fn spawn_rediscovery(
    mut pending: Vec<(usize, TargetSpec)>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> io::Result<Receiver<(usize, Discovered)>> {
    // Each target is sent once at most: room for all, so sending never waits.
    let (tx, rx) = std::sync::mpsc::sync_channel(pending.len().max(1));
    std::thread::Builder::new().name("snmp-rediscover".into()).spawn(move || {
        while !pending.is_empty() {
            let wake = std::time::Instant::now() + every;
            while std::time::Instant::now() < wake {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50).min(every));
            }
            let specs: Vec<&TargetSpec> = pending.iter().map(|(_, s)| s).collect();
            let results = discover(&specs, Duration::from_secs(1), 0);
            let mut still = Vec::new();
            for ((i, spec), r) in pending.into_iter().zip(results) {
                match r {
                    Ok(found) => {
                        if tx.send((i, found)).is_err() {
                            return;
                        }
                    }
                    Err(_) => still.push((i, spec)),
                }
            }
            pending = still;
        }
    })?;
    Ok(rx)
}

impl Poller {
    /// Adopts a late discovery: the target's default set replaces its
    /// minimal one; OIDs it already polled keep their series and state.
    pub(super) fn adopt(&mut self, ti: usize, found: &Discovered) {
        let t = &mut self.targets[ti];
        let planned = discovered_oids(t.version, found);
        let mut old: Vec<Option<TargetOid>> = std::mem::take(&mut t.oids).into_iter().map(Some).collect();
        let mut oids = Vec::with_capacity(planned.len());
        for p in &planned {
            let bytes = p.oid.to_bytes();
            let kept = old.iter_mut().find(|o| o.as_ref().is_some_and(|o| o.bytes == bytes)).and_then(Option::take);
            oids.push(kept.unwrap_or_else(|| TargetOid::new(p, &t.labels, &mut self.series)));
        }
        t.oids = oids;
        t.active = (0..t.oids.len()).collect();
        t.reencode();
        t.request.set_request_id(t.rid);
        tracing::info!(
            "snmp: {}: discovered {} interfaces and {} disks; polling {} OIDs",
            t.addr,
            found.interfaces.len(),
            found.disks.len(),
            t.oids.len()
        );
    }
}
