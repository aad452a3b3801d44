//! The alerts the rules engine holds right now (pending and firing), for
//! whoever shows them: the rule groups post theirs after every evaluation,
//! the API reads them all (`/api/v1/alerts`, the dashboard's banner).

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

/// Every group's active alerts, replaced whole by each evaluation.
#[derive(Debug, Default)]
pub struct AlertBoard {
    groups: Mutex<BTreeMap<String, Vec<ActiveAlert>>>,
}

impl AlertBoard {
    /// Sets `group`'s active alerts.
    pub fn set(&self, group: &str, alerts: Vec<ActiveAlert>) {
        let mut g = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.insert(group.to_owned(), alerts);
    }

    /// All active alerts: firing first, then by name and labels.
    pub fn all(&self) -> Vec<ActiveAlert> {
        let g = self.groups.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<ActiveAlert> = g.values().flatten().cloned().collect();
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

    #[test]
    fn a_group_replaces_only_its_own_alerts_and_firing_ones_come_first() {
        let board = AlertBoard::default();
        board.set("g1", vec![alert("B", false), alert("A", false)]);
        board.set("g2", vec![alert("C", true)]);
        let names = |b: &AlertBoard| b.all().iter().map(|a| a.labels["alertname"].clone()).collect::<Vec<_>>();
        assert_eq!(names(&board), ["C", "A", "B"]);
        board.set("g1", vec![]);
        assert_eq!(names(&board), ["C"]);
    }
}
