//! What an SNMP poller shows of its targets (`/api/v1/snmp/targets`), as
//! plain data: each target as of its last interval and each OID's last
//! answer. The poller builds it when asked; the API shapes it into JSON
//! without knowing the poller.

use std::sync::Arc;
use std::time::Duration;

/// One target as of its last interval, for `/api/v1/snmp/targets`.
#[derive(Debug, Clone)]
pub struct TargetView {
    pub target: String,
    pub address: String,
    pub labels: Vec<(String, String)>,
    /// Answered in the last interval.
    pub up: bool,
    pub rtt_seconds: Option<f64>,
    pub oids: Vec<OidView>,
}

#[derive(Debug, Clone)]
pub struct OidView {
    /// `ifHCInOctets.2`, or the dotted number.
    pub oid: String,
    pub series: String,
    /// The last value answered (as stored), if the last answer had one.
    pub value: Option<f64>,
    /// What came instead of a value (`noSuchInstance`, v1 `noSuchName`, ...).
    pub error: Option<&'static str>,
    /// The agent's effective update period, once two changes were seen.
    pub update_period_seconds: Option<f64>,
    /// The last value repeated an old reading (see docs/snmp.md, Staleness).
    pub stale: bool,
}

/// Asks a running poller for its targets, waiting at most the given time:
/// `None` if it stopped or is asked too often.
#[derive(Clone)]
pub struct TargetsFn(pub Arc<dyn Fn(Duration) -> Option<Arc<Vec<TargetView>>> + Send + Sync>);

impl TargetsFn {
    pub fn get(&self, limit: Duration) -> Option<Arc<Vec<TargetView>>> {
        (self.0)(limit)
    }
}

impl std::fmt::Debug for TargetsFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TargetsFn")
    }
}
