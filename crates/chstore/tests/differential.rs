//! The same samples into the embedded store and into ClickHouse (one real
//! 18.16 server, plain MergeTree tables), the same questions to both —
//! PromQL range queries (raw and over the tiers) and the range API — and
//! the same answers (to 12 significant digits where tier sums enter them:
//! see `close`).

use std::time::Duration;

use chstore::local::LocalCluster;
use chstore::{Writer, series_id};
use model::{Batch, Selector, SeriesKey, Timestamp};
use store::query::{Agg, RangeQuery};

const T0: i64 = 1_700_000_000_000_000_000;
const STEP: i64 = 100_000_000;
const ROUNDS: i64 = 12_000; // 20 minutes at 10 Hz

fn keys() -> Vec<SeriesKey> {
    let mut keys = Vec::new();
    for host in ["a", "b"] {
        for cpu in ["0", "1"] {
            for mode in ["user", "system"] {
                keys.push(SeriesKey::new("node_cpu_seconds_total", [("host", host), ("cpu", cpu), ("mode", mode)]));
            }
        }
        keys.push(SeriesKey::new("node_load1", [("host", host)]));
    }
    keys
}

/// A round's value of series `i`: counters that grow by hundredths (and
/// reset once), gauges that swing.
fn value(i: usize, round: i64) -> f64 {
    if i % 5 == 4 {
        ((round as f64 / 300.0).sin() * 100.0).round() / 100.0 + 1.0
    } else {
        let r = if i == 1 && round > ROUNDS / 2 { round - ROUNDS / 2 } else { round };
        (r * (i as i64 + 1)) as f64 / 100.0
    }
}

/// Equal gaps and values equal to 12 significant digits: the embedded
/// store rounds a tier's sums to its samples' decimals, ClickHouse adds
/// floats in its own order; the two differ in the last bits of some sums.
fn close(a: &[Option<f64>], b: &[Option<f64>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            (None, None) => true,
            _ => false,
        })
}

#[test]
fn promql_and_the_range_api_answer_alike_from_either_store() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(&dir.path().join("ch"), 1, 1).unwrap();
    let writer = Writer::open(&cluster.url("d"), None, Duration::from_secs(60)).unwrap();
    let embedded = store::Store::open(&dir.path().join("store"), store::Options::default()).unwrap();
    let keys = keys();

    let mut app = store::Appender::default();
    writer.write_series(&keys).unwrap();
    let mut rows = Vec::new();
    for round in 0..ROUNDS {
        let time = Timestamp(T0 + round * STEP);
        let defs = if round == 0 {
            keys.iter().cloned().enumerate().map(|(i, k)| (i as u32, k)).collect()
        } else {
            Vec::new()
        };
        let points: Vec<(u32, f64)> = (0..keys.len()).map(|i| (i as u32, value(i, round))).collect();
        rows.extend(points.iter().map(|&(i, v)| (series_id(&keys[i as usize]), time.as_nanos() as u64, v)));
        embedded.append(&mut app, &Batch { time, defs, points }).unwrap();
        if rows.len() >= 100_000 || round == ROUNDS - 1 {
            writer.write_samples(&rows).unwrap();
            rows.clear();
        }
    }
    let ch = writer.reader();

    let (start, end) = (T0 + 60_000_000_000, T0 + (ROUNDS - 1) * STEP);
    let exprs = [
        ("node_load1", 15_000_000_000),
        ("rate(node_cpu_seconds_total[1m])", 30_000_000_000),
        ("sum by (host) (rate(node_cpu_seconds_total{mode=\"user\"}[30s]))", 10_000_000_000),
        ("increase(node_cpu_seconds_total{cpu=\"0\"}[5m])", 60_000_000_000),
        ("avg_over_time(node_load1[10m])", 60_000_000_000),
        ("max_over_time(node_load1[10m]) - min_over_time(node_load1[10m])", 60_000_000_000),
        ("count_over_time(node_load1{host=\"b\"}[5m])", 60_000_000_000),
        ("topk(2, node_load1)", 7_000_000_000),
        ("quantile(0.9, rate(node_cpu_seconds_total[1m]))", 20_000_000_000),
        ("node_load1 > 1.5", 5_000_000_000),
    ];
    for (q, step) in exprs {
        let a = promql::Engine::new(&embedded).range(q, start, end, step).unwrap();
        let b = promql::Engine::new(&ch).range(q, start, end, step).unwrap();
        assert_eq!(a.times, b.times, "{q}");
        let (promql::Value::Vector(mut a), promql::Value::Vector(mut b)) = (a.value, b.value) else {
            panic!("{q}: not vectors")
        };
        // (Series come in no defined order; the API sorts them.)
        a.sort_by(|x, y| x.labels.cmp(&y.labels));
        b.sort_by(|x, y| x.labels.cmp(&y.labels));
        assert_eq!(a.len(), b.len(), "{q}: series");
        assert!(!a.is_empty(), "{q}: no series");
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.labels, y.labels, "{q}");
            assert!(close(&x.points, &y.points), "{q} {:?}:\n{:?}\n{:?}", x.labels, x.points, y.points);
        }
    }
    let every = vec![Agg::Avg, Agg::Min, Agg::Max, Agg::Last, Agg::Count];
    // Raw samples; buckets from the 1 s and 1 min tiers; raw buckets of
    // 300 ms (which ClickHouse computes itself, one GROUP BY for all).
    for (points, aggs) in
        [(None, vec![]), (Some(600), every[..3].to_vec()), (Some(20), vec![Agg::Avg]), (Some(4000), every)]
    {
        for (sel, rate) in [("node_load1", false), ("node_cpu_seconds_total{host=\"a\"}", true)] {
            let q = RangeQuery {
                selector: Selector::parse(sel).unwrap(),
                from: Timestamp(start),
                to: Timestamp(end),
                step_ns: None,
                points,
                rate,
                aggs: aggs.clone(),
                group: None,
            };
            let a = store::query::range(&embedded, &q).unwrap();
            let b = store::query::range(&ch, &q).unwrap();
            assert_eq!((&a.times, a.step_ns), (&b.times, b.step_ns), "{sel} over {points:?} buckets");
            assert_eq!(a.series.len(), b.series.len());
            for (x, y) in a.series.iter().zip(&b.series) {
                assert_eq!((&x.key, x.agg), (&y.key, y.agg), "{sel}");
                assert!(close(&x.values, &y.values), "{sel} {}:\n{:?}\n{:?}", x.key, x.values, y.values);
            }
        }
    }
    assert_eq!(ch.read_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    // The raw buckets were ClickHouse's: two range queries, one query each.
    let q = RangeQuery {
        selector: Selector::parse("node_cpu_seconds_total").unwrap(),
        from: Timestamp(start),
        to: Timestamp(end),
        step_ns: Some(300_000_000),
        points: None,
        rate: false,
        aggs: vec![Agg::Max],
        group: None,
    };
    let before = ch.queries.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(store::query::range(&ch, &q).unwrap(), store::query::range(&embedded, &q).unwrap());
    assert_eq!(ch.queries.load(std::sync::atomic::Ordering::Relaxed) - before, 1, "one GROUP BY for 8 series");
    // PromQL reads a selector's series in one query too.
    let before = ch.queries.load(std::sync::atomic::Ordering::Relaxed);
    promql::Engine::new(&ch).range("sum(rate(node_cpu_seconds_total[1m]))", start, end, 30_000_000_000).unwrap();
    assert_eq!(ch.queries.load(std::sync::atomic::Ordering::Relaxed) - before, 1, "one SELECT for 8 series");
}

/// Event batches of `cpus` CPUs over `seconds`, one a CPU a second, 1 kHz:
/// a few processes, ips from a small set, call chains in every other
/// second's batches (the rest chainless, as a sampler without `-g` sends).
fn event_batches(cpus: u32, seconds: i64) -> Vec<codec::events::EventBatch> {
    use codec::events::{EventBatch, MapInfo, ProcInfo};
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let mut out = Vec::new();
    for s in 0..seconds {
        for cpu in 0..cpus {
            let mut b = EventBatch { cpu, ..EventBatch::default() };
            let chains = s % 2 == 0;
            for i in 0..1000 {
                b.time.push(T0 + s * 1_000_000_000 + i * 1_000_000 + i64::from(cpu));
                let pid = [0, 100, 101, 102][next(4) as usize];
                b.pid.push(pid);
                b.tid.push(pid + next(2) as u32);
                let ip = 0x40_0000 + next(40) * 16;
                b.ip.push(ip);
                if chains {
                    let depth = 1 + next(4) as usize;
                    let mut stack = vec![ip];
                    stack.extend((1..depth).map(|d| 0x50_0000 + d as u64 * 0x100 + next(3)));
                    let at = b.stacks.iter().position(|st| *st == stack).unwrap_or_else(|| {
                        b.stacks.push(stack);
                        b.stacks.len() - 1
                    });
                    b.chain.push(at as u32);
                }
            }
            // Process 102 is renamed halfway: the newest name wins.
            for pid in [100u32, 101, 102] {
                let comm = if pid == 102 && s >= seconds / 2 { "renamed".to_owned() } else { format!("p{pid}") };
                let maps = vec![MapInfo {
                    start: 0x40_0000,
                    end: 0x60_0000,
                    pgoff: 0x1000,
                    build_id: vec![pid as u8, 0xab, 0xcd],
                    path: format!("/usr/bin/p{pid}"),
                }];
                b.procs.push(ProcInfo { pid, comm, maps });
            }
            out.push(b);
        }
    }
    out
}

#[test]
fn profiles_count_alike_from_either_store() {
    use source::EventQuery;
    use source::{EventSource, Shape};

    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(&dir.path().join("ch"), 1, 1).unwrap();
    let writer = Writer::open(&cluster.url("e"), None, Duration::from_secs(60)).unwrap();
    let embedded = store::Store::open(&dir.path().join("store"), store::Options::default()).unwrap();
    let streams = [
        SeriesKey::new("perf_cpu_clock", [("host", "a"), ("boot", "boot-a")]),
        SeriesKey::new("perf_cpu_clock", [("host", "b")]),
    ];
    for (i, stream) in streams.iter().enumerate() {
        let mut batches = event_batches(3 + i as u32, 20);
        writer.write_events(stream, &batches).unwrap();
        for b in &mut batches {
            embedded.events().append(stream, b, codec::events::Encoding::Fast).unwrap();
        }
    }
    let ch = writer.reader();
    let sec = 1_000_000_000;
    for host in ["a", "b"] {
        // The whole range, and one that starts and ends inside batches.
        for (from, to) in [(T0, T0 + 20 * sec), (T0 + 3 * sec + 400_000_000, T0 + 13 * sec + 250_000_000)] {
            for cpus in [vec![], vec![1]] {
                for pid in [None, Some(102)] {
                    for shape in [Shape::Ips, Shape::Stacks, Shape::Timeline { buckets: 37 }] {
                        let q = EventQuery {
                            streams: Selector::parse(&format!("{{__name__=\"perf_cpu_clock\",host=\"{host}\"}}"))
                                .unwrap(),
                            cpus: cpus.clone(),
                            from,
                            to,
                        };
                        let what = format!("{host} {from}..{to} cpus {cpus:?} pid {pid:?} {shape:?}");
                        let a = embedded.count(&q, pid, shape, u64::MAX).unwrap();
                        let b = ch.count(&q, pid, shape, u64::MAX).unwrap();
                        assert!(a.events > 0, "{what}: nothing counted");
                        assert_eq!(a.events, b.events, "{what}");
                        assert_eq!(a.ips, b.ips, "{what}");
                        assert_eq!(a.stacks, b.stacks, "{what}");
                        assert_eq!(a.with_chains, b.with_chains, "{what}");
                        assert_eq!(a.cells, b.cells, "{what}");
                        assert_eq!(a.boots.iter().max(), b.boots.iter().max(), "{what}");
                        // The process tables name the counted processes alike:
                        // the newest description of each.
                        let newest = |procs: &[codec::events::ProcInfo]| {
                            procs
                                .iter()
                                .filter(|p| pid.is_none_or(|want| want == p.pid))
                                .map(|p| (p.pid, p.clone()))
                                .collect::<std::collections::BTreeMap<_, _>>()
                        };
                        assert_eq!(newest(&a.procs), newest(&b.procs), "{what}");
                    }
                }
            }
        }
    }
    assert_eq!(ch.read_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
}
