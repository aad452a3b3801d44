//! Bounds on what requests may cost the server together. Queries, series
//! listings and profiles run on blocking threads, never on the async
//! workers (which must keep answering `/ping`, the live tail and agents),
//! at most [`HEAVY_MAX`] at once; a request waits at most [`QUEUE_WAIT`]
//! for a turn and is answered after at most [`HEAVY_TIMEOUT`]. Past either,
//! a 503 says so, and the refusal is counted (`/api/v1/status` → `http`).
//! A timed-out computation finishes in the background holding its turn, so
//! the bound on concurrent work holds even then.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::ApiError;

/// Heavy requests computed at once.
pub const HEAVY_MAX: usize = 4;
/// How long a heavy request waits for its turn.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);
/// How long a heavy request may compute before it is answered with a 503.
pub const HEAVY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct GuardStats {
    /// Heavy requests computed.
    pub heavy: AtomicU64,
    /// Refused: no turn within the queue wait.
    pub busy_refused: AtomicU64,
    /// Answered with a 503 after the time limit.
    pub timed_out: AtomicU64,
}

#[derive(Debug)]
pub struct Guard {
    turns: Arc<Semaphore>,
    pub stats: GuardStats,
}

impl Default for Guard {
    fn default() -> Guard {
        Guard { turns: Arc::new(Semaphore::new(HEAVY_MAX)), stats: GuardStats::default() }
    }
}

impl Guard {
    /// Runs `f` on a blocking thread when a turn is free, within the limits.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, ApiError> {
        let turn = match tokio::time::timeout(QUEUE_WAIT, Arc::clone(&self.turns).acquire_owned()).await {
            Ok(Ok(turn)) => turn,
            _ => {
                self.stats.busy_refused.fetch_add(1, Relaxed);
                return Err(ApiError::Unavailable(format!(
                    "busy: {HEAVY_MAX} queries are running and none finished within {QUEUE_WAIT:?}; try again"
                )));
            }
        };
        self.stats.heavy.fetch_add(1, Relaxed);
        let task = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            f()
        });
        match tokio::time::timeout(HEAVY_TIMEOUT, task).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(ApiError::Internal(format!("query task failed: {e}"))),
            Err(_) => {
                self.stats.timed_out.fetch_add(1, Relaxed);
                Err(ApiError::Unavailable(format!(
                    "the query took longer than {HEAVY_TIMEOUT:?}: narrow the selector or the range, or ask for fewer points"
                )))
            }
        }
    }
}
