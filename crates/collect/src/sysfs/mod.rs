//! Sources under `/sys`.

pub mod block;
pub mod cpuidle;
