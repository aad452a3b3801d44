//! The one round loop every [`Producer`] runs in: wake on each boundary of
//! its interval (absolute wall-clock time, `clock::schedule`), make a round,
//! hand the batch to the sink without waiting. What can go wrong is handled
//! here once for all of them: a round that overran skips the boundaries it
//! missed (counted, never made up, so nothing drifts); a wall clock stepped
//! back reschedules from the new time; a full queue drops the round
//! (counted) and carries its series declarations into the next batch, so
//! the producer's ids stay valid without it knowing; a sink that is gone
//! ends the loop. Beside it, two small producers: a component's figures
//! stored as series ([`ReportSeries`]) and work on every boundary that
//! stores nothing ([`Every`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::TrySendError;
use std::time::Duration;

use clock::schedule::{Wake, after_round, next_boundary};
use clock::{Clock, System};
use model::producer::{Producer, ReportFn};
use model::{Batch, SeriesKey, Sink, Timestamp};

/// Runs `p` until `stop` is set or `sink` is gone.
pub fn run(p: &mut dyn Producer, sink: &dyn Sink, stop: &AtomicBool) {
    run_on(&System, p, sink, stop);
}

/// [`run`] on `clock`: the system's, or in tests one they drive.
pub fn run_on(clock: &dyn Clock, p: &mut dyn Producer, sink: &dyn Sink, stop: &AtomicBool) {
    let interval = (p.interval().as_nanos() as i64).max(1);
    let mut carried: Vec<(u32, SeriesKey)> = Vec::new();
    let mut scheduled = next_boundary(clock.now_ns(), interval);
    if p.starts_at_once() {
        let first = p.round(Timestamp(clock.now_ns()), 0);
        if !send(p, sink, first, &mut carried) {
            return;
        }
    }
    while !stop.load(Ordering::Relaxed) {
        match clock.sleep_until(scheduled, interval, stop) {
            Wake::Reached => {}
            Wake::Stopped => break,
            Wake::ClockSteppedBack => {
                p.clock_stepped();
                scheduled = next_boundary(clock.now_ns(), interval);
                continue;
            }
        }
        let lateness = clock.now_ns() - scheduled;
        let batch = p.round(Timestamp(scheduled), lateness);
        if !send(p, sink, batch, &mut carried) {
            break;
        }
        let (next, missed) = after_round(scheduled, clock.now_ns(), interval);
        if missed > 0 {
            p.missed(missed);
        }
        scheduled = next;
    }
}

/// Runs `p` in the round loop on a thread of its own for its first `n`
/// batches and returns them: for tests and tools that want the rounds, not
/// a store.
pub fn first_batches(mut p: impl Producer + 'static, n: usize) -> Vec<Batch> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::sync_channel(n + 1);
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || run(&mut p, &tx, &stop))
    };
    let batches: Vec<Batch> = rx.iter().take(n).collect();
    stop.store(true, Ordering::Relaxed);
    thread.thread().unpark();
    thread.join().expect("the producer's thread panicked");
    batches
}

/// Hands `batch` to `sink` with the declarations of dropped rounds before
/// its own; false once the sink is gone.
fn send(p: &mut dyn Producer, sink: &dyn Sink, batch: Option<Batch>, carried: &mut Vec<(u32, SeriesKey)>) -> bool {
    let Some(mut batch) = batch else { return true };
    if !carried.is_empty() {
        carried.append(&mut batch.defs);
        batch.defs = std::mem::take(carried);
    }
    match sink.try_send(batch) {
        Ok(()) => true,
        Err(TrySendError::Full(b)) => {
            *carried = b.defs;
            p.dropped();
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

/// A component's figures stored as series (`prefix_key`, and `_total` for
/// counters, as `/metrics` names them) at every boundary: for components
/// with no thread of their own to put their figures in a batch (the
/// server's symbol store, its ClickHouse writer).
pub struct ReportSeries {
    pub name: &'static str,
    pub prefix: &'static str,
    pub interval: Duration,
    pub report: ReportFn,
    declared: bool,
}

impl std::fmt::Debug for ReportSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReportSeries({})", self.name)
    }
}

impl ReportSeries {
    pub fn new(name: &'static str, prefix: &'static str, interval: Duration, report: ReportFn) -> ReportSeries {
        ReportSeries { name, prefix, interval, report, declared: false }
    }
}

impl Producer for ReportSeries {
    fn name(&self) -> &'static str {
        self.name
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn report(&self) -> Option<ReportFn> {
        Some(Arc::clone(&self.report))
    }

    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        let figures = (self.report)();
        let mut b = Batch::new(t);
        if !self.declared {
            b.defs = figures
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let labels: Vec<(&str, &str)> = f.label.into_iter().collect();
                    (i as u32, SeriesKey::new(f.metric(self.prefix), labels))
                })
                .collect();
            self.declared = true;
        }
        b.points = figures.iter().enumerate().map(|(i, f)| (i as u32, f.as_f64())).collect();
        Some(b)
    }
}

/// Work done on every boundary that stores nothing (ClickHouse's
/// retention): a producer whose rounds are `work(t)`.
pub struct Every {
    pub name: &'static str,
    pub interval: Duration,
    pub work: Box<dyn FnMut(i64) + Send>,
}

impl std::fmt::Debug for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Every({})", self.name)
    }
}

impl Producer for Every {
    fn name(&self) -> &'static str {
        self.name
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn report(&self) -> Option<ReportFn> {
        None
    }

    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        (self.work)(t.0);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    /// Declares series `i` in round `i`, and stops itself after `n` rounds.
    struct Counting {
        made: u32,
        n: u32,
        dropped: u64,
        stop: std::sync::Arc<AtomicBool>,
    }

    impl Producer for Counting {
        fn name(&self) -> &'static str {
            "counting"
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(10)
        }
        fn report(&self) -> Option<model::producer::ReportFn> {
            None
        }
        fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
            let mut b = Batch::new(t);
            b.defs.push((self.made, SeriesKey::new("m", [("i", self.made.to_string())])));
            b.points.push((self.made, f64::from(self.made)));
            self.made += 1;
            if self.made == self.n {
                self.stop.store(true, Ordering::Relaxed);
            }
            Some(b)
        }
        fn dropped(&mut self) {
            self.dropped += 1;
        }
    }

    /// Rounds at the boundaries of a clock the test moves: each boundary
    /// reached is one round stamped with it, late by what the clock says;
    /// a round that overran (here: the clock moved on inside it) skips the
    /// boundaries it passed and counts them; a clock stepped back
    /// reschedules from the new time and is counted.
    #[test]
    fn rounds_follow_the_clock_skip_overruns_and_notice_steps_back() {
        const T0: i64 = 1_800_000_000_000_000_000;
        const IV: i64 = 10_000_000;
        struct Timed {
            clock: Arc<clock::Manual>,
            overrun_at: usize,
            made: Vec<(i64, i64)>,
            missed: u64,
            steps: u64,
        }
        impl Producer for Timed {
            fn name(&self) -> &'static str {
                "timed"
            }
            fn interval(&self) -> Duration {
                Duration::from_nanos(IV as u64)
            }
            fn report(&self) -> Option<ReportFn> {
                None
            }
            fn round(&mut self, t: Timestamp, lateness_ns: i64) -> Option<Batch> {
                self.made.push((t.0, lateness_ns));
                if self.made.len() == self.overrun_at {
                    self.clock.advance(3 * IV); // this round took three intervals
                }
                Some(Batch::new(t))
            }
            fn missed(&mut self, n: u64) {
                self.missed += n;
            }
            fn clock_stepped(&mut self) {
                self.steps += 1;
            }
        }
        let clock = Arc::new(clock::Manual::new(T0 + 5));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel::<Batch>(16);
        let p = Timed { clock: Arc::clone(&clock), overrun_at: 2, made: Vec::new(), missed: 0, steps: 0 };
        let runner = {
            let (clock, stop) = (Arc::clone(&clock), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut p = p;
                run_on(&*clock, &mut p, &tx, &stop);
                p
            })
        };
        assert_eq!(clock.sleeping(), T0 + IV);
        clock.set(T0 + IV + 7); // the first boundary, 7 ns late
        assert_eq!(rx.recv().unwrap().time, Timestamp(T0 + IV));
        assert_eq!(clock.sleeping(), T0 + 2 * IV);
        clock.set(T0 + 2 * IV); // the second round overruns to T0 + 5 IV
        assert_eq!(rx.recv().unwrap().time, Timestamp(T0 + 2 * IV));
        assert_eq!(clock.sleeping(), T0 + 6 * IV, "3, 4 and 5 IV were passed");
        clock.set(T0 + 6 * IV);
        assert_eq!(rx.recv().unwrap().time, Timestamp(T0 + 6 * IV));
        assert_eq!(clock.sleeping(), T0 + 7 * IV);
        clock.set(T0 - 10 * IV); // stepped back ten intervals' worth
        assert_eq!(clock.sleeping(), T0 - 9 * IV, "rescheduled from the new time");
        clock.set(T0 - 9 * IV);
        assert_eq!(rx.recv().unwrap().time, Timestamp(T0 - 9 * IV));
        stop.store(true, Ordering::Relaxed);
        let p = runner.join().unwrap();
        assert_eq!(p.made[0], (T0 + IV, 7));
        assert_eq!((p.missed, p.steps), (3, 1));
    }

    /// A queue with room for one: the rounds that find it full are dropped
    /// and counted, and the next batch that gets through declares every
    /// series the dropped ones did, in order.
    #[test]
    fn a_dropped_round_s_declarations_ride_on_the_next_batch() {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut p = Counting { made: 0, n: 4, dropped: 0, stop: std::sync::Arc::clone(&stop) };
        let (tx, rx) = sync_channel::<Batch>(1);
        run(&mut p, &tx, &stop);
        assert_eq!(p.dropped, 3, "the queue held the first round only");
        let first = rx.try_recv().unwrap();
        assert_eq!(first.defs.len(), 1);

        // Again with room: the carried declarations lead the next batch.
        let mut carried = vec![(1, SeriesKey::new("m", [("i", "1")])), (2, SeriesKey::new("m", [("i", "2")]))];
        let mut b = Batch::new(Timestamp(5));
        b.defs.push((3, SeriesKey::new("m", [("i", "3")])));
        let (tx, rx) = sync_channel::<Batch>(1);
        assert!(send(&mut p, &tx, Some(b), &mut carried));
        let got = rx.try_recv().unwrap();
        assert_eq!(got.defs.iter().map(|d| d.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(carried.is_empty());
        drop(rx);
        assert!(!send(&mut p, &tx, Some(Batch::new(Timestamp(6))), &mut carried), "a sink that is gone ends the loop");
    }
}
