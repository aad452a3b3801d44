//! The network injector: a TCP relay adding a set one-way delay to every
//! chunk it forwards, in each direction — the storage injector's
//! counterpart for a server reached over the network (seed 003's switch
//! tiers). Each direction of a connection is a reader that stamps each
//! chunk with its arrival and a writer that sends it at arrival + delay: a
//! delay line, so back-to-back chunks are each delayed, not queued behind
//! one another's delay. The writer sleeps to an absolute deadline on the
//! monotonic clock and busy-waits the last 60 µs (a timer wakes tens of
//! microseconds late on a VM), so steps from tens of microseconds up are
//! honoured; [`calibrate`] measures what a step really adds.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

/// Chunks in flight per direction, at most (the reader waits beyond).
const IN_FLIGHT: usize = 4096;
/// The busy-wait before a deadline.
pub const SPIN: Duration = Duration::from_micros(60);

/// A running relay: connections to `local` go to the target, delayed.
#[derive(Debug)]
pub struct Relay {
    pub local: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Listens on `listen` (port 0: any) and relays each connection to `to`
    /// with `delay` added one way, each direction.
    pub fn start(listen: &str, to: SocketAddr, delay: Duration) -> std::io::Result<Relay> {
        let l = TcpListener::bind(listen)?;
        let local = l.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        std::thread::Builder::new().name("relay-accept".into()).spawn(move || {
            for c in l.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = c else { continue };
                match TcpStream::connect(to) {
                    Ok(server) => {
                        let _ = pipe_pair(client, server, delay);
                    }
                    Err(e) => tracing::warn!("relay: connect {to}: {e}"),
                }
            }
        })?;
        Ok(Relay { local, stop })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.local);
    }
}

fn pipe_pair(a: TcpStream, b: TcpStream, delay: Duration) -> std::io::Result<()> {
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    pipe(a.try_clone()?, b.try_clone()?, delay)?;
    pipe(b, a, delay)
}

/// One direction: `from` → `to`, each chunk at its arrival + `delay`.
fn pipe(mut from: TcpStream, to: TcpStream, delay: Duration) -> std::io::Result<()> {
    let (tx, rx): (SyncSender<(Instant, Vec<u8>)>, Receiver<_>) = sync_channel(IN_FLIGHT);
    std::thread::Builder::new().name("relay-read".into()).spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    })?;
    std::thread::Builder::new().name("relay-write".into()).spawn(move || {
        let mut to = to;
        for (due, chunk) in rx {
            wait_until(due);
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        // The reader saw the end: pass it on.
        let _ = to.shutdown(Shutdown::Write);
    })?;
    Ok(())
}

/// Sleeps to `due` less [`SPIN`], then spins to it.
pub fn wait_until(due: Instant) {
    let now = Instant::now();
    if due > now + SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}

/// An echo server on loopback for the calibration: each connection's bytes
/// back as they come.
fn echo() -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::Builder::new().name("relay-echo".into()).spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut r = c.try_clone().expect("clone");
                let mut w = c;
                let mut buf = [0u8; 512];
                while let Ok(n) = r.read(&mut buf) {
                    if n == 0 || w.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    })?;
    Ok(addr)
}

/// Round trips of 64 bytes to `addr`; their durations (ns), sorted.
fn round_trips(addr: SocketAddr, n: usize) -> std::io::Result<Vec<u64>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let msg = [7u8; 64];
    let mut back = [0u8; 64];
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 50 {
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        if i >= 50 {
            out.push(t.elapsed().as_nanos() as u64);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// What the relay adds one way at `delay`, measured: round trips through
/// it to an echo server, less round trips through a relay at zero, halved
/// — (p50, p99) in ns. The second value is the relay's own floor: a relay
/// at zero against the echo server direct, halved, p50.
pub fn calibrate(delay: Duration, n: usize) -> std::io::Result<((f64, f64), f64)> {
    let target = echo()?;
    let direct = round_trips(target, n)?;
    let zero = Relay::start("127.0.0.1:0", target, Duration::ZERO)?;
    let base = round_trips(zero.local, n)?;
    let with = Relay::start("127.0.0.1:0", target, delay)?;
    let got = round_trips(with.local, n)?;
    let q = crate::calibrate::quantile;
    let half = |a: u64, b: u64| (a as f64 - b as f64) / 2.0;
    Ok(((half(q(&got, 0.5), q(&base, 0.5)), half(q(&got, 0.99), q(&base, 0.99))), half(q(&base, 0.5), q(&direct, 0.5))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the relay guarantees holds on any machine: no round trip
    /// through it is shorter than the step twice (each direction waits to
    /// its deadline). How close above the step it lands depends on the
    /// scheduler — `lab latency` measures that; here only an order of
    /// magnitude off (a step queued behind another) fails.
    #[test]
    fn a_step_is_added_one_way_each_direction() {
        let step = Duration::from_micros(500);
        let target = echo().unwrap();
        let relay = Relay::start("127.0.0.1:0", target, step).unwrap();
        let got = round_trips(relay.local, 200).unwrap();
        assert!(got[0] >= 2 * step.as_nanos() as u64, "a round trip of {} ns through a {step:?} relay", got[0]);
        let ((p50, _), floor) = calibrate(step, 200).unwrap();
        assert!((0.0..10.0 * 500_000.0).contains(&p50), "asked 500 us one way, added {p50} ns");
        assert!(floor < 10.0 * 500_000.0, "the relay's own floor {floor} ns");
    }

    #[test]
    fn bytes_pass_unchanged_and_the_end_is_passed_on() {
        let target = echo().unwrap();
        let r = Relay::start("127.0.0.1:0", target, Duration::from_micros(100)).unwrap();
        let mut s = TcpStream::connect(r.local).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = s.try_clone().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&sent).unwrap();
            w.shutdown(Shutdown::Write).unwrap();
        });
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got, data);
    }
}
