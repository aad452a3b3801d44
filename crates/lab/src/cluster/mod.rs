//! Agents and servers: transfer over the wire by agents, intervals and cores,
//! and the paper's replay (`transfer`, `replay`), interference of sampling
//! with a workload (`interference`), and the HTML report of those runs
//! (`report`).

pub mod interference;
pub mod replay;
pub mod report;
pub mod transfer;
