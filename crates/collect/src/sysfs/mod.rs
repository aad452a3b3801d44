//! Sources under `/sys`.

pub mod cpuidle;
