//! Clocks and the sampling schedule, shared by everything that samples on a
//! boundary or reports its own cost: the host collector, the SNMP poller,
//! the per-CPU sampler, the ingest server and the lab. Reads of the kernel's
//! clocks in integer nanoseconds (`clock_gettime`: exact, no allocation),
//! [`schedule`]: absolute interval boundaries and the sleep to them, and
//! [`Clock`]: "now" as a value the parts take, the system's or one a test
//! drives ([`Manual`]).

pub mod schedule;

use rustix::time::{ClockId, clock_gettime};

fn ns(id: ClockId) -> i64 {
    let t = clock_gettime(id);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// CPU time of the calling thread.
pub fn thread_cpu_ns() -> i64 {
    ns(ClockId::ThreadCPUTime)
}

/// CPU time of the whole process (every thread).
pub fn process_cpu_ns() -> i64 {
    ns(ClockId::ProcessCPUTime)
}

pub fn monotonic_ns() -> i64 {
    ns(ClockId::Monotonic)
}

/// Wall-clock time, ns since the Unix epoch.
pub fn realtime_ns() -> i64 {
    ns(ClockId::Realtime)
}

/// Online CPUs, from /sys/devices/system/cpu/online (`0-3,8`): the CPUs a
/// per-CPU reader (the sampler, the tracer's event counters) opens.
pub fn online_cpus() -> std::io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("cpu list {:?}", text.trim())))
}

/// A kernel CPU list (`0-3,8`) as its CPUs; None when it is not one.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Where "now" comes from, and how a producer waits for its next boundary:
/// the system's clocks ([`System`]), or in tests a clock they drive
/// ([`Manual`]) — so the schedule, retention, the API's relative ranges and
/// the verdict's windows are tested at the instants a test picks, never by
/// sleeping.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Wall-clock time, ns since the Unix epoch.
    fn now_ns(&self) -> i64;

    /// Waits until `now_ns() >= deadline_ns`, `stop` is set, or the clock
    /// stepped back (see [`schedule::sleep_until`]).
    fn sleep_until(&self, deadline_ns: i64, interval_ns: i64, stop: &std::sync::atomic::AtomicBool) -> schedule::Wake;
}

/// The kernel's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Clock for System {
    fn now_ns(&self) -> i64 {
        realtime_ns()
    }

    fn sleep_until(&self, deadline_ns: i64, interval_ns: i64, stop: &std::sync::atomic::AtomicBool) -> schedule::Wake {
        schedule::sleep_until(deadline_ns, interval_ns, stop)
    }
}

/// A clock a test sets: time moves only when the test says so, and whoever
/// sleeps on it wakes when it reaches their deadline. [`Manual::sleeping`]
/// tells the test when a producer waits and for which boundary, so a test
/// moves time exactly when the producer is ready, never by sleeping.
#[derive(Debug, Default)]
pub struct Manual {
    state: std::sync::Mutex<ManualState>,
    moved: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct ManualState {
    now: i64,
    /// Times the clock was set or advanced.
    moves: u64,
    /// The deadline a thread waits for, and `moves` when it began to wait.
    waiting: Option<(i64, u64)>,
}

impl Manual {
    pub fn new(now_ns: i64) -> Manual {
        Manual {
            state: std::sync::Mutex::new(ManualState { now: now_ns, ..ManualState::default() }),
            ..Manual::default()
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ManualState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the time (backwards too: a clock stepped back).
    pub fn set(&self, now_ns: i64) {
        let mut st = self.state();
        st.now = now_ns;
        st.moves += 1;
        self.moved.notify_all();
    }

    pub fn advance(&self, ns: i64) {
        let now = self.state().now;
        self.set(now + ns);
    }

    /// Waits until a thread sleeps on this clock since it last moved, and
    /// returns the deadline it sleeps to.
    pub fn sleeping(&self) -> i64 {
        let mut st = self.state();
        loop {
            if let Some((deadline, at)) = st.waiting
                && at == st.moves
            {
                return deadline;
            }
            st = self.moved.wait(st).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Clock for Manual {
    fn now_ns(&self) -> i64 {
        self.state().now
    }

    fn sleep_until(&self, deadline_ns: i64, interval_ns: i64, stop: &std::sync::atomic::AtomicBool) -> schedule::Wake {
        let mut st = self.state();
        let wake = loop {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                break schedule::Wake::Stopped;
            }
            if st.now >= deadline_ns {
                break schedule::Wake::Reached;
            }
            if schedule::clock_stepped_back(deadline_ns, st.now, interval_ns) {
                break schedule::Wake::ClockSteppedBack;
            }
            st.waiting = Some((deadline_ns, st.moves));
            self.moved.notify_all();
            // Woken by the test moving the clock; the timeout only notices
            // `stop`, which is set without a notification.
            st = self
                .moved
                .wait_timeout(st, std::time::Duration::from_millis(20))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        st.waiting = None;
        wake
    }
}
