//! The store at scale, for real: a ClickHouse 18.16 cluster of 2 shards ×
//! 2 replicas with ZooKeeper on loopback, two kansoku servers in front of
//! it, three agents listing both. Mid-run a shard stops answering (SIGSTOP)
//! so that batches are half written, one server is killed with batches in
//! flight, and a replica of the other shard is killed; the agents move to
//! the surviving server and resend. Afterwards every host's samples and
//! per-CPU events are in ClickHouse exactly once, without a hole, and the
//! replicated tables say they threw resent blocks away.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use chstore::local::{CLUSTER, LocalCluster};
use chstore::{Client, Target};
use common::{BIN, Killed, free_port, start, wait};

const HOSTS: [&str; 3] = ["ch-a", "ch-b", "ch-c"];

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([&format!("-{sig}"), &pid.to_string()]).status().unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// One number from ClickHouse.
fn number(ch: &Client, sql: &str) -> f64 {
    let text = ch.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    text.trim().parse().unwrap_or_else(|_| panic!("{sql}: {text:?}"))
}

/// The condition selecting `host`'s series.
fn of_host(host: &str) -> String {
    format!("series GLOBAL IN (SELECT id FROM k.series WHERE label_values[indexOf(label_names, 'host')] = '{host}')")
}

fn series_value(ch: &Client, name: &str, host: &str) -> f64 {
    number(
        ch,
        &format!(
            "SELECT argMax(v, t) FROM k.samples WHERE series GLOBAL IN (SELECT id FROM k.series WHERE name = '{name}' \
             AND label_values[indexOf(label_names, 'host')] = '{host}')"
        ),
    )
}

/// An agent, killed if the test fails before it is stopped.
fn agent(servers: &str, data: &Path, host: &str, log: &Path) -> Killed {
    let child = Command::new(BIN)
        .args(["agent", "--server", servers, "--host", host, "--interval", "100ms", "--batch", "500ms"])
        .args(["--ack-timeout", "2s", "--trace", "off", "--perf", "49"])
        .arg("--data")
        .arg(data)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    Killed(child)
}

/// SIGTERM, and the exit (the agent sends what it spooled first).
fn stop(child: &mut Killed, what: &str) {
    signal(child.0.id(), "TERM");
    let st = child.0.wait().unwrap();
    assert!(st.success(), "{what} exited with {st}");
}

/// The live tail of one server follows the hosts whose agents send to the
/// other server too (it polls ClickHouse): points in time order, each value
/// as ClickHouse holds it, every host seen.
fn live_tail_shows_every_server_s_agents(addr: &str, ch: &Client) {
    let mut live = common::Live::open(addr, "node_load1");
    let mut seen = std::collections::HashSet::new();
    let (mut last, mut checked) = (i64::MIN, 0);
    for _ in 0..2000 {
        let (t, values) = live.next_points();
        assert!(t > last, "live points out of time order: {t} after {last}");
        last = t;
        for (s, v) in live.series.iter().zip(&values) {
            let (Some(v), Some(host)) = (v, s["labels"]["host"].as_str()) else { continue };
            seen.insert(host.to_owned());
            if checked < 20 {
                let sql = format!(
                    "SELECT any(v) FROM k.samples WHERE t = {t} AND series GLOBAL IN (SELECT id FROM k.series \
                     WHERE name = 'node_load1' AND label_values[indexOf(label_names, 'host')] = '{host}')"
                );
                assert_eq!(number(ch, &sql), *v, "{host} at {t}: the tail against ClickHouse");
                checked += 1;
            }
        }
        if seen.len() == HOSTS.len() && checked >= 20 {
            return;
        }
    }
    panic!("the live tail showed only {seen:?}");
}

#[test]
fn two_servers_in_front_of_a_replicated_cluster_store_every_batch_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(&dir.path().join("clickhouse"), 2, 2).unwrap();
    let url = cluster.url("k");
    let ch = Client::new(Target::parse(&url).unwrap(), Duration::from_secs(60));

    let ingest = [free_port(), free_port(), free_port()].map(|p| format!("127.0.0.1:{p}"));
    let server = |i: usize, extra: &[&str]| {
        let mut args = vec![
            "server",
            "--listen",
            "127.0.0.1:0",
            "--ingest",
            &ingest[i],
            "--store",
            &url,
            "--cluster",
            CLUSTER,
            "--live-delay",
            "2s",
        ];
        args.extend_from_slice(extra);
        start(&args, &dir.path().join(format!("server{i}")))
    };
    let mut s1 = server(0, &[]);
    let s2 = server(1, &[]);
    let servers = [format!("{},{}", ingest[0], ingest[1]), format!("{},{}", ingest[1], ingest[0])];
    let mut agents: Vec<Killed> = HOSTS
        .iter()
        .enumerate()
        .map(|(i, h)| agent(&servers[i % 2], &dir.path().join(h), h, &dir.path().join(format!("{h}.log"))))
        .collect();
    let rounds = |host: &str| {
        number(
            &ch,
            &format!(
                "SELECT count() FROM k.samples WHERE series GLOBAL IN (SELECT id FROM k.series WHERE name = 'node_load1' \
                 AND label_values[indexOf(label_names, 'host')] = '{host}')"
            ),
        )
    };
    wait("every agent's first rounds", Duration::from_secs(60), || HOSTS.iter().all(|h| rounds(h) >= 10.0));
    live_tail_shows_every_server_s_agents(&s2.addr, &ch);

    // Shard 2 stops answering: inserts wait for it. One of the first
    // server's is in flight when that server is killed; ClickHouse carries
    // it out once the shard is back, and nobody acknowledges it.
    let shard2: Vec<u32> = cluster.nodes.iter().filter(|n| n.shard == 2).filter_map(|n| n.pid()).collect();
    for &pid in &shard2 {
        signal(pid, "STOP");
    }
    let coordinator = Client::new(
        Target::parse(&format!("clickhouse://{}/k", cluster.nodes[0].http())).unwrap(),
        Duration::from_secs(10),
    );
    let s1_inserts = format!(
        "SELECT count() FROM system.processes WHERE query_id LIKE 'kansoku-{}-%' AND query LIKE 'INSERT%'",
        s1.child.id()
    );
    wait("an insert of the first server in flight", Duration::from_secs(30), || {
        number(&coordinator, &s1_inserts) > 0.0
    });
    s1.child.kill().unwrap();
    s1.child.wait().unwrap();
    for &pid in &shard2 {
        signal(pid, "CONT");
    }
    // Every agent stores through the surviving server; then a replica of
    // shard 2 dies, and the agents go on.
    let through_s2 = |extra: f64| {
        let now: Vec<f64> = HOSTS.iter().map(|h| rounds(h)).collect();
        wait("rounds through the surviving server", Duration::from_secs(60), || {
            HOSTS.iter().zip(&now).all(|(h, n)| rounds(h) >= n + extra)
        });
    };
    through_s2(10.0);
    let replica = cluster.nodes.iter().position(|n| n.shard == 2 && n.replica == 1).unwrap();
    cluster.kill(replica);
    through_s2(10.0);
    for (a, h) in agents.iter_mut().zip(HOSTS) {
        stop(a, h);
    }
    drop(s2);
    cluster.restart(replica).unwrap();
    // Replication catches up: the parts the dead replica alone took.
    cluster.settle().unwrap();

    let mut stored_events = std::collections::HashMap::new();
    for host in HOSTS {
        let sel = of_host(host);
        let dup = number(&ch, &format!("SELECT count() - uniqExact(series, t) FROM k.samples WHERE {sel}"));
        assert_eq!(dup, 0.0, "{host}: samples stored twice");
        // The 100 ms grid has no hole but the rounds the collector missed.
        let grid = ch
            .query(&format!(
                "SELECT count(), min(t), max(t) FROM k.samples WHERE series GLOBAL IN (SELECT id FROM k.series \
                 WHERE name = 'node_load1' AND label_values[indexOf(label_names, 'host')] = '{host}')"
            ))
            .unwrap();
        let f: Vec<f64> = grid.split_whitespace().map(|x| x.parse().unwrap()).collect();
        let span = ((f[2] - f[1]) / 1e8).round() + 1.0;
        let missed = series_value(&ch, "kansoku_collector_missed_rounds_total", host)
            + series_value(&ch, "kansoku_collector_dropped_batches_total", host);
        assert!(span - f[0] <= missed, "{host}: {} rounds missing, the collector missed {missed}", span - f[0]);
        assert_eq!(series_value(&ch, "kansoku_agent_spool_dropped_samples_total", host), 0.0, "{host}: spool drops");
        // Per-CPU samples, each once.
        let stream = format!(
            "stream GLOBAL IN (SELECT id FROM k.series WHERE label_values[indexOf(label_names, 'host')] = '{host}')"
        );
        let events = number(&ch, &format!("SELECT count() FROM k.events WHERE {stream}"));
        let distinct = number(&ch, &format!("SELECT uniqExact(cpu, t, tid) FROM k.events WHERE {stream}"));
        assert!(events > 0.0, "{host}: no events stored");
        assert_eq!(events, distinct, "{host}: events stored twice");
        stored_events.insert(host, events as u64);
    }
    // A new server, its data directory empty, answers for every host from
    // the store alone: the servers hold no state of their own. Its rules
    // and verdicts read the agents' series there too (issue 46: rules saw
    // only the server's own series).
    let rules = dir.path().join("rules.yml");
    std::fs::write(
        &rules,
        "groups:\n- name: g\n  interval: 1s\n  rules:\n  - record: agents:node_load1:count\n    expr: count(count_over_time(node_load1[1h]))\n",
    )
    .unwrap();
    let s3 = server(2, &["--rules", rules.to_str().unwrap()]);
    let rule_value = || {
        let path = format!("/prometheus/api/v1/query?query={}", common::enc("agents:node_load1:count"));
        let (_, body) = common::http_get(&s3.addr, &path);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"][0]["value"][1].as_str().and_then(|x| x.parse::<f64>().ok())
    };
    wait("the recording rule over the agents' series", Duration::from_secs(30), || rule_value().is_some());
    assert_eq!(rule_value(), Some(HOSTS.len() as f64), "the rule counts every agent's series");
    // A verdict over each agent's series, read from ClickHouse: windows up to
    // the next whole minute (the agents' few seconds of data may lie in the
    // minute not yet over, which no finished window holds).
    let next_minute = (model::Timestamp::now().as_nanos() / 60_000_000_000 + 1) * 60;
    for host in HOSTS {
        let path = format!("/api/v1/diagnosis?host={host}&from={}&to={next_minute}&window=1m", next_minute - 3600);
        let (status, body) = common::http_get(&s3.addr, &path);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let known = v["windows"].as_array().unwrap().iter().filter(|w| w["verdict"] != "unknown").count();
        assert!(known > 0, "{host}: no verdict over the agent's series: {body}");
    }
    let end = number(&ch, "SELECT max(t) FROM k.samples") as i64;
    for host in HOSTS {
        let q = format!("count_over_time(node_load1{{host=\"{host}\"}}[1h])");
        let path = format!("/prometheus/api/v1/query?query={}&time={}", common::enc(&q), end as f64 / 1e9);
        let (status, body) = common::http_get(&s3.addr, &path);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let n: f64 = v["data"]["result"][0]["value"][1].as_str().unwrap().parse().unwrap();
        assert_eq!(n, rounds(host), "{host}: PromQL through a new server against SQL");
        // Profiles too, counted by ClickHouse: every stored event, once.
        for view in ["top", "flame", "timeline"] {
            let (status, body) = common::http_get(&s3.addr, &format!("/api/v1/profile/{view}?host={host}&since=1h"));
            assert_eq!(status, 200, "{view}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let n = match view {
                "timeline" => v["cpus"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|c| c["cells"].as_array().unwrap())
                    .filter_map(|c| c[2].as_u64())
                    .sum(),
                _ => v["samples"].as_u64().unwrap(),
            };
            if view == "top" {
                assert!(!v["rows"].as_array().unwrap().is_empty(), "{host}: an empty top table");
            }
            assert_eq!(n, stored_events[host], "{host}: the {view} profile through a new server against SQL");
        }
    }
    // The binaries the agents uploaded (to whichever server asked) are in
    // ClickHouse, and the new server took them from there to name frames.
    assert!(number(&ch, "SELECT count() FROM k.symbols") > 0.0, "no symbol source shared");
    let (_, status) = common::http_get(&s3.addr, "/api/v1/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(status["symbols"]["shared_fetched"].as_u64().unwrap() > 0, "{}", status["symbols"]);
    drop(s3);

    // The guarantee at work: resent blocks were recognised and dropped.
    let deduplicated: f64 = cluster
        .nodes
        .iter()
        .map(|n| {
            let c =
                Client::new(Target::parse(&format!("clickhouse://{}/k", n.http())).unwrap(), Duration::from_secs(5));
            number(&c, "SELECT sum(value) FROM system.events WHERE event = 'DuplicatedInsertedBlocks'")
        })
        .sum();
    assert!(deduplicated > 0.0, "no resent block was deduplicated: the test did not test it");
}
