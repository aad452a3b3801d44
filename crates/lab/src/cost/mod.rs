//! What kansoku costs, beside its peers and floors in the same run: the host
//! collector per round (`collector_cost`), whole processes beside PCP,
//! collectd, node_exporter and the floor of reading the same files
//! (`up_cost`), the kernel tracer beside syscount/runqlat (`trace_cost`), the
//! SNMP poller beside its kernel floor (`snmp_bench`).

pub mod collector_cost;
pub mod snmp_bench;
pub mod trace_cost;
pub mod up_cost;
