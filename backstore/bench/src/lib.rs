//! # The readahead benchmark, in simulated time
//!
//! Runs every readahead policy in shared and per-worker mode on workloads
//! W1..W5, or on a user's workload file ([`workload`]), through a discrete-event simulation ([`sim`]) of
//! initiator, link, worker pool, the I/O context core (the same code that
//! serves LUNs) and the hddsim disk model. Virtual time makes it fast and
//! exactly reproducible: `rustgt bench readahead` prints the table, checks
//! the targets and writes one plot per workload.

#![forbid(unsafe_code)]

mod plot;
mod report;
pub mod rng;
pub mod sim;
mod targets;
pub mod workload;

pub use report::{run_readahead, BenchOptions, BenchReport, Row};
pub use sim::{Link, SimConfig, SimResult};
pub use targets::{check_targets, TargetCheck};
pub use workload::{
    parse_workloads, standard, Direction, Overrides, Pattern, Stream, Workload, WorkloadError,
    BUILTIN_FILES, MIX_FILE, UNTUNED_FILES,
};
