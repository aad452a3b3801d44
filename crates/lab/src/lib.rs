//! `kansoku lab`: reproducible experiments. Each prints its machine setup and
//! its figures beside the peer measured in the same run.

pub mod collector_cost;
pub mod perf_script;
pub mod snmp_bench;
pub mod soak;
pub mod store_bench;
pub mod synth;
