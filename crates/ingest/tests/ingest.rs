//! The ingest server in-process, spoken to frame by frame: a frame that
//! arrives slowly while the server's clock probes fire is read whole; a
//! batch resent after reconnecting is acknowledged and not stored twice.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ingest::{Ingest, ServerConfig};
use model::{Batch, SeriesKey, Timestamp};
use store::{Options, Store};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use wire::{Hello, Msg};

fn hello(spool_id: u64) -> Msg {
    Msg::Hello(Hello {
        version: wire::VERSION,
        host: "h".into(),
        agent_version: "test".into(),
        spool_id,
        token: String::new(),
        interval_ns: 100_000_000,
        batch_ns: 1_000_000_000,
    })
}

fn rounds(t0: i64, n_series: u32) -> Vec<u8> {
    let rounds: Vec<Batch> = (0..10)
        .map(|r| Batch {
            time: Timestamp(t0 + r * 100_000_000),
            defs: Vec::new(),
            points: (0..n_series).map(|i| (i, f64::from(i) * 1.5 + r as f64 / 7.0)).collect(),
        })
        .collect();
    let mut body = Vec::new();
    wire::rounds::encode(&rounds, wire::rounds::Codec::None, &mut body);
    body
}

async fn start(dir: &std::path::Path, cfg: ServerConfig) -> (Arc<Ingest>, String) {
    let store = Arc::new(Store::open(dir, Options::default()).unwrap());
    let ingest = Arc::new(Ingest::new(store, tokio::sync::broadcast::channel(16).0, cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(Arc::clone(&ingest).serve(listener, rx));
    std::mem::forget(_tx);
    (ingest, addr)
}

/// Reads frames until one that is not a Ping; returns it.
async fn next(frames: &mut link::net::Frames) -> Msg {
    loop {
        match frames.recv().await.expect("stream open").expect("frame") {
            (Msg::Ping { .. }, _) => continue,
            (m, _) => return m,
        }
    }
}

async fn connect(
    addr: &str,
    spool_id: u64,
    n_series: u32,
) -> (link::net::Frames, impl Drop, tokio::io::WriteHalf<TcpStream>, u64) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (rd, mut wr) = tokio::io::split(tcp);
    let (mut frames, guard) = link::net::spawn_reader(rd, wire::FRAME_MAX);
    let mut out = Vec::new();
    hello(spool_id).encode(&mut out);
    let defs = (0..n_series).map(|i| (i, SeriesKey::new("m", [("i", i.to_string())]))).collect();
    Msg::Series(defs).encode(&mut out);
    wr.write_all(&out).await.unwrap();
    let Msg::Welcome { next_seq, .. } = next(&mut frames).await else { panic!("no welcome") };
    (frames, guard, wr, next_seq)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_frame_survives_clock_probes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = ServerConfig { ping_every: Duration::from_millis(1), ..ServerConfig::default() };
    let (ingest, addr) = start(dir.path(), cfg).await;
    let (mut frames, _g, mut wr, next_seq) = connect(&addr, 7, 300).await;
    assert_eq!(next_seq, 1);
    let mut frame = Vec::new();
    Msg::Rounds { seq: 1, body: rounds(1_000_000_000_000, 300) }.encode(&mut frame);
    assert!(frame.len() > 20_000);
    // Trickle it: after each piece but the last, wait until the server has
    // sent a clock probe, so probes certainly fire while the frame is half
    // read. (After the last piece the ack may come before any probe.)
    let (head, last) = frame.split_at(frame.len() - 1);
    for chunk in head.chunks(700) {
        wr.write_all(chunk).await.unwrap();
        wr.flush().await.unwrap();
        match frames.recv().await.expect("stream open").expect("frame") {
            (Msg::Ping { .. }, _) => {}
            (m, _) => panic!("{m:?} before the frame was whole"),
        }
    }
    wr.write_all(last).await.unwrap();
    wr.flush().await.unwrap();
    assert_eq!(next(&mut frames).await, Msg::Ack { seq: 1 });
    assert_eq!(ingest.stats.samples.load(Ordering::Relaxed), 3000);
    assert_eq!(ingest.stats.rejected_protocol.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_batch_is_acknowledged_not_stored_again() {
    let dir = tempfile::tempdir().unwrap();
    let (ingest, addr) = start(dir.path(), ServerConfig::default()).await;
    let body1 = rounds(1_000_000_000_000, 20);
    let body2 = rounds(1_001_000_000_000, 20);
    {
        let (mut frames, _g, mut wr, next_seq) = connect(&addr, 9, 20).await;
        assert_eq!(next_seq, 1);
        let mut out = Vec::new();
        Msg::Rounds { seq: 1, body: body1.clone() }.encode(&mut out);
        wr.write_all(&out).await.unwrap();
        assert_eq!(next(&mut frames).await, Msg::Ack { seq: 1 });
    }
    // The ack was "lost": the agent reconnects and sends batch 1 again, then 2.
    let (mut frames, _g, mut wr, next_seq) = connect(&addr, 9, 20).await;
    assert_eq!(next_seq, 2, "the server says what it has");
    let mut out = Vec::new();
    Msg::Rounds { seq: 1, body: body1 }.encode(&mut out);
    Msg::Rounds { seq: 2, body: body2 }.encode(&mut out);
    wr.write_all(&out).await.unwrap();
    assert_eq!(next(&mut frames).await, Msg::Ack { seq: 1 });
    assert_eq!(next(&mut frames).await, Msg::Ack { seq: 2 });
    assert_eq!(ingest.stats.duplicate_batches.load(Ordering::Relaxed), 1);
    assert_eq!(ingest.stats.samples.load(Ordering::Relaxed), 400);
    assert_eq!(ingest.store.stats().late_samples.load(Ordering::Relaxed), 0);
    // A different spool of the same host starts from 1.
    let (_f, _g2, _w, next_seq) = connect(&addr, 10, 20).await;
    assert_eq!(next_seq, 1);
}

/// Events stored with their mark but not (yet) the series mark — as a crash
/// between the two left it once — are not stored again: the server resumes
/// after the event log's mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stored_before_a_crash_are_recognised_by_their_mark() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), Options::default()).unwrap();
        let mut b = codec::events::EventBatch { cpu: 0, ..Default::default() };
        b.push(1_700_000_000_000_000_000, 1, 1, 0x1000);
        let mut enc = Vec::new();
        b.encode(&mut enc, codec::events::Encoding::Fast);
        let mark = SeriesKey::new("kansoku_ingest_seq", [("host", "h"), ("spool", &format!("{:016x}", 9u64))]);
        let stream = SeriesKey::new("perf_cpu_clock", [("host", "h")]);
        store.events().append_encoded_marked(&stream, &[enc], Some((&mark, 5))).unwrap();
        store.close().unwrap();
    }
    let (_ingest, addr) = start(dir.path(), ServerConfig::default()).await;
    let (_frames, _guard, _wr, next_seq) = connect(&addr, 9, 1).await;
    assert_eq!(next_seq, 6, "batch 5 is stored; the agent resumes after it");
}

/// Sockets that never say hello hold no agent's slot: with room for two
/// agents and thirty idle sockets open, an agent still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_cannot_lock_agents_out() {
    let dir = tempfile::tempdir().unwrap();
    let (ingest, addr) = start(dir.path(), ServerConfig { max_connections: 2, ..ServerConfig::default() }).await;
    let mut idle = Vec::new();
    for _ in 0..30 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let (_f, _g, _w, next_seq) = connect(&addr, 1, 3).await;
    assert_eq!(next_seq, 1);
    let (_f2, _g2, _w2, _) = connect(&addr, 2, 3).await;
    // A third authenticated agent is refused: the limit is on agents.
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let (rd, mut wr) = tokio::io::split(tcp);
    let (mut frames, _g3) = link::net::spawn_reader(rd, wire::FRAME_MAX);
    let mut out = Vec::new();
    hello(3).encode(&mut out);
    wr.write_all(&out).await.unwrap();
    assert_eq!(next(&mut frames).await, Msg::Reject { reason: "too many connections".into() });
    assert_eq!(ingest.stats.rejected_limits.load(Ordering::Relaxed), 1);
    drop(idle);
}

/// `max_series_per_agent` bounds the new series of a host over all its
/// connections, not per connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_series_limit_is_per_host_across_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (ingest, addr) = start(dir.path(), ServerConfig { max_series_per_agent: 10, ..ServerConfig::default() }).await;
    let declare = |name: &'static str| {
        let addr = addr.clone();
        async move {
            let tcp = TcpStream::connect(&addr).await.unwrap();
            let (rd, mut wr) = tokio::io::split(tcp);
            let (mut frames, guard) = link::net::spawn_reader(rd, wire::FRAME_MAX);
            let mut out = Vec::new();
            hello(u64::from(name.as_bytes()[0])).encode(&mut out);
            Msg::Series((0..8).map(|i| (i, SeriesKey::new(name, [("i", i.to_string())]))).collect()).encode(&mut out);
            wr.write_all(&out).await.unwrap();
            let Msg::Welcome { .. } = next(&mut frames).await else { panic!("no welcome") };
            (frames, guard, wr)
        }
    };
    let (mut f1, _g1, mut w1) = declare("a").await;
    // Its eight series are taken (a batch of them acknowledged) before the
    // second connection declares eight more.
    let mut out = Vec::new();
    Msg::Rounds { seq: 1, body: rounds(1_000_000_000_000, 8) }.encode(&mut out);
    w1.write_all(&out).await.unwrap();
    assert_eq!(next(&mut f1).await, Msg::Ack { seq: 1 });
    let (mut f2, _g2, _w2) = declare("b").await;
    let Msg::Reject { reason } = next(&mut f2).await else { panic!("eight more new series were taken") };
    assert!(reason.contains("more than 10 new series from host \"h\""), "{reason}");
    assert_eq!(ingest.stats.rejected_limits.load(Ordering::Relaxed), 1);
}
