//! When to sample: absolute boundaries of the interval in wall-clock time, so
//! every host with the same interval samples the same instant. Pure integer
//! arithmetic on nanoseconds; the collector feeds it the clock. The one
//! impure function, [`sleep_until`], sleeps to a wall-clock deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::realtime_ns;

/// The first boundary strictly after `now_ns`.
pub fn next_boundary(now_ns: i64, interval_ns: i64) -> i64 {
    assert!(interval_ns > 0, "BUG: interval must be positive");
    (now_ns.div_euclid(interval_ns) + 1) * interval_ns
}

/// After a round scheduled at `scheduled_ns` finished at `now_ns`: the next
/// boundary to sample and the number of boundaries skipped. A round that ends
/// after the following boundary has overrun; we never sample late to catch up
/// (that would drift), we skip to the next boundary ahead and count the misses.
pub fn after_round(scheduled_ns: i64, now_ns: i64, interval_ns: i64) -> (i64, u64) {
    let following = scheduled_ns + interval_ns;
    if now_ns < following {
        return (following, 0);
    }
    let next = next_boundary(now_ns, interval_ns);
    (next, ((next - following) / interval_ns) as u64)
}

/// Longest single sleep: a stop request is noticed within this time even
/// at a 60 s interval (at once where the stopper unparks the thread, as
/// `node::pipelines` does), and so is a wall clock stepped back. Each slice is a
/// wake-up (~44 µs of CPU on a VM): at 100 ms slices a producer running
/// every second woke ten times for one round.
const SLEEP_SLICE_NS: i64 = 1_000_000_000;

/// How a sleep to a boundary ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    Reached,
    Stopped,
    /// The wall clock stepped back (NTP, an operator): the boundary is now
    /// further away than any sleep to it could have been. Reschedule.
    ClockSteppedBack,
}

/// Whether a boundary `deadline_ns` can only be this far ahead of `now_ns`
/// because the wall clock stepped back: a sleep never starts more than one
/// interval before its boundary, so beyond two the clock moved.
pub fn clock_stepped_back(deadline_ns: i64, now_ns: i64, interval_ns: i64) -> bool {
    deadline_ns - now_ns > 2 * interval_ns
}

/// Sleeps until wall-clock `deadline_ns`. Sleeps in slices of at most
/// [`SLEEP_SLICE_NS`] on CLOCK_MONOTONIC, each recomputed from the wall
/// clock: an absolute CLOCK_REALTIME sleep would follow a clock stepped back
/// by an hour and stall sampling for that hour. Returns early if `stop` is
/// set or the clock stepped back. The sleep is a park (a futex wait to an
/// absolute CLOCK_MONOTONIC time, as precise as `clock_nanosleep`), so
/// whoever sets `stop` can end it at once with `Thread::unpark`; any other
/// wake-up just sleeps again.
pub fn sleep_until(deadline_ns: i64, interval_ns: i64, stop: &AtomicBool) -> Wake {
    loop {
        if stop.load(Ordering::Relaxed) {
            return Wake::Stopped;
        }
        let now = realtime_ns();
        if now >= deadline_ns {
            return Wake::Reached;
        }
        if clock_stepped_back(deadline_ns, now, interval_ns) {
            return Wake::ClockSteppedBack;
        }
        let slice = (deadline_ns - now).min(SLEEP_SLICE_NS);
        std::thread::park_timeout(std::time::Duration::from_nanos(slice as u64));
    }
}

/// Runs `round(t)` at every boundary `t` of the interval until `stop` is
/// set or `round` returns false: the lab's floor measurements, whose rounds
/// borrow local state. Producers run in `node::rounds`, which adds their
/// hooks (drops, missed rounds, a clock to drive). A round that overruns skips the
/// boundaries it missed, counted into `missed`; a clock stepped back
/// reschedules from the new time.
pub fn every(interval_ns: i64, stop: &AtomicBool, missed: &AtomicU64, mut round: impl FnMut(i64) -> bool) {
    let mut scheduled = next_boundary(realtime_ns(), interval_ns);
    while !stop.load(Ordering::Relaxed) {
        match sleep_until(scheduled, interval_ns, stop) {
            Wake::Reached => {}
            Wake::Stopped => break,
            Wake::ClockSteppedBack => {
                scheduled = next_boundary(realtime_ns(), interval_ns);
                continue;
            }
        }
        if !round(scheduled) {
            break;
        }
        let (next, n) = after_round(scheduled, realtime_ns(), interval_ns);
        missed.fetch_add(n, Ordering::Relaxed);
        scheduled = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn boundaries_are_absolute() {
        assert_eq!(next_boundary(1_000 * MS + 1, 100 * MS), 1_100 * MS);
        assert_eq!(next_boundary(1_000 * MS, 100 * MS), 1_100 * MS);
        assert_eq!(next_boundary(1_099 * MS, 100 * MS), 1_100 * MS);
        assert_eq!(next_boundary(-1, 10 * MS), 0);
    }

    #[test]
    fn overruns_skip_and_count() {
        // Round at t=1000 ms finished at 1030: on time.
        assert_eq!(after_round(1_000 * MS, 1_030 * MS, 100 * MS), (1_100 * MS, 0));
        // Finished exactly on the following boundary: that boundary is gone.
        assert_eq!(after_round(1_000 * MS, 1_100 * MS, 100 * MS), (1_200 * MS, 1));
        // Finished at 1350: 1100, 1200, 1300 are missed; next is 1400.
        assert_eq!(after_round(1_000 * MS, 1_350 * MS, 100 * MS), (1_400 * MS, 3));
    }

    #[test]
    fn a_clock_stepped_back_is_noticed() {
        assert!(!clock_stepped_back(1_100 * MS, 1_000 * MS, 100 * MS), "one interval ahead: normal");
        assert!(!clock_stepped_back(1_100 * MS, 900 * MS, 100 * MS), "two: still possible after a fast round");
        assert!(clock_stepped_back(1_100 * MS, 899 * MS, 100 * MS));
        assert!(clock_stepped_back(3_600_000 * MS, 0, 100 * MS), "an hour back");
    }

    #[test]
    fn sleep_returns_at_the_boundary_or_on_a_stepped_clock() {
        let never = AtomicBool::new(false);
        let iv = 10 * MS;
        let deadline = next_boundary(realtime_ns(), iv);
        assert_eq!(sleep_until(deadline, iv, &never), Wake::Reached);
        assert!(realtime_ns() >= deadline);
        // What a boundary looks like right after the clock stepped back an hour.
        assert_eq!(sleep_until(realtime_ns() + 3_600_000 * MS, iv, &never), Wake::ClockSteppedBack);
        let stop = AtomicBool::new(true);
        assert_eq!(sleep_until(realtime_ns() + iv, iv, &stop), Wake::Stopped);
    }

    /// A stop ends a sleep at once when the stopper unparks the sleeper
    /// (not at the end of the slice, a second away); any other wake-up
    /// sleeps on to the boundary.
    #[test]
    fn an_unpark_ends_a_stopped_sleep_and_only_that() {
        use std::sync::Arc;
        let iv = 600_000 * MS;
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let started = Arc::new(std::sync::Barrier::new(2));
        let b = Arc::clone(&started);
        let sleeper = std::thread::spawn(move || {
            b.wait();
            let w = sleep_until(realtime_ns() + iv, iv, &s);
            (w, realtime_ns())
        });
        started.wait();
        stop.store(true, Ordering::Relaxed);
        let asked = realtime_ns();
        sleeper.thread().unpark();
        let (wake, at) = sleeper.join().unwrap();
        assert_eq!(wake, Wake::Stopped);
        // Generous: an unpark wakes in microseconds, the slice is a second.
        assert!(at - asked < SLEEP_SLICE_NS / 2, "stopped {} ms after the unpark", (at - asked) / MS);

        let never = Arc::new(AtomicBool::new(false));
        let deadline = next_boundary(realtime_ns(), 300 * MS) + 300 * MS;
        let n = Arc::clone(&never);
        let sleeper = std::thread::spawn(move || (sleep_until(deadline, 300 * MS, &n), realtime_ns()));
        for _ in 0..5 {
            sleeper.thread().unpark();
        }
        let (wake, at) = sleeper.join().unwrap();
        assert_eq!(wake, Wake::Reached);
        assert!(at >= deadline, "woke {} ms early", (deadline - at) / MS);
    }

    #[test]
    fn no_drift_over_many_rounds() {
        let interval = 10 * MS;
        let mut t = next_boundary(123_456_789, interval);
        for i in 0..10_000 {
            let finished = t + (i % 7) * MS; // work takes 0..6 ms
            let (next, missed) = after_round(t, finished, interval);
            assert_eq!(missed, 0);
            assert_eq!(next % interval, 0);
            t = next;
        }
    }
}
