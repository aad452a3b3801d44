//! Alertmanager's v2 API: alerts posted as JSON (`POST /api/v2/alerts`),
//! firing ones again every minute while they fire (as Prometheus resends),
//! resolved ones once with their end time. Failures are counted and logged
//! once per run of them; a down Alertmanager never stops evaluation.

use std::collections::BTreeMap;
use std::time::Duration;

use model::Timestamp;

/// One alert as Alertmanager takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: i64,
    /// Set once resolved; else Alertmanager treats the alert as firing
    /// until it is not resent for its resolve timeout.
    pub ends_at: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Alertmanager {
    url: String,
    /// Where the alerts come from, as a link (Alertmanager wants a URI):
    /// this kansoku's dashboard.
    generator: String,
    agent: ureq::Agent,
}

impl Alertmanager {
    /// `url` is Alertmanager's base (`http://127.0.0.1:9093`); `generator`
    /// the link each alert carries back (`http://HOST:7070/`).
    pub fn new(url: &str, generator: &str) -> Alertmanager {
        let config = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).build();
        Alertmanager {
            url: url.trim_end_matches('/').to_owned(),
            generator: generator.to_owned(),
            agent: config.into(),
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Posts `alerts`; the error names the status or the failure.
    pub fn send(&self, alerts: &[Alert]) -> Result<(), String> {
        if alerts.is_empty() {
            return Ok(());
        }
        let body: Vec<serde_json::Value> = alerts
            .iter()
            .map(|a| {
                let mut v = serde_json::json!({
                    "labels": a.labels,
                    "annotations": a.annotations,
                    "startsAt": Timestamp(a.starts_at).to_rfc3339(),
                    "generatorURL": self.generator,
                });
                if let Some(end) = a.ends_at {
                    v["endsAt"] = serde_json::json!(Timestamp(end).to_rfc3339());
                }
                v
            })
            .collect();
        let body = serde_json::to_vec(&body).expect("alerts serialise");
        self.agent
            .post(format!("{}/api/v2/alerts", self.url))
            .header("content-type", "application/json")
            .send(&body[..])
            .map(drop)
            .map_err(|e| format!("POST {}/api/v2/alerts: {e}", self.url))
    }
}
