//! The classifier on recorded windows: the features of every counted
//! window of a real `kansoku lab diagnose` campaign on this kind of machine
//! (`tests/recorded/campaign.json`, written by its `--record`), each with
//! the verdict its workload should get. The rules must keep naming them:
//! at least 95 % right overall and on each workload's windows at least
//! 80 %, no false verdict on the idle host, and every pattern covered.

use diagnose::{Features, classify};

#[derive(serde::Deserialize)]
struct Window {
    workload: String,
    expect: String,
    features: Features,
}

#[test]
fn recorded_campaign_windows_get_their_verdicts() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/recorded/campaign.json")).unwrap();
    let windows: Vec<Window> = serde_json::from_str(&text).unwrap();
    let mut by: std::collections::BTreeMap<&str, (usize, usize, Vec<String>)> = Default::default();
    for w in &windows {
        let got = classify(&w.features).kind.name();
        let e = by.entry(&w.workload).or_default();
        e.0 += 1;
        if got == w.expect {
            e.1 += 1;
        } else {
            e.2.push(format!("{} at {}", got, w.features.t));
        }
    }
    let (n, right): (usize, usize) = by.values().fold((0, 0), |(n, r), e| (n + e.0, r + e.1));
    let report = format!("{by:?}");
    assert!(right * 100 >= n * 95, "{right} of {n} right: {report}");
    for (workload, (n, right, _)) in &by {
        assert!(right * 100 >= n * 80, "{workload}: {right} of {n}: {report}");
    }
    assert_eq!(by["idle"].1, by["idle"].0, "false verdicts on the idle host: {report}");
    let expected: std::collections::BTreeSet<&str> = windows.iter().map(|w| w.expect.as_str()).collect();
    for verdict in [
        "healthy",
        "cpu-busy-user",
        "cpu-busy-kernel",
        "io-bound",
        "lock-contention",
        "memory-pressure",
        "network-bound",
    ] {
        assert!(expected.contains(verdict), "the recording has no {verdict} window");
    }
}
