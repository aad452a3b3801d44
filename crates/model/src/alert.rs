//! The rule groups as they stand, for whoever shows them: each group posts
//! its rules' health and its active (pending and firing) alerts after
//! every evaluation; the API reads them (`/api/v1/rules`, `/api/v1/alerts`,
//! the dashboard's banner).

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One active alert.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveAlert {
    /// Its labels, `alertname` among them.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Firing (held for its rule's `for:`), else pending.
    pub firing: bool,
    /// When its condition began to hold (ns).
    pub active_at: i64,
    /// The expression's value at the last evaluation.
    pub value: f64,
}

/// One rule as it stands after its group's last evaluation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuleView {
    /// The alert's or the recorded series' name.
    pub name: String,
    pub alerting: bool,
    pub query: String,
    /// `for:` (alerting rules), seconds.
    pub hold_s: f64,
    /// `keep_firing_for:` (alerting rules), seconds.
    pub keep_firing_s: f64,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Why its last evaluation failed (None: it succeeded).
    pub last_error: Option<String>,
    /// When it was last evaluated (ns; 0: not yet) and how long that took.
    pub last_eval: i64,
    pub eval_ns: i64,
    /// Its pending and firing alerts.
    pub alerts: Vec<ActiveAlert>,
}

/// One rule group as it stands.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupView {
    pub name: String,
    pub file: String,
    pub interval_s: f64,
    /// `limit:` (0: none).
    pub limit: usize,
    pub last_eval: i64,
    pub eval_ns: i64,
    pub rules: Vec<RuleView>,
}

/// Every group as of its last evaluation, replaced whole by the next.
#[derive(Debug, Default)]
pub struct AlertBoard {
    groups: Mutex<BTreeMap<(String, String), GroupView>>,
}

impl AlertBoard {
    /// Sets a group's view (keyed by its file and name).
    pub fn set(&self, group: GroupView) {
        let mut g = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.insert((group.file.clone(), group.name.clone()), group);
    }

    /// Every group, by file and name.
    pub fn groups(&self) -> Vec<GroupView> {
        let g = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.values().cloned().collect()
    }

    /// All active alerts: firing first, then by name and labels.
    pub fn all(&self) -> Vec<ActiveAlert> {
        let mut out: Vec<ActiveAlert> =
            self.groups().into_iter().flat_map(|g| g.rules).flat_map(|r| r.alerts).collect();
        out.sort_by(|a, b| b.firing.cmp(&a.firing).then_with(|| a.labels.cmp(&b.labels)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(name: &str, firing: bool) -> ActiveAlert {
        ActiveAlert {
            labels: BTreeMap::from([("alertname".to_owned(), name.to_owned())]),
            annotations: BTreeMap::new(),
            firing,
            active_at: 1,
            value: 1.0,
        }
    }

    fn group(name: &str, alerts: Vec<ActiveAlert>) -> GroupView {
        let rules = vec![RuleView { name: "r".into(), alerting: true, alerts, ..RuleView::default() }];
        GroupView { name: name.into(), file: "f.yml".into(), rules, ..GroupView::default() }
    }

    #[test]
    fn a_group_replaces_only_its_own_alerts_and_firing_ones_come_first() {
        let board = AlertBoard::default();
        board.set(group("g1", vec![alert("B", false), alert("A", false)]));
        board.set(group("g2", vec![alert("C", true)]));
        let names = |b: &AlertBoard| b.all().iter().map(|a| a.labels["alertname"].clone()).collect::<Vec<_>>();
        assert_eq!(names(&board), ["C", "A", "B"]);
        board.set(group("g1", vec![]));
        assert_eq!(names(&board), ["C"]);
        assert_eq!(board.groups().len(), 2);
    }
}
