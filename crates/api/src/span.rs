//! Where a host's data begins inside a range, and how often it is sampled:
//! tables over "the range" divide by the time that was measured (a table
//! opened a minute after start is not a fifteenth of the truth), and rate
//! windows span several samples whatever the source's interval.

use model::{Selector, Timestamp};

/// The start of the data of some series inside a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// The earliest sample time (ns) of any of the series in the range.
    pub first: i64,
    /// The smallest gap (ns) between the first few samples of the series
    /// holding it, when it has two or more: the source's interval.
    pub spacing: Option<i64>,
}

/// The first window read: most ranges hold data from their start.
const PROBE_NS: i64 = 10_000_000_000;

/// Where the data of `sel` begins in `[from, to]`: read in windows from
/// `from` growing eightfold, so a range whose data begins early costs one
/// short read per series, not the whole range.
pub fn start(store: &dyn source::Source, sel: &Selector, from: i64, to: i64) -> Option<Start> {
    let ids: Vec<u32> = store.series(sel).into_iter().map(|(id, _)| id).collect();
    let mut width = PROBE_NS;
    loop {
        let end = from.saturating_add(width).min(to);
        let mut best: Option<(i64, Vec<i64>)> = None;
        for &id in &ids {
            let (ts, _) = store.read(id, Timestamp(from), Timestamp(end));
            if let Some(&t) = ts.first()
                && best.as_ref().is_none_or(|(b, _)| t < *b)
            {
                best = Some((t, ts));
            }
        }
        if let Some((first, ts)) = best {
            let spacing = ts.iter().take(8).zip(ts.iter().skip(1)).map(|(a, b)| b - a).filter(|&d| d > 0).min();
            return Some(Start { first, spacing });
        }
        if end >= to {
            return None;
        }
        width = width.saturating_mul(8);
    }
}
