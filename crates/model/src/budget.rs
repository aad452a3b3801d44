//! One memory budget for every query at once. A query reserves the bytes
//! it is about to hold (samples read, points computed, its answer) before
//! it allocates them; a reservation past the budget is refused, never
//! allocated, and the query ends with an error naming the budget. The
//! reservation is given back when the query's [`Reservation`] drops. The
//! figures are estimates of what a query holds (16 bytes a sample or
//! point, more for an answer's JSON), kept on the safe side.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// What all queries of a process may hold together, by default.
pub const QUERY_MEMORY_DEFAULT: usize = 1 << 30;

#[derive(Debug)]
pub struct MemoryBudget {
    capacity: usize,
    used: AtomicUsize,
    /// Reservations refused (`queries_refused_memory` in the status).
    pub refused: AtomicU64,
    /// The most held at once since start.
    pub peak: AtomicUsize,
}

/// A refused reservation: what was asked, what the others hold.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the query would hold {asked_mib} MiB more while queries hold {held_mib} MiB of the {capacity_mib} MiB \
     all queries may hold together; narrow its range or selectors, ask for fewer points, or try again"
)]
pub struct OverBudget {
    pub asked_mib: usize,
    pub held_mib: usize,
    pub capacity_mib: usize,
}

impl MemoryBudget {
    pub fn new(capacity: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            capacity,
            used: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            peak: AtomicUsize::new(0),
        })
    }

    /// The process's budget, shared by every query engine that is not
    /// given its own ([`QUERY_MEMORY_DEFAULT`]).
    pub fn global() -> Arc<MemoryBudget> {
        static GLOBAL: std::sync::OnceLock<Arc<MemoryBudget>> = std::sync::OnceLock::new();
        Arc::clone(GLOBAL.get_or_init(|| MemoryBudget::new(QUERY_MEMORY_DEFAULT)))
    }

    /// Bytes reserved now, by all queries.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// A new, empty reservation against this budget.
    pub fn reservation(self: &Arc<MemoryBudget>) -> Reservation {
        Reservation { budget: Arc::clone(self), held: AtomicUsize::new(0) }
    }

    fn take(&self, bytes: usize) -> Result<(), OverBudget> {
        let mut used = self.used.load(Relaxed);
        loop {
            let next = used.saturating_add(bytes);
            if next > self.capacity {
                self.refused.fetch_add(1, Relaxed);
                return Err(OverBudget {
                    asked_mib: bytes.div_ceil(1 << 20),
                    held_mib: used >> 20,
                    capacity_mib: self.capacity >> 20,
                });
            }
            match self.used.compare_exchange_weak(used, next, Relaxed, Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(next, Relaxed);
                    return Ok(());
                }
                Err(now) => used = now,
            }
        }
    }
}

/// What one query holds of the budget; given back on drop.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    held: AtomicUsize,
}

impl Reservation {
    /// Reserves `bytes` more, or refuses them (nothing reserved then).
    pub fn grow(&self, bytes: usize) -> Result<(), OverBudget> {
        self.budget.take(bytes)?;
        self.held.fetch_add(bytes, Relaxed);
        Ok(())
    }

    /// Bytes this query holds.
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(*self.held.get_mut(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_add_up_refuse_past_the_budget_and_give_back_on_drop() {
        let b = MemoryBudget::new(1000);
        let r1 = b.reservation();
        r1.grow(600).unwrap();
        let r2 = b.reservation();
        let e = r2.grow(500).unwrap_err();
        assert_eq!((e.capacity_mib, b.used(), r2.held()), (0, 600, 0), "a refusal reserves nothing");
        assert_eq!(b.refused.load(Relaxed), 1);
        r2.grow(400).unwrap();
        assert_eq!(b.used(), 1000);
        drop(r1);
        assert_eq!(b.used(), 400);
        r2.grow(usize::MAX).unwrap_err();
        drop(r2);
        assert_eq!((b.used(), b.peak.load(Relaxed)), (0, 1000));
    }
}
