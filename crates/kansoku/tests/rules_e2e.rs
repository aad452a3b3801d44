//! Rules and alerts end to end: `kansoku up --rules … --alertmanager …`
//! with a real Alertmanager (Debian's 0.25). A value the test writes (by
//! Prometheus remote write) crosses an alert's threshold: the alert goes
//! pending, fires after its `for:`, reaches Alertmanager with its labels and
//! templated annotations, and resolves there once the value drops; the
//! recording rule and `ALERTS` are series kansoku stores.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{enc, free_port, http_get, http_post, wait};

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Writes `burn_value{source="e2e"} = v` now, by remote write.
fn burn(addr: &str, v: f64) {
    let body =
        promql::remote_write::encode(&[(vec![("__name__", "burn_value"), ("source", "e2e")], vec![(now_ms(), v)])]);
    let (status, text) = http_post(addr, "/prometheus/api/v1/write", "Content-Encoding: snappy\r\n", &body);
    assert_eq!(status, 204, "{text}");
}

/// Alertmanager's alerts (active ones: resolved ones are not listed).
fn am_alerts(am: &str) -> Vec<serde_json::Value> {
    let (status, body) = http_get(am, "/api/v2/alerts");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap().as_array().unwrap().clone()
}

fn instant(addr: &str, q: &str) -> Vec<serde_json::Value> {
    let (status, body) = http_get(addr, &format!("/prometheus/api/v1/query?query={}", enc(q)));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["data"]["result"].as_array().unwrap().clone()
}

#[test]
fn an_alert_fires_in_alertmanager_and_resolves() {
    let dir = tempfile::tempdir().unwrap();
    let am_port = free_port();
    let am_config = dir.path().join("am.yml");
    std::fs::write(&am_config, "route:\n  receiver: none\nreceivers:\n  - name: none\n").unwrap();
    let mut am_cmd = Command::new("prometheus-alertmanager");
    am_cmd
        .arg(format!("--config.file={}", am_config.display()))
        .arg(format!("--storage.path={}", dir.path().join("am").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{am_port}"))
        .arg("--cluster.listen-address=");
    let _am = common::peer(am_cmd, "msg=\"Listening on\"");
    let am = format!("127.0.0.1:{am_port}");
    let rules = dir.path().join("rules.yml");
    std::fs::write(
        &rules,
        "groups:\n- name: e2e\n  interval: 200ms\n  rules:\n  - record: burn:value:max\n    expr: max(burn_value)\n\
         \x20 - alert: Burning\n    expr: burn_value > 0.5\n    for: 1s\n    labels: {severity: page}\n\
         \x20   annotations: {summary: 'burning at {{ $value }} on {{ $labels.source }}'}\n",
    )
    .unwrap();
    let up = common::start(
        &[
            "up",
            "--listen",
            "127.0.0.1:0",
            "--host",
            "rules-e2e",
            "--rules",
            rules.to_str().unwrap(),
            "--alertmanager",
            &format!("http://{am}"),
        ],
        &dir.path().join("data"),
    );
    // Burning: pending, then firing after 1 s, then in Alertmanager.
    burn(&up.addr, 1.0);
    wait("ALERTS pending or firing", Duration::from_secs(20), || {
        !instant(&up.addr, "ALERTS{alertname=\"Burning\"}").is_empty()
    });
    wait("the alert in Alertmanager", Duration::from_secs(30), || {
        burn(&up.addr, 1.0);
        am_alerts(&am).iter().any(|a| a["labels"]["alertname"] == "Burning")
    });
    let alerts = am_alerts(&am);
    let a = alerts.iter().find(|a| a["labels"]["alertname"] == "Burning").unwrap();
    assert_eq!(a["labels"]["severity"], "page", "{a}");
    assert_eq!(a["labels"]["source"], "e2e", "{a}");
    assert_eq!(a["annotations"]["summary"], "burning at 1 on e2e", "{a}");
    assert_eq!(a["status"]["state"], "active", "{a}");
    let firing = instant(&up.addr, "ALERTS{alertname=\"Burning\",alertstate=\"firing\"}");
    assert_eq!(firing.len(), 1, "{firing:?}");
    // The same alert as Prometheus lists it (and the dashboard's banner).
    let listed = |addr: &str| {
        let (s, body) = http_get(addr, "/prometheus/api/v1/alerts");
        assert_eq!(s, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["alerts"].as_array().unwrap().clone()
    };
    let shown = listed(&up.addr);
    let b = shown.iter().find(|a| a["labels"]["alertname"] == "Burning").unwrap_or_else(|| panic!("{shown:?}"));
    assert_eq!((b["state"].as_str(), b["value"].as_str()), (Some("firing"), Some("1e+00")), "{b}");
    assert_eq!(b["annotations"]["summary"], "burning at 1 on e2e", "{b}");
    assert!(b["activeAt"].as_str().unwrap().ends_with('Z'), "{b}");
    // The rules as Prometheus lists them (Grafana's rule browser).
    let (s, body) = http_get(&up.addr, "/prometheus/api/v1/rules");
    assert_eq!(s, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rules = &v["data"]["groups"][0]["rules"];
    let alerting = rules.as_array().unwrap().iter().find(|r| r["type"] == "alerting").unwrap();
    assert_eq!((alerting["name"].as_str(), alerting["state"].as_str()), (Some("Burning"), Some("firing")), "{v}");
    assert_eq!((alerting["health"].as_str(), alerting["alerts"][0]["state"].as_str()), (Some("ok"), Some("firing")));
    let recording = rules.as_array().unwrap().iter().find(|r| r["type"] == "recording").unwrap();
    assert_eq!((recording["name"].as_str(), recording["health"].as_str()), (Some("burn:value:max"), Some("ok")));
    let (_, only) = http_get(&up.addr, "/prometheus/api/v1/rules?type=record");
    assert!(!only.contains("\"alerting\""), "{only}");
    let recorded = instant(&up.addr, "burn:value:max");
    assert_eq!(recorded[0]["value"][1], "1", "{recorded:?}");
    // Cooled down: resolved in Alertmanager, gone from ALERTS.
    burn(&up.addr, 0.0);
    wait("the alert resolved in Alertmanager", Duration::from_secs(30), || {
        !am_alerts(&am).iter().any(|a| a["labels"]["alertname"] == "Burning")
    });
    wait("ALERTS empty", Duration::from_secs(10), || instant(&up.addr, "ALERTS{alertname=\"Burning\"}").is_empty());
    assert!(listed(&up.addr).iter().all(|a| a["labels"]["alertname"] != "Burning"), "resolved: no longer listed");
    let (_, status) = http_get(&up.addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["rules"]["notifications_sent"].as_u64().unwrap() >= 2, "{status}");
    assert_eq!(status["rules"]["notifications_failed"], 0, "{status}");
    assert_eq!(status["rules"]["evaluation_failures"], 0, "{status}");
}
