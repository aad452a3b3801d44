//! Jobs the server hands its agents — today one kind, `load`: several
//! agents' load generators started at one instant (seed 004's wish: "start
//! several clients in sync"). An agent offers the kinds it takes after its
//! welcome; [`Jobs::run`] picks the agents' sessions, converts the server's
//! start instant to each agent's wall clock with the offset the clock
//! probes measured, sends each its job, and waits for every answer. The
//! result's bytes are the job's own (the lab decodes them): the cluster
//! only carries them.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::hosts::Hosts;
use wire::JobResult;

/// Jobs queued to one agent's session, at most (each is one frame).
const QUEUE: usize = 16;

/// A job as its session sends it.
#[derive(Debug)]
pub(super) struct Order {
    pub id: u64,
    pub kind: String,
    /// On the agent's clock.
    pub start_ns: i64,
    pub args: Vec<String>,
}

/// Why a job did not run or gave no result.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JobError {
    #[error("agent {0:?} is not connected (waited {1:?} for it)")]
    NotConnected(String, Duration),
    #[error("agent {host:?} does not take {kind} jobs (it takes: {offers}); start it with --jobs {kind}")]
    NotOffered { host: String, kind: String, offers: String },
    #[error("agent {0:?} is connected but its clock offset is not measured yet")]
    NoClock(String),
    #[error("agent {0:?}: the connection ended before the job's result came")]
    Lost(String),
    #[error("agent {0:?} gave no result within {1:?}")]
    Timeout(String, Duration),
    #[error("agent {0:?}: {1}")]
    Failed(String, String),
}

#[derive(Debug)]
struct Offer {
    kinds: Vec<String>,
    /// The session's connection generation: a newer session replaces it.
    session: u64,
    orders: mpsc::Sender<Order>,
}

/// Shared by the sessions and whoever starts jobs (the API).
#[derive(Debug)]
pub struct Jobs {
    offers: Mutex<HashMap<String, Offer>>,
    waiting: Mutex<HashMap<u64, (String, oneshot::Sender<JobResult>)>>,
    next_id: AtomicU64,
    /// Bumped whenever an offer or a clock probe arrives: what a job
    /// waiting for its agents watches.
    changed: watch::Sender<u64>,
    sessions: AtomicU64,
}

impl Default for Jobs {
    fn default() -> Jobs {
        Jobs {
            offers: Mutex::default(),
            waiting: Mutex::default(),
            next_id: AtomicU64::new(1),
            changed: watch::channel(0).0,
            sessions: AtomicU64::new(1),
        }
    }
}

/// A job's times.
#[derive(Clone, Copy, Debug)]
pub struct JobTimes {
    /// From now to the common start.
    pub start_in: Duration,
    /// Longest wait for an agent to be connected with its clock measured.
    pub connect: Duration,
    /// Longest wait for an answer after the start.
    pub timeout: Duration,
}

/// One agent's part of a job: its clock as the server knew it, and its answer.
#[derive(Debug)]
pub struct AgentRun {
    pub host: String,
    /// Agent clock − server clock, ns, when the job was sent.
    pub offset_ns: i64,
    pub rtt_ns: i64,
    /// The start on the agent's clock.
    pub start_ns: i64,
    pub result: Result<Vec<u8>, JobError>,
}

impl Jobs {
    /// A session registers the kinds its agent offered; returns the
    /// session's number and the queue its orders arrive on.
    pub(super) fn offer(&self, host: &str, kinds: Vec<String>) -> (u64, mpsc::Receiver<Order>) {
        let session = self.sessions.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(QUEUE);
        self.lock_offers().insert(host.to_owned(), Offer { kinds, session, orders: tx });
        self.touch();
        (session, rx)
    }

    /// The session ended: its offer goes (unless a newer session replaced it).
    pub(super) fn withdraw(&self, host: &str, session: u64) {
        let mut offers = self.lock_offers();
        if offers.get(host).is_some_and(|o| o.session == session) {
            offers.remove(host);
        }
    }

    /// A clock probe or anything else a waiting job may need arrived.
    pub(super) fn touch(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// An agent's answer to job `id`.
    pub(super) fn done(&self, host: &str, id: u64, result: JobResult) {
        let mut waiting = self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only the agent the job went to may answer it.
        if waiting.get(&id).is_some_and(|(h, _)| h == host)
            && let Some((_, tx)) = waiting.remove(&id)
        {
            let _ = tx.send(result);
        }
    }

    fn lock_offers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Offer>> {
        self.offers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs job `kind` with `args` on every agent of `hosts` at once:
    /// waits up to `times.connect` for each to be connected with its clock
    /// measured, starts them all `times.start_in` from now on the server's
    /// clock (each agent on its own), and waits up to `times.timeout` after
    /// the start for each answer. Returns the start (server ns) and each
    /// agent's part. Agents missing at the start fail the whole job before
    /// any starts.
    pub async fn run(
        &self,
        clocks: &Hosts,
        hosts: &[String],
        kind: &str,
        args: &[String],
        times: JobTimes,
    ) -> Result<(i64, Vec<AgentRun>), JobError> {
        let JobTimes { start_in, connect, timeout } = times;
        // Every agent present first: none starts unless all can.
        let deadline = tokio::time::Instant::now() + connect;
        let mut changed = self.changed.subscribe();
        let mut targets = Vec::with_capacity(hosts.len());
        for host in hosts {
            loop {
                match self.ready(clocks, host, kind) {
                    Ok(t) => {
                        targets.push(t);
                        break;
                    }
                    Err(e @ JobError::NotOffered { .. }) => return Err(e),
                    Err(e) => {
                        if tokio::time::timeout_at(deadline, changed.changed()).await.is_err() {
                            return Err(match e {
                                JobError::NotConnected(h, _) => JobError::NotConnected(h, connect),
                                e => e,
                            });
                        }
                    }
                }
            }
        }
        let start_ns = model::Timestamp::now().as_nanos() + start_in.as_nanos() as i64;
        // Every order out first (none waits for another's answer), then the answers.
        let mut sent = Vec::with_capacity(targets.len());
        for (host, orders, offset_ns, rtt_ns) in targets {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, (host.clone(), tx));
            let agent_start = start_ns + offset_ns;
            let order = Order { id, kind: kind.to_owned(), start_ns: agent_start, args: args.to_vec() };
            let rx = orders.try_send(order).is_ok().then_some(rx);
            sent.push((host, offset_ns, rtt_ns, agent_start, id, rx));
        }
        let until = tokio::time::Instant::now() + start_in + timeout;
        let mut runs = Vec::with_capacity(sent.len());
        for (host, offset_ns, rtt_ns, start_ns, id, rx) in sent {
            let result = match rx {
                None => Err(JobError::Lost(host.clone())),
                Some(rx) => match tokio::time::timeout_at(until, rx).await {
                    Ok(Ok(Ok(body))) => Ok(body),
                    Ok(Ok(Err(why))) => Err(JobError::Failed(host.clone(), why)),
                    Ok(Err(_)) => Err(JobError::Lost(host.clone())),
                    Err(_) => Err(JobError::Timeout(host.clone(), start_in + timeout)),
                },
            };
            self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
            runs.push(AgentRun { host, offset_ns, rtt_ns, start_ns, result });
        }
        Ok((start_ns, runs))
    }

    /// An agent able to run `kind` now: its queue and clock.
    #[allow(clippy::type_complexity, reason = "a private tuple, named at its one use")]
    fn ready(
        &self,
        clocks: &Hosts,
        host: &str,
        kind: &str,
    ) -> Result<(String, mpsc::Sender<Order>, i64, i64), JobError> {
        let offers = self.lock_offers();
        let offer = offers.get(host).ok_or_else(|| JobError::NotConnected(host.to_owned(), Duration::ZERO))?;
        if !offer.kinds.iter().any(|k| k == kind) {
            let offers = if offer.kinds.is_empty() { "none".to_owned() } else { offer.kinds.join(", ") };
            return Err(JobError::NotOffered { host: host.to_owned(), kind: kind.to_owned(), offers });
        }
        let info = clocks.snapshot().into_iter().find(|h| h.host == host);
        let (Some(offset), Some(rtt)) =
            (info.as_ref().and_then(|h| h.clock_offset_ns), info.as_ref().and_then(|h| h.rtt_ns))
        else {
            return Err(JobError::NoClock(host.to_owned()));
        };
        Ok((host.to_owned(), offer.orders.clone(), offset, rtt))
    }

    /// Agents offering jobs now, with their kinds.
    pub fn offers(&self) -> Vec<(String, Vec<String>)> {
        let mut v: Vec<_> = self.lock_offers().iter().map(|(h, o)| (h.clone(), o.kinds.clone())).collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(start_in_ms: u64, connect_ms: u64, timeout_ms: u64) -> JobTimes {
        let ms = Duration::from_millis;
        JobTimes { start_in: ms(start_in_ms), connect: ms(connect_ms), timeout: ms(timeout_ms) }
    }

    fn clocked(host: &str) -> Hosts {
        let hosts = Hosts::default();
        hosts.connected(host, "0", "127.0.0.1:1", 100_000_000, 1_000_000_000);
        hosts.clock(host, 5_000, 40_000);
        hosts
    }

    #[tokio::test]
    async fn an_agent_gets_the_start_on_its_own_clock_and_its_answer_returns() {
        let jobs = std::sync::Arc::new(Jobs::default());
        let hosts = clocked("a");
        let (_, mut orders) = jobs.offer("a", vec!["load".into()]);
        let agent = {
            let jobs = std::sync::Arc::clone(&jobs);
            tokio::spawn(async move {
                let o = orders.recv().await.unwrap();
                // Another host cannot answer for it.
                jobs.done("b", o.id, Ok(b"forged".to_vec()));
                jobs.done("a", o.id, Ok(o.start_ns.to_le_bytes().to_vec()));
                o
            })
        };
        let (start, runs) = jobs.run(&hosts, &["a".into()], "load", &["x".into()], times(10, 0, 5000)).await.unwrap();
        let order = agent.await.unwrap();
        assert_eq!(order.args, ["x"]);
        assert_eq!(runs[0].start_ns, start + 5_000, "the server's instant plus the agent's offset");
        assert_eq!(runs[0].result, Ok((start + 5_000).to_le_bytes().to_vec()));
    }

    #[tokio::test]
    async fn missing_or_unwilling_agents_fail_the_job_before_any_starts() {
        let jobs = Jobs::default();
        let hosts = clocked("a");
        let run = |names: Vec<String>| {
            let (jobs, hosts) = (&jobs, &hosts);
            async move { jobs.run(hosts, &names, "load", &[], times(0, 20, 0)).await }
        };
        assert!(matches!(run(vec!["a".into()]).await, Err(JobError::NotConnected(h, _)) if h == "a"));
        let (_, mut orders) = jobs.offer("a", vec![]);
        let e = run(vec!["a".into()]).await.unwrap_err();
        assert_eq!(e.to_string(), "agent \"a\" does not take load jobs (it takes: none); start it with --jobs load");
        assert!(orders.try_recv().is_err());
        let (_, mut orders) = jobs.offer("a", vec!["load".into()]);
        let (_, _c) = jobs.offer("c", vec!["load".into()]);
        assert_eq!(run(vec!["a".into(), "c".into()]).await.unwrap_err(), JobError::NoClock("c".into()));
        assert!(orders.try_recv().is_err(), "nothing was sent to a: c could not start");
    }

    #[tokio::test]
    async fn a_withdrawn_session_loses_its_job() {
        let jobs = Jobs::default();
        let hosts = clocked("a");
        let (session, orders) = jobs.offer("a", vec!["load".into()]);
        drop(orders);
        let (_, runs) = jobs.run(&hosts, &["a".into()], "load", &[], times(0, 0, 1000)).await.unwrap();
        assert_eq!(runs[0].result, Err(JobError::Lost("a".into())));
        jobs.withdraw("a", session);
        assert!(jobs.offers().is_empty());
    }
}
