//! The rule table: USE-method style, read top to bottom, the first rule
//! whose condition holds names the window. Each threshold is a share of
//! time or a count a person can check on the dashboard; the I/O rule also
//! compares the device's service time with its own hour before.

use crate::Features;

/// The verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    MemoryPressure,
    IoBound,
    NetworkBound,
    CpuBusyUser,
    CpuBusyKernel,
    LockContention,
    Healthy,
    /// Not enough data in the window (no CPU counters).
    Unknown,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::MemoryPressure => "memory-pressure",
            Kind::IoBound => "io-bound",
            Kind::NetworkBound => "network-bound",
            Kind::CpuBusyUser => "cpu-busy-user",
            Kind::CpuBusyKernel => "cpu-busy-kernel",
            Kind::LockContention => "lock-contention",
            Kind::Healthy => "healthy",
            Kind::Unknown => "unknown",
        }
    }
}

/// The rules as documented (docs/diagnosis.md): verdict, condition.
pub const RULES: [(Kind, &str); 7] = [
    (
        Kind::MemoryPressure,
        "memory stall (PSI some) >= 10 % of the time, or >= 0.1 tasks stalled reclaiming memory to allocate",
    ),
    (
        Kind::IoBound,
        "CPU busy (user + kernel) < 50 %, and I/O wait >= 20 % of CPU time or I/O stall (PSI some) >= 20 % or >= 0.5 tasks in uninterruptible sleep (D)",
    ),
    (
        Kind::NetworkBound,
        "CPU busy < 50 %, and >= 0.5 packets waiting in network queueing disciplines, 1 ms or more each on average",
    ),
    (
        Kind::LockContention,
        "CPU busy >= 50 %, and >= 0.2 tasks per CPU waiting for contended kernel locks or >= 20,000 futex calls per second per CPU",
    ),
    (Kind::CpuBusyUser, "CPU busy (user + kernel) >= 80 % of CPU time, user >= kernel"),
    (Kind::CpuBusyKernel, "CPU busy >= 80 %, kernel > user"),
    (Kind::Healthy, "none of the above"),
];

/// A number that decided a verdict: its name, value and the threshold it
/// was held against.
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    pub name: &'static str,
    pub value: f64,
    pub threshold: Option<f64>,
}

/// A window's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub t: i64,
    pub kind: Kind,
    /// 0.5 at a threshold, towards 1 as the deciding numbers pass it.
    pub confidence: f64,
    pub evidence: Vec<Evidence>,
}

/// Confidence from how far a count `value` is past `threshold` (both > 0):
/// 0.5 at it, 0.99 at twice it or more. (A verdict that holds because
/// nothing else did is as sure as the others stayed below theirs.)
fn margin(value: f64, threshold: f64) -> f64 {
    (0.5 + 0.49 * ((value / threshold) - 1.0)).clamp(0.5, 0.99)
}

/// The same for a share of time (at most 1): 0.5 at the threshold, 0.99 at
/// all of the time.
fn margin_share(value: f64, threshold: f64) -> f64 {
    (0.5 + 0.49 * (value - threshold) / (1.0 - threshold)).clamp(0.5, 0.99)
}

/// The verdict for one window's features.
pub fn classify(f: &Features) -> Verdict {
    let ev = |name, value: f64, threshold| Evidence { name, value, threshold };
    let verdict = |kind, confidence, evidence| Verdict { t: f.t, kind, confidence, evidence };
    let (Some(user), Some(system)) = (f.user, f.system) else {
        return verdict(Kind::Unknown, 0.0, Vec::new());
    };
    let busy = user + system;
    let iowait = f.iowait.unwrap_or(0.0);
    // 1. Memory pressure: tasks stalled for memory, by PSI or by the
    // reclaim tracer (which also sees it where PSI is off).
    let psi_m = f.psi_memory.filter(|m| *m >= 0.10);
    let reclaim = f.reclaim_stall.filter(|r| *r >= 0.1);
    if psi_m.is_some() || reclaim.is_some() {
        let confidence = psi_m.map_or(0.0, |m| margin_share(m, 0.10)).max(reclaim.map_or(0.0, |r| margin(r, 0.1)));
        let mut evidence = Vec::new();
        if let Some(m) = f.psi_memory {
            evidence.push(ev("memory stall share", m, Some(0.10)));
        }
        if let Some(r) = f.reclaim_stall {
            evidence.push(ev("tasks stalled reclaiming memory", r, Some(0.1)));
        }
        return verdict(Kind::MemoryPressure, confidence, evidence);
    }
    // 2. I/O-bound: idle CPUs, tasks waiting on the disk.
    // (name, value, threshold, a share of time?)
    let io_signals = [
        ("I/O wait share", Some(iowait), 0.20, true),
        ("I/O stall share (PSI)", f.psi_io, 0.20, true),
        ("tasks in D state", f.tasks_d, 0.5, false),
    ];
    let io_hits: Vec<(&'static str, f64, f64, bool)> =
        io_signals.iter().filter_map(|&(n, v, th, sh)| v.filter(|v| *v >= th).map(|v| (n, v, th, sh))).collect();
    if busy < 0.5 && !io_hits.is_empty() {
        let confidence = io_hits
            .iter()
            .map(|&(_, v, th, share)| if share { margin_share(v, th) } else { margin(v, th) })
            .fold(0.0, f64::max);
        let mut evidence: Vec<Evidence> = io_hits.iter().map(|&(n, v, th, _)| ev(n, v, Some(th))).collect();
        evidence.push(ev("CPU busy share", busy, Some(0.5)));
        if let Some(q) = f.io_in_service {
            evidence.push(ev("block requests in service", q, None));
        }
        if let (Some(now), Some(base)) = (f.io_service, f.io_service_baseline)
            && base > 0.0
        {
            evidence.push(ev("service time / the hour before", now / base, None));
        }
        return verdict(Kind::IoBound, confidence, evidence);
    }
    // 3. Network-bound: idle CPUs, packets queued at a link's limit.
    if let (Some(waiting), Some(wait)) = (f.net_waiting, f.net_wait)
        && busy < 0.5
        && waiting >= 0.5
        && wait >= 0.001
    {
        let evidence = vec![
            ev("packets waiting in qdiscs", waiting, Some(0.5)),
            ev("mean qdisc wait (s)", wait, Some(0.001)),
            ev("CPU busy share", busy, Some(0.5)),
        ];
        return verdict(Kind::NetworkBound, margin(waiting, 0.5).min(margin(wait, 0.001)), evidence);
    }
    // 4. Lock contention: tasks waiting for kernel locks (seed 001's
    // global kernel lock), or the kernel busy handing futexes over.
    if let (Some(wait), Some(cpus)) = (f.lock_wait, f.cpus)
        && busy >= 0.5
        && wait / cpus >= 0.2
    {
        let evidence = vec![
            ev("tasks waiting for kernel locks per CPU", wait / cpus, Some(0.2)),
            ev("CPU busy share", busy, Some(0.5)),
            ev("kernel share", system, None),
        ];
        return verdict(Kind::LockContention, margin(wait / cpus, 0.2), evidence);
    }
    // User-space locks: threads handing a futex back and forth, whether
    // the CPU time goes to the kernel (futex storms) or to spinning before
    // each sleep (a contended mutex). Idle hosts make ~50 a second.
    if let (Some(futex), Some(cpus)) = (f.futex_per_s, f.cpus)
        && busy >= 0.5
        && futex / cpus >= 20_000.0
    {
        let mut evidence = vec![
            ev("futex calls per second per CPU", futex / cpus, Some(20_000.0)),
            ev("CPU busy share", busy, Some(0.5)),
            ev("kernel share", system, None),
        ];
        if let Some(w) = f.futex_wait {
            evidence.push(ev("tasks waiting on futexes", w, None));
        }
        if let Some(r) = f.runqueue {
            evidence.push(ev("tasks waiting for a CPU", r, None));
        }
        return verdict(Kind::LockContention, margin(futex / cpus, 20_000.0), evidence);
    }
    // 5. CPU-busy, user or kernel.
    if busy >= 0.8 {
        let kind = if user >= system { Kind::CpuBusyUser } else { Kind::CpuBusyKernel };
        let mut evidence =
            vec![ev("CPU busy share", busy, Some(0.8)), ev("user share", user, None), ev("kernel share", system, None)];
        if let Some(r) = f.runqueue {
            evidence.push(ev("tasks waiting for a CPU", r, None));
        }
        return verdict(kind, margin_share(busy, 0.8), evidence);
    }
    // 6. Healthy: confident as far as everything stayed below.
    let headroom =
        (busy / 0.8).max(iowait / 0.2).max(f.psi_memory.unwrap_or(0.0) / 0.1).max(f.psi_io.unwrap_or(0.0) / 0.2);
    verdict(
        Kind::Healthy,
        (0.99 - 0.49 * headroom).clamp(0.5, 0.99),
        vec![ev("CPU busy share", busy, Some(0.8)), ev("I/O wait share", iowait, Some(0.2))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(user: f64, system: f64, iowait: f64) -> Features {
        Features {
            user: Some(user),
            system: Some(system),
            iowait: Some(iowait),
            idle: Some(1.0 - user - system - iowait),
            ..Features::default()
        }
    }

    #[test]
    fn the_seeds_three_overloads_and_the_rest() {
        // The paper's CPU-idle server: idle CPUs, tasks in D, I/O wait.
        let io = Features {
            tasks_d: Some(3.0),
            io_service: Some(0.02),
            io_service_baseline: Some(0.002),
            ..f(0.05, 0.05, 0.6)
        };
        let v = classify(&io);
        assert_eq!(v.kind, Kind::IoBound);
        assert!(v.confidence > 0.9, "{v:?}");
        assert!(v.evidence.iter().any(|e| e.name == "service time / the hour before" && e.value == 10.0), "{v:?}");
        // CPU-busy, useful work in the kernel (copy_from_user on top).
        assert_eq!(classify(&f(0.3, 0.65, 0.0)).kind, Kind::CpuBusyKernel);
        let busy = classify(&f(0.9, 0.05, 0.0));
        assert_eq!(busy.kind, Kind::CpuBusyUser);
        assert!(busy.confidence > 0.85, "{busy:?}");
        // Lock contention: the kernel handing a futex back and forth.
        let lock = Features { futex_per_s: Some(100_000.0), cpus: Some(2.0), ..f(0.3, 0.5, 0.0) };
        assert_eq!(classify(&lock).kind, Kind::LockContention);
        // The seed's global kernel lock: tasks queueing for it.
        let bkl = Features { lock_wait: Some(1.5), cpus: Some(2.0), ..f(0.2, 0.75, 0.0) };
        let v = classify(&bkl);
        assert_eq!(v.kind, Kind::LockContention);
        assert_eq!(v.evidence[0].value, 0.75);
        // Threads on one user-space mutex: user time spinning, the futex
        // handed over ~50,000 times a second per CPU.
        let mutex = Features { futex_per_s: Some(110_000.0), cpus: Some(2.0), ..f(0.92, 0.06, 0.0) };
        assert_eq!(classify(&mutex).kind, Kind::LockContention);
        // The same user time with an idle host's futex rate is useful work.
        assert_eq!(classify(&Features { futex_per_s: Some(45.0), ..mutex }).kind, Kind::CpuBusyUser);
        let mem = Features { psi_memory: Some(0.4), ..f(0.3, 0.3, 0.1) };
        assert_eq!(classify(&mem).kind, Kind::MemoryPressure);
        // Without PSI, tasks stalled in reclaim say it.
        let reclaim = classify(&Features { reclaim_stall: Some(0.5), ..f(0.2, 0.7, 0.0) });
        assert_eq!(reclaim.kind, Kind::MemoryPressure);
        assert!(reclaim.confidence > 0.9, "{reclaim:?}");
        // A shaped link: packets queued for milliseconds, CPUs idle.
        let net = Features { net_waiting: Some(1.6), net_wait: Some(0.05), ..f(0.02, 0.03, 0.0) };
        assert_eq!(classify(&net).kind, Kind::NetworkBound);
        // Microsecond waits are a healthy link, however many packets.
        assert_eq!(classify(&Features { net_wait: Some(0.00002), ..net }).kind, Kind::Healthy);
        let idle = classify(&f(0.02, 0.01, 0.0));
        assert_eq!((idle.kind, idle.confidence > 0.9), (Kind::Healthy, true), "{idle:?}");
        // Busy, but not past 80 %, and no other sign: healthy, less sure.
        let warm = classify(&f(0.5, 0.2, 0.0));
        assert_eq!(warm.kind, Kind::Healthy);
        assert!(warm.confidence < 0.6, "{warm:?}");
        assert_eq!(classify(&Features::default()).kind, Kind::Unknown);
    }

    #[test]
    fn every_rule_is_documented() {
        let kinds: Vec<&str> = RULES.iter().map(|r| r.0.name()).collect();
        for k in [
            Kind::MemoryPressure,
            Kind::IoBound,
            Kind::NetworkBound,
            Kind::LockContention,
            Kind::CpuBusyUser,
            Kind::CpuBusyKernel,
            Kind::Healthy,
        ] {
            assert!(kinds.contains(&k.name()), "{k:?}");
        }
    }
}
