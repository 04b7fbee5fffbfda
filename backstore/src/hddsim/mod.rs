//! # hddsim: a deterministic 7200 rpm disk (or md RAID-0 of two)
//!
//! [`model`] is the disk model as pure arithmetic on nanoseconds. It runs
//! two ways:
//! - in virtual time, inside the benchmark's discrete-event simulation;
//! - in real time, as the [`HddSimBackstore`] engine: each request reserves
//!   its slot on the simulated actuators, the data moves to or from RAM or
//!   a sparse file, and the caller sleeps until the model says the disk is
//!   done. LUNs that name the same device share its actuators, so two LUNs
//!   on one simulated md0 compete for the heads as the seed's partitions did.

pub(crate) mod engine;
pub mod model;

pub use engine::{HddSimBackstore, HddSimOptions, SimDevice};
pub use model::{ArrayParams, ArrayState, DiskParams};
