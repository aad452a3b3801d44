//! Experiments with workloads: the verdict's validation campaign
//! (`diagnose`), experiment files run and compared (`experiment`), the
//! latency degradation curve (`latency`), component limits beside theory
//! (`limits`), HTTP load beside wrk and ab (`load`).

pub mod diagnose;
pub mod experiment;
pub mod latency;
pub mod limits;
pub mod load;
