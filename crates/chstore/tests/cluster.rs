//! The schema and the writer on a real ClickHouse 18.16 cluster: 2 shards ×
//! 2 replicas and ZooKeeper on loopback. A batch written twice is stored
//! once (the replicated tables deduplicate it), also through another
//! replica after one was killed; the tiers agree with the raw samples; an
//! insert below its quorum is refused and its resend stored once;
//! retention drops old days from every replica, one that was down included.

use std::time::Duration;

use chstore::local::{CLUSTER, LocalCluster};
use chstore::{Writer, series_id};
use codec::events::{EventBatch, MapInfo, ProcInfo};
use model::SeriesKey;

fn count(w: &Writer, sql: &str) -> u64 {
    w.client().query(sql).unwrap().trim().parse().unwrap()
}

#[test]
fn a_batch_sent_twice_is_stored_once_even_across_a_dead_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(dir.path(), 2, 2).unwrap();
    let w = Writer::open(&cluster.url("k"), Some(CLUSTER), Duration::from_secs(30)).unwrap();
    // Opening again finds the schema made and changes nothing.
    let w2 = Writer::open(&cluster.url("k"), Some(CLUSTER), Duration::from_secs(30)).unwrap();

    let keys: Vec<SeriesKey> = (0..50).map(|i| SeriesKey::new("m", [("host", "a"), ("i", &*i.to_string())])).collect();
    let batch = |round: u64| -> Vec<(u64, u64, f64)> {
        keys.iter().map(|k| (series_id(k), 1_700_000_000_000_000_000 + round * 100_000_000, round as f64)).collect()
    };
    w.write_series(&keys).unwrap();
    for round in 0..20 {
        w.write_samples(&batch(round)).unwrap();
    }
    // The same batches again, through the other writer: all deduplicated.
    for round in 0..20 {
        w2.write_samples(&batch(round)).unwrap();
    }
    assert_eq!(count(&w, "SELECT count() FROM k.samples"), 50 * 20);
    assert_eq!(count(&w, "SELECT uniqExact(id) FROM k.series"), 50);

    // One replica of each shard dies; new batches and resent ones go to the
    // other, and the resent ones are still recognised.
    let shard1 = cluster.nodes.iter().position(|n| n.shard == 1 && n.replica == 1).unwrap();
    cluster.kill(shard1);
    for round in 15..30 {
        w2.write_samples(&batch(round)).unwrap();
    }
    assert_eq!(count(&w2, "SELECT count() FROM k.samples"), 50 * 30);
    cluster.restart(shard1).unwrap();
    cluster.settle().unwrap();

    // Tiers: one 1 s bucket per 10 rounds, sums as the raw samples'.
    let raw = w
        .client()
        .query("SELECT intDiv(t, 1000000000) AS s, sum(v), count() FROM k.samples GROUP BY s ORDER BY s")
        .unwrap();
    let tier = w
        .client()
        .query("SELECT intDiv(t, 1000000000) AS s, sumMerge(sum), countMerge(count) FROM k.samples_1s GROUP BY s ORDER BY s")
        .unwrap();
    assert_eq!(raw, tier);
    assert_eq!(raw.lines().count(), 3);

    // Events with their chains and processes, twice: once.
    let stream = SeriesKey::new("perf_cpu_clock", [("host", "a"), ("boot", "b")]);
    let b = EventBatch {
        cpu: 1,
        time: vec![1_700_000_000_000_000_000, 1_700_000_000_000_100_000],
        pid: vec![7, 7],
        tid: vec![7, 8],
        ip: vec![0x401000, 0xffffffff81000000],
        chain: vec![0, 1],
        stacks: vec![vec![0x401000, 0x402000], vec![0xffffffff81000000]],
        procs: vec![ProcInfo {
            pid: 7,
            comm: "spin".into(),
            maps: vec![MapInfo {
                start: 0x400000,
                end: 0x500000,
                pgoff: 0,
                build_id: vec![1, 2, 3],
                path: "/bin/spin".into(),
            }],
        }],
    };
    assert_eq!(w.write_events(&stream, std::slice::from_ref(&b)).unwrap(), 2);
    assert_eq!(w2.write_events(&stream, std::slice::from_ref(&b)).unwrap(), 2);
    // (A read may go to a replica that has not fetched the newest part.)
    cluster.settle().unwrap();
    assert_eq!(count(&w, "SELECT count() FROM k.events"), 2);
    let frames = w
        .client()
        .query("SELECT e.tid, s.frames FROM k.events AS e GLOBAL ANY INNER JOIN (SELECT hash AS stack, frames FROM k.stacks) AS s USING stack ORDER BY e.tid")
        .unwrap();
    assert_eq!(frames, format!("7\t[{},{}]\n8\t[{}]\n", 0x401000, 0x402000, 0xffffffff81000000u64));
    assert_eq!(
        w.client().query("SELECT comm, map_path, length(map_build_id[1]) FROM k.procs").unwrap(),
        "spin\t['/bin/spin']\t3\n"
    );

    // Marks: the newest wins, whichever server asks.
    assert_eq!(w.mark("a'b", 9).unwrap(), 0);
    w.set_mark("a'b", 9, 4).unwrap();
    w2.set_mark("a'b", 9, 5).unwrap();
    assert_eq!(w.mark("a'b", 9).unwrap(), 5);

    // With a quorum of 2, an insert a shard cannot give two replicas is
    // refused (not acknowledged: the agent resends it); once the replica
    // is back the resend is stored, once.
    let mut wq = Writer::open(&cluster.url("k"), Some(CLUSTER), Duration::from_secs(30)).unwrap();
    wq.set_insert_quorum(2);
    wq.write_samples(&batch(30)).unwrap();
    cluster.kill(shard1);
    let refused = wq.write_samples(&batch(31));
    assert!(refused.is_err(), "an insert below its quorum was accepted");
    assert!(format!("{}", refused.unwrap_err()).contains("uorum"), "the error names the quorum");
    cluster.restart(shard1).unwrap();
    cluster.settle().unwrap();
    wq.write_samples(&batch(31)).unwrap();
    cluster.settle().unwrap();
    assert_eq!(count(&w, "SELECT count() FROM k.samples"), 50 * 32);
    assert_eq!(count(&w, "SELECT count() - uniqExact(series, t) FROM k.samples"), 0);

    // Retention: three days later, everything of the first day goes, a
    // partition at a time, also from a replica that was down when it was
    // decided; the newer day stays whole on every replica.
    let later = |round: u64| -> Vec<(u64, u64, f64)> {
        keys.iter().map(|k| (series_id(k), 1_700_259_200_000_000_000 + round * 100_000_000, round as f64)).collect()
    };
    for round in 0..10 {
        w.write_samples(&later(round)).unwrap();
    }
    cluster.settle().unwrap();
    cluster.kill(shard1);
    let cutoff = 1_700_259_200_000_000_000 - 86_400_000_000_000;
    // (The replica that is down makes ON CLUSTER wait; it carries the drop
    // out when it is back, and the answer may say it timed out.)
    let dropped = w.drop_before(cutoff, Duration::from_secs(1)).unwrap();
    let tables: std::collections::BTreeSet<&str> = dropped.dropped.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(tables.len(), 5, "{dropped:?}");
    cluster.restart(shard1).unwrap();
    cluster.settle().unwrap();
    let nodes: Vec<chstore::Client> = cluster
        .nodes
        .iter()
        .map(|n| {
            chstore::Client::new(
                chstore::Target::parse(&format!("clickhouse://{}/k", n.http())).unwrap(),
                Duration::from_secs(10),
            )
        })
        .collect();
    let old = format!("t < {cutoff}");
    let on = |c: &chstore::Client, table: &str, cond: &str| -> u64 {
        c.query(&format!("SELECT count() FROM k.{table}_local WHERE {cond}")).unwrap().trim().parse().unwrap()
    };
    chstore::local::wait("every replica to drop the old day", Duration::from_secs(60), || {
        nodes
            .iter()
            .all(|c| ["samples", "samples_1s", "samples_1m", "events", "procs"].iter().all(|t| on(c, t, &old) == 0))
    })
    .unwrap_or_else(|e| panic!("{e} (dropped {dropped:?})"));
    // The newer day: each replica holds its shard's rows, the two shards all.
    let new = format!("t >= {cutoff}");
    let per_node: Vec<u64> = nodes.iter().map(|c| on(c, "samples", &new)).collect();
    let shard_of = |i: usize| cluster.nodes[i].shard;
    let (s1, s2): (Vec<usize>, Vec<usize>) = (0..nodes.len()).partition(|&i| shard_of(i) == 1);
    assert_eq!(per_node[s1[0]], per_node[s1[1]], "shard 1's replicas differ: {per_node:?}");
    assert_eq!(per_node[s2[0]], per_node[s2[1]], "shard 2's replicas differ: {per_node:?}");
    assert_eq!(per_node[s1[0]] + per_node[s2[0]], 50 * 10, "{per_node:?}");
    // Run again (another server's job): nothing left to drop.
    assert_eq!(w.drop_before(cutoff, Duration::from_secs(30)).unwrap(), chstore::writer::Retained::default());
}
