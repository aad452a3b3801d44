//! Experiments anyone can repeat — seed 001's shared benchmark procedures
//! (`seeds/001_ad0cddd3f1c2901a.txt`: an environment definition, a
//! procedure anyone can follow, the results, comparisons of default against
//! tuned): the experiment file (`spec`: set-up, the workload command with
//! parameters to sweep, repetitions, warm-up, randomised order, tear-down),
//! the machine and software captured automatically and diffed between two
//! results (`environment`), the workload's own output read into metrics by
//! a named parser (`metrics`), and the statistics that say whether a
//! change between two results is real (`stats`: medians, the Mann–Whitney
//! U test, bootstrap confidence intervals). Running it is `kansoku lab run`
//! (crate `lab`), which writes a result this crate reads back.
//!
//! Commands take placeholders (`spec::expand`), the runs' order is shuffled
//! by a printed seed (`spec::schedule`), and a parser is a preset by name or
//! regex/JSON (`metrics::Parser`).

pub mod environment;
pub mod metrics;
pub mod spec;
pub mod stats;

pub use spec::{Experiment, Point};
