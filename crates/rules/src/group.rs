//! One rule group at work: every interval boundary, each rule evaluated as
//! an instant query at the boundary; recording rules' results and alerts'
//! `ALERTS`/`ALERTS_FOR_STATE` samples go out as one batch; alerts move
//! pending → firing (after `for:`) → resolved, and the notifier thread sends
//! what changed, and firing alerts again every minute, to Alertmanager.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use model::producer::{Producer, ReportFn};
use model::report::Figure;
use model::{Batch, SeriesKey, Timestamp};

use crate::file::{self, Rule};
use crate::notify::{Alert, Alertmanager};
use crate::template::expand;

/// How often a firing alert is sent again (Prometheus's resend delay).
const RESEND_NS: i64 = 60_000_000_000;
/// How long a resolved alert is still sent (Prometheus keeps 15 minutes).
const RESOLVED_KEEP_NS: i64 = 900_000_000_000;
/// Batches of alerts waiting for the notifier; more are dropped, counted.
const NOTIFY_QUEUE: usize = 64;

/// Counters of every group of a process (`rules` in `/api/v1/status`).
#[derive(Debug, Default)]
pub struct RuleStats {
    pub evaluations: AtomicU64,
    pub evaluation_failures: AtomicU64,
    pub samples: AtomicU64,
    pub missed_intervals: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub alerts_firing: AtomicU64,
    pub alerts_pending: AtomicU64,
    pub notifications_sent: AtomicU64,
    pub notifications_failed: AtomicU64,
    pub notifications_dropped: AtomicU64,
}

impl RuleStats {
    pub fn report(&self) -> [Figure; 10] {
        let n = |a: &AtomicU64| a.load(Relaxed);
        [
            Figure::counter("evaluations", n(&self.evaluations)),
            Figure::counter("evaluation_failures", n(&self.evaluation_failures)),
            Figure::counter("samples", n(&self.samples)),
            Figure::counter("missed_intervals", n(&self.missed_intervals)),
            Figure::counter("dropped_batches", n(&self.dropped_batches)),
            Figure::gauge("alerts_firing", n(&self.alerts_firing)),
            Figure::gauge("alerts_pending", n(&self.alerts_pending)),
            Figure::counter("notifications_sent", n(&self.notifications_sent)),
            Figure::counter("notifications_failed", n(&self.notifications_failed)),
            Figure::counter("notifications_dropped", n(&self.notifications_dropped)),
        ]
    }
}

type Labels = BTreeMap<String, String>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Firing,
    /// Resolved at this time; sent until [`RESOLVED_KEEP_NS`] later.
    Resolved(i64),
}

#[derive(Debug)]
struct Active {
    annotations: Labels,
    active_at: i64,
    /// The expression's value at the last evaluation.
    value: f64,
    state: State,
    /// Firing, no longer holding, kept firing (`keep_firing_for`) since.
    keep_since: Option<i64>,
    /// When it was last sent, and in which state.
    sent: Option<(i64, State)>,
}

#[derive(Debug)]
pub struct Group {
    name: String,
    interval: Duration,
    /// Each rule with its `for:` and `keep_firing_for:`.
    rules: Vec<(Rule, Duration, Duration)>,
    /// `limit:`: most alerts (series) a rule may make; 0: no limit.
    limit: usize,
    /// Per alerting rule: its alerts by their labels.
    alerts: Vec<HashMap<Labels, Active>>,
    /// What the rules read: the embedded store, or on a server in front of
    /// ClickHouse the agents' series there beside the server's own.
    store: Arc<dyn source::Source>,
    notify: Option<SyncSender<Vec<Alert>>>,
    stats: Arc<RuleStats>,
    ids: Ids,
    /// Series written by the last evaluation: one not written again gets a
    /// staleness marker, so it ends there (as in Prometheus).
    last: std::collections::HashSet<u32>,
    /// Errors already logged, by rule index (logged again once it recovers).
    failing: Vec<bool>,
    /// Per rule: its last error, when it was last evaluated and how long
    /// that took (ns).
    status: Vec<(Option<String>, i64, i64)>,
    /// Where the group's view is posted after each evaluation, and the
    /// file it came from.
    board: Option<(Arc<model::alert::AlertBoard>, String)>,
}

impl Group {
    /// A group of `spec` reading `store`, evaluated every `spec.interval`
    /// (or `default_interval`), alerts to `alertmanager` when given.
    pub fn new(
        spec: &file::Group,
        default_interval: Duration,
        store: Arc<dyn source::Source>,
        alertmanager: Option<Alertmanager>,
        stats: Arc<RuleStats>,
    ) -> std::io::Result<Group> {
        let interval =
            spec.interval.as_deref().map_or(Ok(default_interval), file::duration).unwrap_or(default_interval);
        let rules = spec
            .rules
            .iter()
            .map(|r| {
                let d = |s: &Option<String>| s.as_deref().and_then(|f| file::duration(f).ok()).unwrap_or_default();
                (r.clone(), d(&r.for_), d(&r.keep_firing_for))
            })
            .collect::<Vec<_>>();
        let notify = match alertmanager {
            Some(am) => Some(spawn_notifier(am, Arc::clone(&stats))?),
            None => None,
        };
        Ok(Group {
            name: spec.name.clone(),
            interval,
            alerts: rules.iter().map(|_| HashMap::new()).collect(),
            failing: vec![false; rules.len()],
            status: vec![(None, 0, 0); rules.len()],
            limit: spec.limit.unwrap_or(0),
            rules,
            store,
            notify,
            stats,
            ids: Ids::default(),
            last: std::collections::HashSet::new(),
            board: None,
        })
    }

    /// Posts the group's view (its rules' health, its active alerts) to
    /// `board` after each evaluation; `file` names where it was read.
    pub fn with_board(mut self, board: Arc<model::alert::AlertBoard>, file: &str) -> Group {
        self.board = Some((board, file.to_owned()));
        self
    }

    /// A failed evaluation of rule `i`: counted, logged once per run of
    /// failures, shown as the rule's last error.
    fn fail(&mut self, i: usize, e: String) {
        self.stats.evaluation_failures.fetch_add(1, Relaxed);
        if !std::mem::replace(&mut self.failing[i], true) {
            tracing::warn!(
                "rules: group {:?}, rule {i} ({}): {e} (counted; logged once)",
                self.name,
                self.rules[i].0.expr
            );
        }
        self.status[i].0 = Some(e);
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Evaluates every rule at `t` (ns): the batch of what to store, and the
    /// alerts to send.
    pub fn eval(&mut self, t: i64) -> (Batch, Vec<Alert>) {
        let mut batch = Batch::new(Timestamp(t));
        let mut out: Vec<Alert> = Vec::new();
        let store = Arc::clone(&self.store);
        let engine = promql::Engine::new(&*store);
        let (mut firing, mut pending) = (0, 0);
        for i in 0..self.rules.len() {
            let (rule, hold, keep) = self.rules[i].clone();
            let began = std::time::Instant::now();
            self.status[i].1 = t;
            self.stats.evaluations.fetch_add(1, Relaxed);
            let result = match engine.instant(&rule.expr, t) {
                Ok(o) => match o.value {
                    promql::Value::Vector(v) => {
                        Ok(v.into_iter().filter_map(|s| s.points[0].map(|x| (s.labels, x))).collect::<Vec<_>>())
                    }
                    promql::Value::Scalar(v) => Ok(vec![(Vec::new(), v[0])]),
                    other => Err(format!("the expression is a {}, not a vector", other.kind())),
                },
                Err(e) => Err(e.to_string()),
            };
            let result = match result {
                Ok(r) if self.limit > 0 && r.len() > self.limit => {
                    // As Prometheus: over the limit, the rule fails whole
                    // (an alerting rule forgets its alerts).
                    self.alerts[i].clear();
                    let what = if rule.alert.is_some() { "alerts" } else { "series" };
                    self.fail(i, format!("exceeded limit of {} with {} {what}", self.limit, r.len()));
                    self.status[i].2 = began.elapsed().as_nanos() as i64;
                    continue;
                }
                Ok(r) => {
                    if std::mem::take(&mut self.failing[i]) {
                        tracing::info!("rules: group {:?}, rule {i}: evaluates again", self.name);
                    }
                    self.status[i].0 = None;
                    r
                }
                Err(e) => {
                    self.fail(i, e);
                    self.status[i].2 = began.elapsed().as_nanos() as i64;
                    continue;
                }
            };
            match (&rule.record, &rule.alert) {
                (Some(record), _) => {
                    for (labels, v) in result {
                        let mut l: Labels = labels.into_iter().filter(|(k, _)| k != promql::value::NAME).collect();
                        l.extend(rule.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
                        push(&mut batch, &mut self.ids, SeriesKey::new(record.as_str(), l), v);
                    }
                }
                (None, Some(alertname)) => {
                    let mut seen: HashMap<Labels, (f64, Labels)> = HashMap::new();
                    for (labels, v) in result {
                        let base: Labels = labels.into_iter().filter(|(k, _)| k != promql::value::NAME).collect();
                        let mut l = base.clone();
                        for (k, tmpl) in &rule.labels {
                            l.insert(k.clone(), expand(tmpl, &base, v));
                        }
                        l.insert("alertname".into(), alertname.clone());
                        seen.insert(l, (v, base));
                    }
                    let alerts = &mut self.alerts[i];
                    // Gone from the result: a pending alert is dropped, a
                    // firing one resolved.
                    alerts.retain(|labels, a| {
                        if seen.contains_key(labels) {
                            return true;
                        }
                        match a.state {
                            State::Pending => false,
                            State::Firing => {
                                // keep_firing_for: firing on for that long.
                                let since = *a.keep_since.get_or_insert(t);
                                if t - since >= keep.as_nanos() as i64 {
                                    a.state = State::Resolved(t);
                                }
                                true
                            }
                            State::Resolved(at) => t - at < RESOLVED_KEEP_NS,
                        }
                    });
                    for (labels, (v, base)) in seen {
                        let a = alerts.entry(labels).or_insert(Active {
                            annotations: Labels::new(),
                            active_at: t,
                            value: v,
                            state: State::Pending,
                            keep_since: None,
                            sent: None,
                        });
                        (a.value, a.keep_since) = (v, None);
                        if matches!(a.state, State::Resolved(_)) {
                            (a.active_at, a.state, a.sent) = (t, State::Pending, None);
                        }
                        if a.state == State::Pending && t - a.active_at >= hold.as_nanos() as i64 {
                            a.state = State::Firing;
                        }
                        a.annotations =
                            rule.annotations.iter().map(|(k, tmpl)| (k.clone(), expand(tmpl, &base, v))).collect();
                    }
                    let valid_for = 4 * RESEND_NS.max(self.interval.as_nanos() as i64);
                    for (labels, a) in alerts.iter_mut() {
                        let state = match a.state {
                            State::Pending => "pending",
                            State::Firing => "firing",
                            State::Resolved(_) => "",
                        };
                        if !state.is_empty() {
                            let mut l = labels.clone();
                            l.insert("alertstate".into(), state.into());
                            push(&mut batch, &mut self.ids, SeriesKey::new("ALERTS", l), 1.0);
                            push(
                                &mut batch,
                                &mut self.ids,
                                SeriesKey::new("ALERTS_FOR_STATE", labels.clone()),
                                a.active_at as f64 / 1e9,
                            );
                        }
                        match a.state {
                            State::Pending => pending += 1,
                            State::Firing => firing += 1,
                            State::Resolved(_) => {}
                        }
                        // Sent when its state changed, or a minute after it was last sent.
                        let due = match a.sent {
                            None => a.state != State::Pending,
                            Some((at, s)) => s != a.state || t - at >= RESEND_NS,
                        };
                        if due && a.state != State::Pending {
                            a.sent = Some((t, a.state));
                            out.push(Alert {
                                labels: labels.clone(),
                                annotations: a.annotations.clone(),
                                starts_at: a.active_at,
                                ends_at: Some(match a.state {
                                    State::Resolved(at) => at,
                                    _ => t + valid_for,
                                }),
                            });
                        }
                    }
                }
                _ => {}
            }
            self.status[i].2 = began.elapsed().as_nanos() as i64;
        }
        let now: std::collections::HashSet<u32> = batch.points.iter().map(|p| p.0).collect();
        for &gone in self.last.difference(&now) {
            batch.points.push((gone, f64::from_bits(promql::STALE_NAN)));
        }
        self.last = now;
        if let Some((board, file)) = &self.board {
            board.set(self.view(file, t));
        }
        self.stats.alerts_firing.store(firing, Relaxed);
        self.stats.alerts_pending.store(pending, Relaxed);
        self.stats.samples.fetch_add(batch.points.len() as u64, Relaxed);
        (batch, out)
    }

    /// The group as it stands after evaluating at `t`.
    fn view(&self, file: &str, t: i64) -> model::alert::GroupView {
        use model::alert::{ActiveAlert, GroupView, RuleView};
        let secs = |d: Duration| d.as_secs_f64();
        let rules: Vec<RuleView> = self
            .rules
            .iter()
            .zip(&self.alerts)
            .zip(&self.status)
            .map(|(((rule, hold, keep), alerts), (err, at, took))| {
                let mut active: Vec<ActiveAlert> = alerts
                    .iter()
                    .filter(|(_, a)| !matches!(a.state, State::Resolved(_)))
                    .map(|(labels, a)| ActiveAlert {
                        labels: labels.clone(),
                        annotations: a.annotations.clone(),
                        firing: a.state == State::Firing,
                        active_at: a.active_at,
                        value: a.value,
                    })
                    .collect();
                active.sort_by(|a, b| a.labels.cmp(&b.labels));
                RuleView {
                    name: rule.alert.clone().or_else(|| rule.record.clone()).unwrap_or_default(),
                    alerting: rule.alert.is_some(),
                    query: rule.expr.clone(),
                    hold_s: secs(*hold),
                    keep_firing_s: secs(*keep),
                    labels: rule.labels.clone(),
                    annotations: rule.annotations.clone(),
                    last_error: err.clone(),
                    last_eval: *at,
                    eval_ns: *took,
                    alerts: active,
                }
            })
            .collect();
        GroupView {
            name: self.name.clone(),
            file: file.to_owned(),
            interval_s: secs(self.interval),
            limit: self.limit,
            last_eval: t,
            eval_ns: rules.iter().map(|r| r.eval_ns).sum(),
            rules,
        }
    }
}

impl Producer for Group {
    fn name(&self) -> &'static str {
        "rules"
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    /// The groups share one report (`RuleStats`), shown once by whoever
    /// runs them.
    fn report(&self) -> Option<ReportFn> {
        None
    }

    /// Evaluates every rule at `t`; alerts that changed go to the
    /// notifier's queue (full: dropped and counted).
    fn round(&mut self, t: Timestamp, _lateness_ns: i64) -> Option<Batch> {
        let (batch, alerts) = self.eval(t.0);
        if let Some(n) = &self.notify
            && !alerts.is_empty()
            && n.try_send(alerts).is_err()
        {
            self.stats.notifications_dropped.fetch_add(1, Relaxed);
        }
        Some(batch)
    }

    fn missed(&mut self, n: u64) {
        self.stats.missed_intervals.fetch_add(n, Relaxed);
    }

    fn dropped(&mut self) {
        self.stats.dropped_batches.fetch_add(1, Relaxed);
    }
}

/// Series ids of a group's batches: each key's, and the next unused.
#[derive(Debug, Default)]
struct Ids {
    of: HashMap<SeriesKey, u32>,
    next: u32,
}

/// Adds a sample of `key` to the batch, declaring the series the first time.
fn push(batch: &mut Batch, ids: &mut Ids, key: SeriesKey, v: f64) {
    let next = &mut ids.next;
    let id = *ids.of.entry(key).or_insert_with_key(|k| {
        let id = *next;
        *next += 1;
        batch.defs.push((id, k.clone()));
        id
    });
    batch.points.push((id, v));
}

/// The thread that posts alerts, so a slow Alertmanager never delays an
/// evaluation.
fn spawn_notifier(am: Alertmanager, stats: Arc<RuleStats>) -> std::io::Result<SyncSender<Vec<Alert>>> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Alert>>(NOTIFY_QUEUE);
    std::thread::Builder::new().name("rules-notify".into()).spawn(move || {
        let mut failing = false;
        for alerts in rx {
            match am.send(&alerts) {
                Ok(()) => {
                    stats.notifications_sent.fetch_add(alerts.len() as u64, Relaxed);
                    if std::mem::take(&mut failing) {
                        tracing::info!("rules: alerts reach {} again", am.url());
                    }
                }
                Err(e) => {
                    stats.notifications_failed.fetch_add(alerts.len() as u64, Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!("rules: {e} (counted; logged once until it recovers)");
                    }
                }
            }
        }
    })?;
    Ok(tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::Store;

    /// A store without fsyncs in a directory of its own.
    fn test_store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let opts = store::Options { fsync: store::FsyncPolicy::Never, ..Default::default() };
        let store = Arc::new(Store::open(dir.path(), opts).unwrap());
        (dir, store)
    }

    const S: i64 = 1_000_000_000;
    const T0: i64 = 1_800_000_000 * S;

    #[test]
    fn alerts_go_pending_firing_resolved_and_their_series_end_with_a_marker() {
        let (_dir, store) = test_store();
        let spec: crate::RuleFile = serde_norway::from_str(
            "groups:\n- name: g\n  rules:\n  - record: x:doubled\n    expr: x * 2\n  - alert: High\n    expr: x > 5\n    for: 2s\n    labels: {severity: page}\n    annotations: {summary: 'x is {{ $value }} on {{ $labels.h }}'}\n",
        )
        .unwrap();
        let stats = Arc::new(RuleStats::default());
        let mut g =
            Group::new(&spec.groups[0], Duration::from_secs(1), store.clone(), None, Arc::clone(&stats)).unwrap();
        let mut app = store::Appender::default();
        let mut rules_app = store::Appender::default();
        // x: 10 for 4 s, then 1.
        let mut states = Vec::new();
        for i in 0..8i64 {
            let mut b = Batch::new(Timestamp(T0 + i * S));
            if i == 0 {
                b.defs.push((0, SeriesKey::new("x", [("h", "n1")])));
            }
            b.points.push((0, if i < 4 { 10.0 } else { 1.0 }));
            store.append(&mut app, &b).unwrap();
            let (batch, alerts) = g.eval(T0 + i * S);
            store.append(&mut rules_app, &batch).unwrap();
            let state = g.alerts[1].values().next().map(|a| a.state);
            states.push((state, alerts.len()));
            if i == 2 {
                assert_eq!(alerts[0].annotations["summary"], "x is 10 on n1");
                assert_eq!(alerts[0].labels["severity"], "page");
                assert_eq!(alerts[0].labels["alertname"], "High");
            }
        }
        assert_eq!(
            states,
            [
                (Some(State::Pending), 0),
                (Some(State::Pending), 0),
                (Some(State::Firing), 1),
                (Some(State::Firing), 0),
                (Some(State::Resolved(T0 + 4 * S)), 1),
                (Some(State::Resolved(T0 + 4 * S)), 0),
                (Some(State::Resolved(T0 + 4 * S)), 0),
                (Some(State::Resolved(T0 + 4 * S)), 0),
            ]
        );
        // Stored: the recording rule, and ALERTS while it was active, ended
        // by a staleness marker when it resolved.
        let e = promql::Engine::new(&store);
        let v = |q: &str, t: i64| match e.instant(q, t).unwrap().value {
            promql::Value::Vector(v) => v.iter().filter_map(|s| s.points[0]).collect::<Vec<f64>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(v("x:doubled", T0 + 3 * S), [20.0]);
        assert_eq!(v("ALERTS{alertstate=\"pending\"}", T0 + S), [1.0]);
        assert_eq!(v("ALERTS{alertstate=\"firing\"}", T0 + 3 * S), [1.0]);
        assert!(v("ALERTS{alertstate=\"pending\"}", T0 + 3 * S).is_empty(), "pending ended when it fired");
        assert!(v("ALERTS", T0 + 5 * S).is_empty(), "resolved: no ALERTS sample");
        assert_eq!(v("ALERTS_FOR_STATE", T0 + 3 * S), [(T0 / S) as f64]);
        assert_eq!(stats.alerts_firing.load(Relaxed), 0);
    }

    /// `keep_firing_for` keeps a firing alert firing that long after its
    /// condition stops; `limit` fails a rule that makes more alerts (or
    /// series) than it allows — its alerts forgotten, its error shown.
    #[test]
    fn keep_firing_for_and_limit() {
        let (_dir, store) = test_store();
        let spec: crate::RuleFile = serde_norway::from_str(
            "groups:\n- name: g\n  limit: 1\n  rules:\n  - alert: Kept\n    expr: x{h=\"n1\"} > 5\n    keep_firing_for: 2s\n  - alert: Many\n    expr: x > 0\n  - record: x:all\n    expr: x\n",
        )
        .unwrap();
        let board = Arc::new(model::alert::AlertBoard::default());
        let stats = Arc::new(RuleStats::default());
        let mut g = Group::new(&spec.groups[0], Duration::from_secs(1), store.clone(), None, Arc::clone(&stats))
            .unwrap()
            .with_board(Arc::clone(&board), "r.yml");
        let mut app = store::Appender::default();
        let mut kept = Vec::new();
        // x{h=n1}: 10 for 2 s, then 1; x{h=n2}: always 1.
        for i in 0..6i64 {
            let mut b = Batch::new(Timestamp(T0 + i * S));
            if i == 0 {
                b.defs = vec![(0, SeriesKey::new("x", [("h", "n1")])), (1, SeriesKey::new("x", [("h", "n2")]))];
            }
            b.points = vec![(0, if i < 2 { 10.0 } else { 1.0 }), (1, 1.0)];
            store.append(&mut app, &b).unwrap();
            g.eval(T0 + i * S);
            kept.push(g.alerts[0].values().next().map(|a| a.state));
        }
        // Gone at 2 s, kept firing through 3 s, resolved at 4 s (2 s later).
        assert_eq!(
            kept,
            [
                Some(State::Firing),
                Some(State::Firing),
                Some(State::Firing),
                Some(State::Firing),
                Some(State::Resolved(T0 + 4 * S)),
                Some(State::Resolved(T0 + 4 * S)),
            ]
        );
        let view = &board.groups()[0];
        assert_eq!((view.file.as_str(), view.limit, view.last_eval), ("r.yml", 1, T0 + 5 * S));
        let errors: Vec<Option<&str>> = view.rules.iter().map(|r| r.last_error.as_deref()).collect();
        assert_eq!(
            errors,
            [None, Some("exceeded limit of 1 with 2 alerts"), Some("exceeded limit of 1 with 2 series")]
        );
        assert!(g.alerts[1].is_empty(), "over its limit, a rule keeps no alerts");
        assert_eq!(view.rules[0].keep_firing_s, 2.0);
        assert_eq!(stats.evaluation_failures.load(Relaxed), 12);
    }

    /// Issue 42: as a recording rule, a query that grows with steps² ended
    /// the server 8 s after start. Rules are evaluated under the query
    /// limits: the evaluation fails, is counted and shown, and the group
    /// goes on.
    #[test]
    fn a_rule_past_the_query_limits_fails_and_is_counted() {
        let (_dir, store) = test_store();
        let spec: crate::RuleFile = serde_norway::from_str(
            "groups:\n- name: g\n  rules:\n  - record: bomb\n    expr: count(count_over_time(count_values(\"v\", vector(time()))[6h:1s]))\n  - record: one\n    expr: vector(1)\n",
        )
        .unwrap();
        let stats = Arc::new(RuleStats::default());
        let mut g =
            Group::new(&spec.groups[0], Duration::from_secs(1), store.clone(), None, Arc::clone(&stats)).unwrap();
        let (batch, _) = g.eval(1_800_000_000_000_000_000);
        assert_eq!(stats.evaluation_failures.load(Relaxed), 1);
        assert!(g.status[0].0.as_deref().unwrap().contains("points"), "{:?}", g.status[0]);
        assert_eq!(batch.points.len(), 1, "the other rule is stored");
    }
}
