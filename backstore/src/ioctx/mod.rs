//! # The per-LUN I/O context
//!
//! One [`IoContext`] per LUN, shared by all the workers that serve it. It
//! wraps the LUN's engine and is itself a [`Backstore`](crate::Backstore),
//! so the SCSI core is unchanged: it still holds one `Arc<dyn Backstore>`.
//! It owns what SCST's shared io_context and Linux's readahead gave a LUN:
//!
//! - the readahead policy state ([`ReadaheadPolicy`]): one state for the
//!   LUN, or one per worker in [`ContextMode::PerWorker`] (the broken
//!   pre-patch behaviour, kept for comparison);
//! - a readahead cache of 4 KiB pages with a memory bound, coherent with
//!   writes (a read that starts after a write returned sees its data);
//! - a backing-read queue that coalesces adjacent requests into large
//!   reads, served by a few I/O threads so readahead runs ahead of demand;
//! - per-LUN statistics ([`IoStats`]);
//! - on a seeking device shared with other LUNs, turns at the device
//!   ([`DeviceGate`]), so that the contexts' streams do not interleave at
//!   the disk.
//!
//! Policies are pure state machines ([`Readahead`]) over a view of the
//! cache ([`RaView`]); the benchmark's simulation runs the same code in
//! virtual time. This layer never sees a CDB.

mod cache;
mod context;
mod core;
mod gate;
mod linux;
mod options;
mod planners;
mod policy;
mod queue;
pub mod simulation;
mod stats;
mod streams;

pub use cache::PAGE;
pub use context::IoContext;
pub use gate::{DeviceGate, GateStats};
pub use linux::LinuxReadahead;
pub use planners::new_policy;
pub use policy::{
    ContextMode, NoReadahead, PolicyParams, RaView, Readahead, ReadaheadChoice, ReadaheadPolicy,
    KERNEL_MAX_PAGES,
};
pub use stats::{IoStats, Log2Histogram};
pub use streams::{StreamParams, Streams};

pub use options::{DeviceHints, DeviceSlice, IoContextOptions};
