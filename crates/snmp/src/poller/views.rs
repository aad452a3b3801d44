//! The targets as of the poller's last interval, for `/api/v1/snmp/targets`:
//! asked for through a bounded channel, built by the poller between
//! intervals (only when someone asks), answered without blocking it.

use super::*;

pub use model::snmp::{OidView, TargetView};

/// Asks a running poller for its targets' state; answered at the end of the
/// poller's current interval.
#[derive(Debug, Clone)]
pub struct Views(pub(super) SyncSender<SyncSender<Arc<Vec<TargetView>>>>);

/// Requests for the targets' view waiting for the poller's next interval, at
/// most; past it `Views::get` answers None at once.
pub(super) const VIEW_REQUESTS_MAX: usize = 64;

impl Views {
    /// Waits up to `limit` for the poller's answer; None if it stopped, or
    /// if [`VIEW_REQUESTS_MAX`] requests already wait.
    pub fn get(&self, limit: Duration) -> Option<Arc<Vec<TargetView>>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.0.try_send(tx).ok()?;
        rx.recv_timeout(limit).ok()
    }
}

impl Poller {
    pub(super) fn answer_views(&mut self) {
        let asks: Vec<_> = self.views.try_iter().collect();
        if asks.is_empty() {
            return;
        }
        let views: Arc<Vec<TargetView>> = Arc::new(
            self.targets
                .iter()
                .map(|t| TargetView {
                    target: t.labels[0].1.clone(),
                    address: t.addr.to_string(),
                    labels: t.labels[1..].to_vec(),
                    up: t.answered,
                    rtt_seconds: t.last_rtt_ns.map(|n| n as f64 / 1e9),
                    oids: t
                        .oids
                        .iter()
                        .map(|o| OidView {
                            oid: o.display.clone(),
                            series: o.key.to_string(),
                            value: o.last.and_then(Result::ok),
                            error: o.removed.or(o.last.and_then(Result::err)),
                            update_period_seconds: o.track.period_ns().map(|p| p as f64 / 1e9),
                            stale: o.last_stale,
                        })
                        .collect(),
                })
                .collect(),
        );
        for ask in asks {
            let _ = ask.try_send(Arc::clone(&views));
        }
    }
}
