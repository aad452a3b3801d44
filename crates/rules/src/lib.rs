//! Prometheus rule files on kansoku's store: recording rules store their
//! expression's result as new series, alerting rules keep each alert's
//! state (pending for `for:`, then firing, then resolved), store it as
//! `ALERTS` and `ALERTS_FOR_STATE` series, and send it to Alertmanager's v2
//! API. Groups evaluate at their own interval on wall-clock boundaries —
//! down to 100 ms, where Prometheus stops at seconds — each on its own
//! thread, handing their samples to a bounded queue like any producer.
//!
//! Alerting rules honour `keep_firing_for` and `limit`; each group posts its
//! view (rule health, active alerts) to a `model::alert::AlertBoard` that the
//! API lists (`/api/v1/rules`, `/api/v1/alerts`), and counts what it did
//! (`RuleStats`).

pub mod file;
mod group;
pub mod notify;
pub mod template;

pub use file::{Group as GroupSpec, Rule, RuleFile, load};
pub use group::{Group, RuleStats};
pub use notify::Alertmanager;
